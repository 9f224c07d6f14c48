"""The Functions page through Streamlit's AppTest, against a real controller (uvicorn on
loopback) over a real SQLite store holding a functions run written through ``RunStore``
as ``testbed/functions/experiment.py`` reports it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
import requests
from streamlit.testing.v1 import AppTest

from testbed.runner import snapshot
from testbed.spec.loader import load_spec
from testbed.store import RunStore
from tests.ui.conftest import ROOT, Controller

APP = str(ROOT / "ui" / "app.py")
GPU_TIMING = "emulated (modelled from profile)"
BLOCKED = "case 2: p95 80 ms > bound 60 ms and GPU (unknown) + gap <= p95; blocked: no GPU free"
PROMOTE = "case 2: p95 81 ms > bound 60 ms and GPU (unknown) + gap <= p95"


def seed_functions_run(store: RunStore, run_id: str, *, finished: bool = True) -> str:
    """A gaia-shaped run: ``matmul`` on the fog node promoted from CPU to the emulated GPU
    at t = 4 s (after one blocked promotion at t = 2 s), ``idle`` on the edge CPU; rows as
    ``run_functions`` reports them (function in ``node``, the serving node in a tag)."""
    exp = load_spec(ROOT / "experiments" / "gaia.yaml")
    run_dir = store.create_run(
        run_id, exp.name, seed=0, backend="local", spec_path="gaia.yaml", pid=os.getpid()
    )
    snapshot(exp, 0, run_dir, {"run_id": run_id})

    def metric(name: str, value: float, fn: str, step: int | None = None, **tags) -> None:
        store.add_metric(run_id, name, value, round=step, node=fn, tags=tags)

    metric("identified_mode", 1, "matmul", mode="cpu_preferred", used="cpu_preferred",
           reasons=["imports torch: a tensor framework"])  # fmt: skip
    metric("identified_mode", 0, "idle", mode="cpu", used="cpu", reasons=["no tensor framework"])
    for fn, node in (("matmul", "fog"), ("idle", "edge")):
        metric("cold_start_s", 0.8, fn, backend="cpu", site=node, phase="deploy")
        metric("on_gpu", 0.0, fn, site=node, reason="placement: gaia: cpu_preferred on CPU")
    for i in range(10):
        t = float(i)
        gpu = t >= 5
        metric("e2e_ms", 20.0 + i if gpu else 80.0 + i, "matmul", i, t_s=t,
               backend="gpu-emulated" if gpu else "cpu", timing="modelled",
               server_ms=70.0, network_ms=10.0, site="fog")  # fmt: skip
        metric("e2e_ms", 25.0, "idle", i, t_s=t + 0.5, backend="cpu", timing="stretched",
               server_ms=22.0, network_ms=3.0, site="edge")  # fmt: skip
        if i == 2:
            metric("mode_decision", 0.0, "matmul", old="cpu_preferred", new="cpu_preferred",
                   reason=BLOCKED, p95_ms=80.0, rate_rps=6.0, t_s=2.01)  # fmt: skip
        if i == 4:
            metric("mode_decision", 1.0, "matmul", old="cpu_preferred", new="gpu_preferred",
                   reason=PROMOTE, p95_ms=81.0, rate_rps=6.0, t_s=4.02)  # fmt: skip
            metric("on_gpu", 1.0, "matmul", site="fog", reason=PROMOTE)
            metric("cold_start_s", 3.1, "matmul", backend="gpu-emulated", site="fog",
                   phase="switch")  # fmt: skip
    if finished:
        common = {"mode_reasons": [], "dynamic": True, "errors": 0}
        summary = {
            "policy": "gaia",
            "gpu_timing": GPU_TIMING,
            "host_gflops": 101.4,
            "functions": {
                "matmul": {**common, "node": "fog", "tier": "fog", "mode": "cpu_preferred",
                           "mode_reasons": ["imports torch: a tensor framework"],
                           "start_backend": "cpu", "end_backend": "gpu-emulated",
                           "requests": 10, "p50_ms": 52.5, "p95_ms": 88.56, "slo_ms": 60,
                           "slo_violation_pct": 50.0, "gpu_seconds": 12.34, "switches": 1,
                           "placement": "gaia: cpu_preferred starts on the CPU of fog"},
                "idle": {**common, "node": "edge", "tier": "edge", "mode": "cpu",
                         "start_backend": "cpu", "end_backend": "cpu", "requests": 10,
                         "p50_ms": 25.0, "p95_ms": 25.0, "slo_ms": 80,
                         "slo_violation_pct": 0.0, "gpu_seconds": 0.0, "switches": 0,
                         "placement": "gaia: cpu on the CPU of edge"},
            },
        }  # fmt: skip
        store.finish_run(run_id, "completed", summary)
    return run_id


@pytest.fixture
def app(controller: Controller, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    monkeypatch.setenv("TESTBED_CONTROLLER_URL", controller.url)
    monkeypatch.delenv("TESTBED_TOKEN", raising=False)
    import streamlit as st

    st.cache_data.clear()  # caches outlive an AppTest; each test sees its own controller
    yield AppTest.from_file(APP, default_timeout=60)


def texts(at: AppTest) -> str:
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption])


def test_functions_page_shows_table_timeline_and_decisions(
    app: AppTest, controller: Controller
) -> None:
    at = app.run()
    assert not at.exception, at.exception
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        at.switch_page("screens/functions.py")  # no functions run yet: no page
    store = RunStore(controller.store_root)
    run_id = seed_functions_run(store, "gaia-a")
    live_id = seed_functions_run(store, "gaia-live", finished=False)
    store.close()
    rows = requests.get(f"{controller.url}/runs", timeout=10).json()
    assert {r["run_id"]: r["workload"] for r in rows} == {run_id: "functions", live_id: "functions"}
    import streamlit as st

    st.cache_data.clear()
    at.run()  # the router now sees functions runs
    at.switch_page("screens/functions.py").run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Functions"
    assert at.selectbox[0].value == live_id  # newest first: still running, no summary yet
    assert "no summary yet" in texts(at)
    assert len(at.get("vega_lite_chart")) == 2  # the rows so far
    assert at.dataframe[0].value["outcome"].tolist() == ["blocked", "applied"]

    at.selectbox[0].set_value(run_id).run()

    table = at.dataframe[0].value
    assert list(table.index) == ["matmul", "idle"]
    mm = table.loc["matmul"]
    assert mm["node / tier"] == "fog / fog" and mm["mode"] == "cpu_preferred"
    assert mm["backend start → end"] == "cpu → gpu-emulated"
    assert (mm["requests"], mm["p50 ms"], mm["p95 ms"], mm["SLO ms"]) == (10, 52.5, 88.6, 60)
    assert (mm["SLO miss %"], mm["GPU-s (wall, measured)"], mm["switches"]) == (50.0, 12.3, 1)
    assert mm["latency timing"] == "modelled"
    assert table.loc["idle", "latency timing"] == "stretched"
    assert table.loc["idle", "backend start → end"] == "cpu → cpu"
    out = texts(at)
    assert f"GPU backends: {GPU_TIMING}" in out and "placement policy `gaia`" in out
    assert "host 101 GFLOPS (measured" in out

    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert len(specs) == 2  # one latency chart per function
    points = [s["layer"][0]["encoding"] for s in specs]
    assert [p["y"]["title"] for p in points] == ["e2e ms (modelled)", "e2e ms (stretched)"]
    assert all(p["color"]["field"] == "backend" for p in points)
    assert specs[0]["layer"][1]["data"]["values"] == [{"slo_ms": 60}]
    assert specs[0]["layer"][2]["data"]["values"] == [
        {"t_s": 4.0, "what": "cpu_preferred → gpu_preferred"}
    ]
    assert len(specs[1]["layer"]) == 2  # idle: SLO line, no switches

    decisions = at.dataframe[1].value
    assert decisions["t (s)"].tolist() == [2.0, 4.0]
    assert decisions["function"].tolist() == ["matmul", "matmul"]
    assert decisions["old → new"].tolist() == [
        "cpu_preferred → cpu_preferred",
        "cpu_preferred → gpu_preferred",
    ]
    assert decisions["outcome"].tolist() == ["blocked", "applied"]
    assert decisions["reason"].tolist() == [BLOCKED, PROMOTE]
    assert "1 applied, 1 blocked" in out

    assert "**matmul**: identified `cpu_preferred`, used `cpu_preferred`" in out
    assert "- imports torch: a tensor framework" in out
    assert "- placement: gaia: cpu_preferred starts on the CPU of fog" in out

    # picking again, and again, sticks (the picker is a keyed widget)
    at.selectbox[0].set_value(live_id).run()
    assert at.selectbox[0].value == live_id and "no summary yet" in texts(at)
    at.selectbox[0].set_value(run_id).run()
    assert at.selectbox[0].value == run_id and "no summary yet" not in texts(at)
