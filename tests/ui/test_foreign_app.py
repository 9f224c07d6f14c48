"""A user's own Flower App's run on the dashboard, ``testbed show`` and ``testbed export``
like the testbed's own (issue 28): its metric series by name, its statuses, its events.

ONE real run, made once for the module: Flower's official quickstart-numpy
(``tests/data/apps/``, unmodified) on ``--backend simulation``, 3 rounds, e-2 crashed
and e-1's link cut before round 2 (as ``tests/fl/test_userapp.py``). The app records no
accuracy, only its MetricRecord keys (``random_metric`` from train, ``random_metric[i]``
from evaluate's list). The pages run through Streamlit's AppTest against a real
controller over the run's SQLite store; the CLI through typer's runner.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from rich.console import Console
from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from testbed import cli
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.fl.test_userapp import quickstart_with_faults
from tests.ui.conftest import ROOT, Controller, experiments_dir, serve
from tests.ui.test_pages import open_page

pytestmark = pytest.mark.slow  # a real simulation run (Ray) and five pages

APP = str(ROOT / "ui" / "app.py")
#: The app's own series: train's scalar, evaluate's list of 3.
APP_SERIES = ["random_metric", "random_metric[0]", "random_metric[1]", "random_metric[2]"]
@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Controller, str]]:
    """The one quickstart-numpy run, and a controller over its store."""
    root = tmp_path_factory.mktemp("foreign")
    text = quickstart_with_faults(timeout_s=6)  # e-2 crashes, e-1 cut off, round 2
    store = RunStore(root / "runs")
    res = run_experiment(parse_spec(text), store, spec_path="inline", backend="simulation")
    store.close()
    assert res.status == "completed", res.summary
    ctl = serve(root / "runs", experiments_dir(root / "experiments"))
    yield ctl, res.run_id
    ctl.stop()


@pytest.fixture
def app(run: tuple[Controller, str], monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("TESTBED_CONTROLLER_URL", run[0].url)
    monkeypatch.delenv("TESTBED_TOKEN", raising=False)
    import streamlit as st

    st.cache_data.clear()  # caches outlive an AppTest
    return AppTest.from_file(APP, default_timeout=60)


def texts(at: AppTest) -> str:
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption])


def chart(at: AppTest, y_title: str) -> tuple[dict[str, Any], pd.DataFrame]:
    """The Vega-Lite chart whose y axis is ``y_title``: its spec and the data it plots."""
    for c in at.get("vega_lite_chart"):
        spec = json.loads(c.proto.spec)
        if spec.get("encoding", {}).get("y", {}).get("title") == y_title:
            return spec, convert_arrow_bytes_to_pandas_df(c.proto.data.data)
    raise AssertionError(f"no chart of {y_title!r}")


def delivered_mbit_s(store_root: Path, run_id: str) -> dict[tuple[float, str], float]:
    """Per (round, node): the bytes that made a round trip (sent - lost + every reply's)
    x 8 over the summed round trips, from the store's rows (train and evaluate replies)."""
    sums: dict[tuple[float, str], dict[str, float]] = {}
    store = RunStore(store_root)
    for r, node, name, value, _ts in store.metrics(run_id):
        if r is not None and node is not None and value is not None:
            cell = sums.setdefault((float(r), node), {})
            cell[name] = cell.get(name, 0.0) + value
    store.close()
    out = {}
    for k, c in sums.items():
        if {"bytes_sent", "bytes_received", "round_trip_s"} <= set(c):
            moved = c["bytes_sent"] - c.get("bytes_lost", 0.0) + c["bytes_received"]
            out[k] = moved * 8 / 1e6 / c["round_trip_s"]
    return out


def test_live_page_plots_the_apps_series_by_name_with_statuses_and_events(
    app: AppTest, run: tuple[Controller, str]
) -> None:
    at = open_page(app, "live")
    out = texts(at)
    assert "status **completed**" in out and "on `simulation`" in out
    assert "final global accuracy" not in out  # the header invents none
    assert "**Accuracy per round**" not in out  # no empty accuracy charts ...
    assert "no accuracy or loss of the testbed's FL app recorded" in out  # ... said why
    assert f"recorded by the app: {', '.join(APP_SERIES)}, num-examples · by the testbed:" in out
    picker = next(s for s in at.selectbox if s.label == "Metric series")
    assert picker.value == "random_metric" and set(APP_SERIES) <= set(picker.options)
    _spec, data = chart(at, "random_metric")
    plotted = set(zip(data["round"], data["node"], strict=True))
    assert {(r, "e-3") for r in (1.0, 2.0, 3.0)} <= plotted and (2.0, "e-2") not in plotted
    # throughput: train's and evaluate's replies of a round together, lost bytes left out
    _spec, tp = chart(at, "Mbit/s")
    drawn = {(r, n): v for r, n, v in zip(tp["round"], tp["series"], tp["value"], strict=True)}
    expected = delivered_mbit_s(run[0].store_root, run[1])
    assert drawn.keys() == expected.keys() and (2.0, "e-1") in drawn
    assert all(drawn[k] == pytest.approx(v) for k, v in expected.items())
    picker.set_value("random_metric[2]").run()
    _spec, data = chart(at, "random_metric[2]")
    assert set(data["name"]) == {"random_metric[2]"} and "e-3" in set(data["node"])
    # statuses: a grid node x round, then the ones not completed with their reasons
    grid = at.dataframe[0].value
    assert grid.loc["e-1"].tolist() == ["completed", "failed", "completed"]  # cut off in 2
    assert grid.loc["e-2"].tolist() == ["completed", "excluded", "excluded"]  # crashed
    assert grid.loc["e-3"].tolist() == ["completed"] * 3
    why = at.dataframe[1].value.set_index(["round", "node"])["reason"]
    assert "no reply within the app's timeout" in why[(2, "e-1")]
    assert why[(3, "e-2")].startswith("not sampled: crash")
    # events: the faults, their effects and the run's own
    events = texts(at)
    for line in ("fault_injected e-2 (round 2)", "node_down e-2 (round 2)",
                 "fault_injected e-1 (round 2)", "link_partitioned e-1 (round 2)",
                 "link_healed e-1"):  # fmt: skip
        assert line in events, line
    assert "run_finished" in events


def test_results_page_offers_the_apps_series_and_invents_no_accuracy(
    app: AppTest, run: tuple[Controller, str]
) -> None:
    at = open_page(app, "results")
    assert at.multiselect[0].value == [run[1]]
    side = at.table[0].value
    assert side.loc["final global acc", run[1]] == "not recorded"
    picker = next(s for s in at.selectbox if s.label.startswith("Metric"))
    assert picker.value == "random_metric" and set(APP_SERIES) <= set(picker.options)
    _spec, data = chart(at, "random_metric")
    assert sorted(data["round"]) == [1.0, 2.0, 3.0] and set(data["series"]) == {run[1]}


def test_timeline_and_fleet_show_the_apps_events_and_the_crash(
    app: AppTest, run: tuple[Controller, str]
) -> None:
    at = open_page(app, "timeline")
    events = at.table[0].value
    kinds = events["kind"].tolist()
    for kind in ("user_app", "run_start", "fault_injected", "node_down", "link_partitioned"):
        assert kind in kinds, kind
    assert set(events.loc[events["kind"] == "node_down", "node"]) == {"e-2"}
    assert "no rows of global_acc in this run: its app (a user's Flower App)" in texts(at)
    lanes = json.loads(at.get("vega_lite_chart")[-1].proto.spec)
    states = {(b["lane"], b["state"]) for b in lanes["layer"][0]["data"]["values"]}
    assert ("e-2", "down") in states and ("e-1", "partitioned") in states
    at = open_page(at, "fleet")
    dot = at.get("graphviz_chart")[0].proto.spec
    e2 = next(ln for ln in dot.splitlines() if ln.strip().startswith('"e-2" ['))
    assert "down" in e2


def _invoke(*args: str) -> str:
    res = CliRunner().invoke(cli.app, list(args))
    assert res.exit_code == 0, res.output
    return res.output


def test_show_and_export_list_the_apps_series_statuses_and_events(
    run: tuple[Controller, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl, run_id = run
    monkeypatch.setattr(cli, "console", Console(width=250, no_color=True))
    out = _invoke("show", run_id, "--out", str(ctl.store_root))
    rows = [" ".join(ln.replace("│", " ").split()) for ln in out.splitlines()]
    assert "final_global_acc" not in out and "accuracy" not in out  # none invented
    for name in APP_SERIES:  # each series by name: rows, nodes, rounds 1-3, per round
        assert any(r.startswith(f"{name} ") and " 1-3 1: " in r for r in rows), name
    assert "e-1 ok FAIL ok 2 1 0" in rows and "e-2 ok excl excl 1 0 2" in rows
    assert any("no reply within the app's timeout" in r and "(e-1 r2)" in r for r in rows)
    for kind in ("fault_injected", "node_down", "link_partitioned", "user_app"):
        assert any(kind in r for r in rows), kind
    assert any("run_start" in r and "app=quickstart-numpy" in r for r in rows)
    path = tmp_path / "m.csv"
    _invoke("export", run_id, "--out", str(ctl.store_root), "-o", str(path))
    with path.open() as f:
        exported = list(csv.DictReader(f))
    by_name = {(r["name"], r["node"], float(r["round"])) for r in exported if r["round"]}
    assert {("random_metric", "e-3", float(k)) for k in (1, 2, 3)} <= by_name
    assert ("random_metric", "e-2", 2.0) not in by_name  # crashed: nothing made up
    assert {n for n, _node, _r in by_name} >= {*APP_SERIES, "bytes_sent", "round_trip_s"}
