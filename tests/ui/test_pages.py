"""Every dashboard page through Streamlit's AppTest, against a real controller (uvicorn on
loopback) over a real SQLite store seeded through ``RunStore``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from testbed.chaos import ChaosEngine
from testbed.planner import make_plan
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.ui.conftest import ROOT, Controller, seed_compress_run

APP = str(ROOT / "ui" / "app.py")
DOWN_COLOUR = "#f85149"  # ui.charts.NODE_COLOURS["down"]


@pytest.fixture
def app(controller: Controller, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    monkeypatch.setenv("TESTBED_CONTROLLER_URL", controller.url)
    monkeypatch.delenv("TESTBED_TOKEN", raising=False)
    import streamlit as st

    st.cache_data.clear()  # caches outlive an AppTest; each test sees its own controller
    yield AppTest.from_file(APP, default_timeout=60)


def open_page(at: AppTest, page: str) -> AppTest:
    at.switch_page(f"screens/{page}.py")
    at.run()
    assert not at.exception, at.exception
    return at


def texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [str(e.value) for e in at.error] + [str(s.value) for s in at.success]
    return "\n".join(parts)


def graph(at: AppTest) -> str:
    charts = at.get("graphviz_chart")
    assert charts, "no fleet graph on the page"
    return charts[0].proto.spec


def test_fleet_page_draws_run_state_and_planned_fleet(app: AppTest, seeded: dict) -> None:
    at = open_page(app, "fleet")
    at.selectbox[0].set_value(seeded["a"]).run()  # the run picker (finished run a)
    dot = graph(at)
    for node in ("cloud", "edge-1", "edge-2", "edge-3", "fog"):
        assert f'"{node}"' in dot
    assert 'subgraph "cluster_edge"' in dot and 'subgraph "cluster_cloud"' in dot
    edge2 = next(ln for ln in dot.splitlines() if ln.strip().startswith('"edge-2" ['))
    assert "down" in edge2 and DOWN_COLOUR in edge2  # crashed in round 2
    assert "100 Mbps / 20 ms" in dot and "1000 Mbps / 5 ms" in dot
    assert "#3fb950" in next(ln for ln in dot.splitlines() if ln.strip().startswith('"fog" ['))
    assert any("on `local`" in c.value for c in at.caption)  # the backend it ran on
    at.radio[0].set_value("an experiment file").run()
    at.selectbox[0].set_value("tiny.yaml").run()
    dot = graph(at)
    assert '"edge-1"' in dot and '"edge-2"' in dot and '"edge-3"' not in dot
    assert "planned" in dot and "50 Mbps / 10 ms" in dot


def test_experiments_page_validates_inline(app: AppTest, controller: Controller) -> None:
    at = open_page(app, "experiments")
    assert at.selectbox[0].value == "quickstart.yaml"
    assert "valid: **quickstart** (fl)" in texts(at) and "= 1 run(s)" in texts(at)
    assert not at.button[0].disabled  # Launch
    bad = (
        at.text_area[0]
        .value.replace("rounds: 5", "rounds: 0")
        .replace("batch_size: 32", "batch_size: 32\n    colour: blue")
    )
    at.text_area[0].set_value(bad).run()
    out = texts(at)
    assert "2 problem(s)" in out
    assert "**line 20** · `workload.fl.rounds`" in out
    assert "`workload.fl.colour` — unknown key" in out
    assert at.button[0].disabled  # cannot launch an invalid spec
    at.text_input[0].set_value("workload.fl.rounds=2").run()  # an override fixes one
    assert "1 problem(s)" in texts(at)


def test_experiments_page_offers_the_backends_this_host_has(
    app: AppTest, controller: Controller, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")  # no engine
    at = open_page(app, "experiments")
    picker = next(s for s in at.selectbox if s.label == "Backend")
    assert picker.value == "local"
    offered = [o.split(" — ")[0] for o in picker.options]
    assert "local" in offered and "docker" not in offered
    [why] = [e for e in at.expander if "docker" in e.label]
    assert "Not available on this host now" in why.label
    assert any("**docker** — --backend docker: no Docker engine" in m.value for m in at.markdown)
    if "simulation" not in offered:  # (no Ray here)
        return
    picker.set_value("simulation").run()
    assert "valid: **quickstart** (fl)" in texts(at) and not at.button[0].disabled
    fault = "\nfaults:\n  - {kind: superlink-restart, at_round: 2}\n"
    at.text_area[0].set_value(at.text_area[0].value + fault).run()
    assert "faults[0].kind: 'superlink-restart' cannot be simulated" in texts(at)
    assert at.button[0].disabled  # Launch: the simulation refuses it


def test_live_page_shows_curves_timeline_and_follows_new_rows(
    app: AppTest, seeded: dict, controller: Controller
) -> None:
    at = open_page(app, "live")
    assert at.selectbox[0].value == seeded["live"]  # newest running run first
    out = texts(at)
    assert "status **running**" in out and "round 2/2" in at.get("progress")[0].proto.text
    assert "on `local`" in out
    assert "node_down edge-2 (round 2)" in out and "fault_injected edge-2" in out
    # acc, loss, 2 per silo, a metric series by name, throughput, timeline
    assert len(at.get("vega_lite_chart")) == 7
    store = RunStore(controller.store_root)
    store.add_event(seeded["live"], "node_restarted", round=2, node="edge-2", down_s=3.0)
    store.close()
    at.run()
    out = texts(at)
    assert "node_restarted edge-2" in out
    faults = next(m.value for m in at.markdown if m.value.startswith("- `"))
    assert faults.count("node_down edge-2") == 1  # the cursor fetched only the new rows
    assert faults.index("node_down edge-2") < faults.index("node_restarted edge-2")
    # the list of latest events keeps the last round's end when the run's end records
    # a node_identified per node after it (bookkeeping, left out)
    store = RunStore(controller.store_root)
    store.add_event(seeded["live"], "round_end", round=2)
    for node in ("edge-1", "edge-2", "edge-3", "fog"):
        store.add_event(seeded["live"], "node_identified", node=node, node_id="1")
    store.close()
    at.run()
    latest = next(c.value for c in at.caption if "latest:" in c.value)
    assert "round_end (round 2)" in latest and "node_identified" not in latest, latest
    at.selectbox[0].set_value(seeded["a"]).run()
    assert "status **completed**" in texts(at) and "final global accuracy **0.700**" in texts(at)


def test_the_live_list_leaves_out_what_the_timeline_leaves_out() -> None:
    """The dashboard does not import the testbed: its copy of the bookkeeping kinds must
    stay the controller timeline's."""
    from testbed.controller.timeline import QUIET
    from ui.charts import BOOKKEEPING_EVENTS

    assert BOOKKEEPING_EVENTS == QUIET


class RecordingNode:
    """A node handle of a fleet that is not started here: records what is done to it."""

    def __init__(self, fleet: RecordingFleet, name: str) -> None:
        self.fleet, self.name = fleet, name

    def kill(self) -> None:
        self.fleet.killed.append(self.name)


class RecordingFleet:
    """The backend side of a fleet that is not started here: the chaos engine and the
    fault kinds under test are real and record what they would do to the nodes."""

    links: dict[str, object] = {}

    def __init__(self) -> None:
        self.killed: list[str] = []

    def node(self, name: str) -> RecordingNode:
        return RecordingNode(self, name)


def test_chaos_page_injects_through_the_store(
    app: AppTest, seeded: dict, controller: Controller
) -> None:
    store = RunStore(controller.store_root)
    run_dir = controller.store_root / seeded["live"]
    plan = make_plan(parse_spec((run_dir / "spec.resolved.yaml").read_text()))
    fleet = RecordingFleet()
    engine = ChaosEngine(plan, fleet, store, seeded["live"], 0)
    stop = threading.Event()

    def tick() -> None:  # what the running run's pump loop does every 0.25 s
        while not stop.is_set():
            engine.tick()
            time.sleep(0.1)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        at = open_page(app, "chaos")
        assert at.selectbox[0].value == seeded["live"]
        # (the first kind by name is the default; other test modules register kinds)
        at.selectbox[1].set_value("crash").run()
        at.selectbox[2].set_value("edge-3").run()
        inject = next(b for b in at.button if b.label == "Inject now")
        inject.click().run()
        assert any("applied" in str(s.value) for s in at.success), texts(at)
        assert fleet.killed == ["edge-3"]
        kinds = [(e[2], e[4]) for e in store.events(seeded["live"])]
        assert ("node_down", "edge-3") in kinds
        [(_i, _ts, spec, status)] = store.injections(seeded["live"])
        assert json.loads(spec)["node"] == "edge-3" and status == "applied"
        dot = graph(at)
        edge3 = next(ln for ln in dot.splitlines() if ln.strip().startswith('"edge-3" ['))
        assert DOWN_COLOUR in edge3
        at.selectbox[1].set_value("outage").run()  # kinds show their parameters
        assert any(n.label.startswith("duration_s") for n in at.number_input)
    finally:
        stop.set()
        ticker.join(5)
        store.close()


def test_results_page_compares_runs(app: AppTest, seeded: dict) -> None:
    at = open_page(app, "results")
    at.multiselect[0].set_value([seeded["a"], seeded["b"]]).run()
    tables = [t.proto for t in at.table]
    side = json.dumps(str(tables[0]))
    assert seeded["a"] in side and seeded["b"] in side
    diff = str(tables[1])
    assert "seed" in diff and "42" in diff and "7" in diff
    assert "1 key(s) differ" in texts(at)
    assert len(at.get("vega_lite_chart")) == 1
    assert len(at.get("download_button")) == 2


def test_radio_page_shows_accuracy_load_latency_and_plots(app: AppTest, library_runs: dict) -> None:
    at = open_page(app, "radio")
    assert at.selectbox[0].value == library_runs["radio"]
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    y = [s["encoding"]["y"]["title"] for s in specs]
    x = [s["encoding"]["x"]["field"] for s in specs]
    assert y[:2] == ["mean accuracy (measured, fraction)"] * 2 and x[:2] == ["num_tasks", "snr_db"]
    assert "communication_load_symbols (measured, complex symbols per inference)" in y
    assert "latency_s (modelled, s)" in y and "energy_j (modelled, J)" in y
    assert all(s["encoding"]["color"]["field"] == "scheme" for s in specs)
    assert len(at.get("image")) == 3  # accuracy_vs_k, accuracy_vs_snr, load_latency_vs_k
    at.selectbox[1].set_value(0.0).run()  # accuracy vs K at 0 dB
    ratios = str(at.dataframe[0].value)
    assert "latency_s (modelled)" in ratios and "load_symbols (measured)" in ratios


def test_compression_page_shows_per_eps_and_modelled_engine(
    app: AppTest, library_runs: dict
) -> None:
    at = open_page(app, "compression")
    assert at.selectbox[0].value == library_runs["compress"]
    table = at.dataframe[0].value
    assert list(table.index) == [0.1, 0.5, 0.9]
    assert table["accuracy_before (measured)"].tolist() == [0.95] * 3
    assert "ratio (measured)" in table and "modelled_speedup_x (modelled)" in table
    assert "**MODELLED**: cost model on profile `riscv-edge-ttd`" in texts(at)
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert specs[0]["encoding"]["y"]["title"] == "test accuracy (measured)"
    assert "modelled_speedup_x (modelled)" in [s["encoding"]["y"]["title"] for s in specs]
    assert len(at.get("image")) == 1


def test_radio_and_compression_pages_only_with_such_runs(
    app: AppTest, seeded: dict, controller: Controller
) -> None:
    at = open_page(app, "results")
    for page in ("radio", "compression"):  # FL runs only: neither page is registered
        with pytest.raises(ValueError, match="Could not find a navigation page"):
            at.switch_page(f"screens/{page}.py")
    store = RunStore(controller.store_root)
    seed_compress_run(store)
    store.close()
    import streamlit as st

    st.cache_data.clear()
    at.run()  # the router now sees a compression run
    assert open_page(at, "compression").title[0].value == "Compression"
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        at.switch_page("screens/radio.py")
