"""The Timeline without a browser: the swimlanes' intervals (a pure function), the
controller's timeline of a 60-node run, and the page (AppTest) for a pipelined-LLM run
(its key metrics, what each node ran), a simulation run (virtual time) and a failed run
(its cause). Runs are written through ``RunStore`` as the runner writes them."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from streamlit.testing.v1 import AppTest

from testbed.controller.lanes import LaneNode, swimlanes
from testbed.runner import snapshot
from testbed.spec.loader import load_spec
from testbed.store import RunStore
from tests.ui.conftest import ROOT, Controller, seed_run

APP = str(ROOT / "ui" / "app.py")

SIXTY = """\
# Sixty nodes: a cloud server, two satellites, seven fog and fifty edge clients.
name: sixty
seed: 1
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: sat, tier: space, profile: leo-sat, count: 2}
    - {id: fog, tier: fog, count: 7}
    - {id: edge, tier: edge, profile: rpi5, count: 50}
links:
  defaults:
    edge-cloud: {bandwidth_mbps: 50, latency_ms: 10}
workload:
  fl: {rounds: 3, local_epochs: 1}
"""


def _run(store: RunStore, run_id: str, spec: Path, backend: str = "local") -> float:
    """Create a run of ``spec`` with its resolved spec; return its fleet-ready time."""
    exp = load_spec(spec)
    run_dir = store.create_run(
        run_id, exp.name, seed=1, backend=backend, spec_path=spec.name, pid=os.getpid()
    )
    snapshot(exp, 1, run_dir, {"run_id": run_id})
    return time.time() - 100


def _ev(kind: str, node: str | None, t: float, **data: object) -> dict[str, object]:
    return {"t": t, "kind": kind, "node": node, "round": data.pop("round", None),
            "workload": data.pop("workload", None), "data": data, "detail": ""}  # fmt: skip


def _states(lanes: dict, lane: str) -> list[tuple[str, float, float]]:
    return [(i["state"], i["start_s"], i["end_s"]) for i in lanes["intervals"] if i["lane"] == lane]


#: A crash, an outage, a partition, a degradation, a satellite pass, a straggler, and a
#: crash during a partition (down wins), on a 60-node fleet.
FAULTS = [
    _ev("round_start", None, 0.5, round=1, workload="fl"),
    _ev("straggler_set", "edge-11", 2.0, factor=3.0, until_round=1),
    _ev("link_changed", "sat-1", 3.0, t_s=3.0, params={"partitioned": False, "latency_ms": 9}),
    _ev("link_degraded", "edge-9", 4.0, duration_s=5.0, latency_ms=200),
    _ev("node_down", "edge-3", 5.0, reason="crash (never returns)"),
    _ev("round_end", None, 6.0, round=1, workload="fl"),
    _ev("node_down", "fog-2", 8.0, reason="outage for 4 s"),
    _ev("link_restored", "edge-9", 9.0),
    _ev("link_partitioned", "edge-7", 10.0, duration_s=10.0),
    _ev("node_restarted", "fog-2", 12.0, down_s=4.0),
    _ev("link_changed", "sat-1", 13.0, t_s=13.0, params={"partitioned": True}),
    _ev("node_down", "edge-7", 15.0, reason="crash (never returns)"),
    _ev("link_healed", "edge-7", 20.0),
]


def sixty_nodes() -> list[LaneNode]:
    edge = {"bandwidth_mbps": 50, "latency_ms": 10, "jitter_ms": 0, "loss_pct": 0}
    return (
        [LaneNode("cloud", "cloud")]
        + [LaneNode(f"sat-{i}", "space") for i in (1, 2)]
        + [LaneNode(f"fog-{i}", "fog") for i in range(1, 8)]
        + [LaneNode(f"edge-{i}", "edge", edge) for i in range(1, 51)]
    )


def test_swimlanes_derive_each_nodes_states_from_events() -> None:
    lanes = swimlanes(sixty_nodes(), FAULTS, ["fl"], 30.0)
    nodes = [lane for lane in lanes["lanes"] if lane["kind"] == "node"]
    assert len(nodes) == 60
    assert [lane["group"] for lane in nodes[:4]] == ["space", "space", "cloud", "fog"]
    assert _states(lanes, "edge-3") == [("up", 0.0, 5.0), ("down", 5.0, 30.0)]  # crash
    assert _states(lanes, "fog-2") == [("up", 0.0, 8.0), ("down", 8.0, 12.0), ("up", 12.0, 30.0)]
    assert _states(lanes, "edge-9") == [("up", 0.0, 4.0), ("degraded", 4.0, 9.0),
                                        ("up", 9.0, 30.0)]  # fmt: skip
    # partitioned, then crashed while partitioned: down wins, and stays after the heal
    assert _states(lanes, "edge-7") == [("up", 0.0, 10.0), ("partitioned", 10.0, 15.0),
                                        ("down", 15.0, 30.0)]  # fmt: skip
    assert _states(lanes, "sat-1") == [("up", 0.0, 3.0), ("in pass", 3.0, 13.0),
                                       ("no contact", 13.0, 30.0)]  # fmt: skip
    assert _states(lanes, "edge-11") == [("up", 0.0, 2.0), ("straggling", 2.0, 6.0),
                                         ("up", 6.0, 30.0)]  # until round 1 ended  # fmt: skip
    assert _states(lanes, "edge-50") == [("up", 0.0, 30.0)]
    assert _states(lanes, "workload fl") == [("round", 0.5, 6.0)]
    marks = {(m["lane"], m["kind"]) for m in lanes["markers"]}
    assert ("edge-3", "node_down") in marks and ("fog-2", "node_restarted") in marks
    assert not any(m["kind"] in ("round_start", "round_end") for m in lanes["markers"])


def test_scheduled_link_change_is_degraded_only_away_from_the_plan() -> None:
    edge = LaneNode("edge-1", "edge", {"bandwidth_mbps": 50, "latency_ms": 10})
    events = [
        _ev("link_changed", "edge-1", 2.0, params={"bandwidth_mbps": 5, "latency_ms": 10}),
        _ev("link_changed", "edge-1", 4.0, params={"bandwidth_mbps": 50, "latency_ms": 10}),
        _ev("link_changed", "edge-1", 6.0, params={"partitioned": True}),
    ]
    lanes = swimlanes([edge], events, [], 8.0)
    assert _states(lanes, "edge-1") == [("up", 0.0, 2.0), ("degraded", 2.0, 4.0),
                                        ("up", 4.0, 6.0), ("partitioned", 6.0, 8.0)]  # fmt: skip


def seed_sixty_run(store: RunStore, spec: Path, run_id: str = "sixty-a") -> str:
    """A 60-node FL run with the faults of :data:`FAULTS` (at those seconds)."""
    t0 = _run(store, run_id, spec)
    fl, fleet = store.tagged("fl"), store.tagged(None)
    fl.add_event(run_id, "fleet_ready", ts=t0, superlink_port=1)
    for e in FAULTS:
        data = dict(e["data"])  # type: ignore[arg-type]
        who = fl if e["workload"] else fleet
        who.add_event(run_id, str(e["kind"]), node=e["node"], round=e["round"],
                      ts=t0 + float(e["t"]), **data)  # fmt: skip
    fl.add_metric(run_id, "global_acc", 0.5, round=1, ts=t0 + 6.0)
    fl.add_metric(run_id, "round_duration_s", 5.5, round=1, ts=t0 + 6.0)
    fl.add_metric(run_id, "eval_acc", 0.4, round=1, node="edge-1", ts=t0 + 6.0)
    fleet.add_metric(run_id, "link_bytes_up", 3e6, node="edge-1", ts=t0 + 30.0)
    for s in (fl, fleet):
        s.close()
    store.finish_run(run_id, "completed", {"wall_s": 30.0})
    return run_id


def test_sixty_node_run_has_sixty_lanes_with_their_intervals(
    app: AppTest, controller: Controller, tmp_path: Path
) -> None:
    spec = tmp_path / "sixty.yaml"
    spec.write_text(SIXTY)
    store = RunStore(controller.store_root)
    run_id = seed_sixty_run(store, spec)
    store.close()
    tl = requests.get(f"{controller.url}/runs/{run_id}/timeline", timeout=30).json()
    assert tl["virtual"] is False and "virtual" not in tl["swimlanes"]
    lanes = tl["swimlanes"]["wall"]
    assert sum(lane["kind"] == "node" for lane in lanes["lanes"]) == 60

    def near(lane: str) -> list[tuple[str, float, float]]:
        return [(s, round(a, 3), round(b, 3)) for s, a, b in _states(lanes, lane)]

    assert near("edge-3") == [("up", 0.0, 5.0), ("down", 5.0, 30.0)]
    assert near("fog-2") == [("up", 0.0, 8.0), ("down", 8.0, 12.0), ("up", 12.0, 30.0)]
    assert near("edge-7")[1] == ("partitioned", 10.0, 15.0)
    assert near("sat-1")[1] == ("in pass", 3.0, 13.0)
    assert tl["ran"]["edge-1"] == {"fl": 1}  # eval_acc (the link counter is the fleet's)
    at = open_timeline(app, run_id)
    chart = swimlane_spec(at)
    labels = chart["layer"][0]["encoding"]["y"]["scale"]["domain"]
    assert len([x for x in labels if not x.startswith(("workload", "fleet"))]) == 60
    assert labels[:4] == ["workload · fl", "space · sat-1", "space · sat-2", "cloud · cloud"]
    bars = [(b["state"], round(b["t"], 3), round(b["t2"], 3))
            for b in chart["layer"][0]["data"]["values"] if b["lane"] == "fog-2"]  # fmt: skip
    assert bars == [("up", 0.0, 8.0), ("down", 8.0, 12.0), ("up", 12.0, 30.0)]
    marks = chart["layer"][1]["data"]["values"]
    assert {m["label"] for m in marks if m["kind"] == "node_down"} == {
        "edge · edge-3", "fog · fog-2", "edge · edge-7"}  # fmt: skip
    # events are markers on their lanes: no chart draws a rule across the panels
    kinds = [la["mark"]["type"] for s in specs(at) for la in s["layer"]]
    assert "rule" not in kinds and kinds.count("bar") == 1, kinds


@pytest.fixture
def app(controller: Controller, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    monkeypatch.setenv("TESTBED_CONTROLLER_URL", controller.url)
    monkeypatch.delenv("TESTBED_TOKEN", raising=False)
    import streamlit as st

    st.cache_data.clear()
    yield AppTest.from_file(APP, default_timeout=60)


def open_timeline(at: AppTest, run_id: str) -> AppTest:
    at.switch_page("screens/timeline.py")
    at.run()
    at.selectbox[0].set_value(run_id).run()
    assert not at.exception, at.exception
    return at


def specs(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]


def panel(at: AppTest, metric: str) -> dict:
    """The layer of the Timeline's chart of key metric ``metric``."""
    layers = [s["layer"][0] for s in specs(at) if not isinstance(s["height"], dict)]
    return next(la for la in layers if la["encoding"]["y"]["title"] == metric)


def swimlane_spec(at: AppTest) -> dict:
    return next(s for s in specs(at) if isinstance(s["height"], dict))  # height per lane


def seed_llm_run(store: RunStore, run_id: str = "hyperion-a") -> str:
    """A pipelined-LLM run as ``testbed/llm/run.py`` records it: one row per request
    (end-to-end, time to first token; step = request), stage times per node, each
    node's utilisation; no ``fleet_ready`` event (the workload has no fleet start)."""
    t0 = _run(store, run_id, ROOT / "experiments" / "hyperion.yaml")
    llm = store.tagged("llm_pipeline")
    llm.add_event(run_id, "llm_partition", ts=t0, replica=0, policy="hyperion",
                  nodes=["edge-a", "fog-a", "cloud"])  # fmt: skip
    for k in range(40):  # 2 requests per second for 20 s
        t = t0 + 1 + 0.5 * k
        route = [["edge-a", 0, 3], ["fog-a", 3, 6], ["cloud", 6, 10]]
        tags = {"kind": "short", "policy": "hyperion", "route": route}
        llm.add_metric(run_id, "llm_e2e_ms", 100.0 + k, round=k, ts=t, tags=tags)
        llm.add_metric(run_id, "llm_ttft_ms", 20.0 + k, round=k, ts=t, tags=tags)
        for node in ("edge-a", "fog-a", "cloud"):
            llm.add_metric(run_id, "llm_stage_ms", 5.0, round=k, node=node, ts=t)
    for node in ("edge-a", "edge-b", "fog-a", "fog-b", "cloud"):
        llm.add_metric(run_id, "llm_utilisation", 0.3, node=node, ts=t0 + 21)
    llm.close()
    store.finish_run(run_id, "completed", {"throughput_rps": 2.0})
    return run_id


def test_timeline_of_an_llm_run_shows_its_key_metrics_and_what_nodes_ran(
    app: AppTest, controller: Controller
) -> None:
    store = RunStore(controller.store_root)
    run_id = seed_llm_run(store)
    store.close()
    at = open_timeline(app, run_id)
    out = "\n".join([c.value for c in at.caption] + [m.value for m in at.markdown])
    assert "llm_pipeline (llm_e2e_ms, llm_ttft_ms, llm_failed)" in out
    assert "No rows of the key metrics" not in "\n".join(str(i.value) for i in at.info)
    summary = at.dataframe[0].value.set_index("metric")
    e2e = summary.loc["llm_e2e_ms"]
    assert e2e["rows"] == 40 and e2e["p50"] == pytest.approx(119.5)
    assert e2e["p95"] == pytest.approx(137.05)
    assert e2e["rows/s (first to last row)"] == pytest.approx(2.0)  # the throughput
    assert "**llm_pipeline: llm_e2e_ms**" in out and "**llm_pipeline: llm_ttft_ms**" in out
    ran = at.table[-1].value.set_index("node")
    assert ran.loc["edge-a", "ran (rows recorded)"] == "llm_pipeline (41)"
    assert ran.loc["edge-b", "ran (rows recorded)"] == "llm_pipeline (1)"
    assert not any(v.strip() in ("", "-") for v in ran.to_numpy().ravel())


def seed_simulation_run(store: RunStore, run_id: str = "quickstart-sim") -> str:
    """A quickstart run on ``--backend simulation``: 3 rounds of 40 virtual s each in
    ~2 wall s each; edge-2 down from virtual 50 s to 130 s (the chaos engine's events on
    virtual time carry ``virtual_t_s``)."""
    t0 = _run(store, run_id, ROOT / "experiments" / "quickstart.yaml", "simulation")
    fl = store.tagged("fl")
    fl.add_event(run_id, "fleet_ready", ts=t0, superlink_port=None)
    for r in (1, 2, 3):
        fl.add_event(run_id, "round_start", round=r, ts=t0 + 2 * r - 1.5)
        fl.add_metric(run_id, "virtual_round_s", 40.0, round=r, ts=t0 + 2 * r)
        fl.add_metric(run_id, "virtual_time_s", 40.0 * r, round=r, ts=t0 + 2 * r)
        fl.add_metric(run_id, "global_acc", 0.2 * r, round=r, ts=t0 + 2 * r)
        fl.add_event(run_id, "round_end", round=r, ts=t0 + 2 * r)
    fl.add_event(run_id, "fault_injected", round=2, node="edge-2", ts=t0 + 2.5,
                 kind="outage", virtual_t_s=50.0)  # fmt: skip
    fl.add_event(run_id, "node_down", round=2, node="edge-2", ts=t0 + 2.5,
                 reason="outage for 80 s", virtual_t_s=50.0)  # fmt: skip
    fl.add_event(run_id, "node_restarted", round=3, node="edge-2", ts=t0 + 6.1,
                 down_s=80.0, virtual_t_s=130.0)  # fmt: skip
    fl.close()
    store.finish_run(run_id, "completed", {"wall_s": 6.5, "final_global_acc": 0.6})
    return run_id


def test_timeline_and_live_page_of_a_simulation_run_show_virtual_time(
    app: AppTest, controller: Controller
) -> None:
    store = RunStore(controller.store_root)
    run_id = seed_simulation_run(store)
    store.close()
    at = open_timeline(app, run_id)
    assert at.radio[0].value == "virtual"  # the virtual clock by default
    acc = panel(at, "global_acc")
    assert acc["encoding"]["x"]["title"].startswith("virtual s")
    assert [v["t"] for v in acc["data"]["values"]] == [40.0, 80.0, 120.0]  # round ends
    lanes = swimlane_spec(at)
    bars = [b for b in lanes["layer"][0]["data"]["values"] if b["lane"] == "edge-2"]
    assert [(b["state"], b["t"], b["t2"]) for b in bars] == [
        ("up", 0.0, 50.0), ("down", 50.0, 130.0)]  # (the run's last virtual record)  # fmt: skip
    events = at.table[0].value
    assert "virtual s" in events.columns
    assert events.set_index("kind").loc["node_down", "virtual s"] == 50.0
    at.radio[0].set_value("wall").run()
    acc = panel(at, "global_acc")
    assert acc["encoding"]["x"]["title"] == "s after the fleet was ready (wall)"
    assert [round(v["t"], 3) for v in acc["data"]["values"]] == [2.0, 4.0, 6.0]
    at.switch_page("screens/live.py")
    at.run()
    at.selectbox[0].set_value(run_id).run()
    header = "\n".join(m.value for m in at.markdown)
    assert "virtual clock **120.0 s** (modelled) after round 3" in header


def test_timeline_of_a_failed_run_shows_its_cause(app: AppTest, controller: Controller) -> None:
    store = RunStore(controller.store_root)
    seed_run(store, "quickstart-a")
    run_id = seed_run(store, "quickstart-failed", status="failed")
    cause = {"message": "ValueError: no such dataset", "node": "edge-1",
             "log": "logs/edge-1.log", "line": 12, "where": None}  # fmt: skip
    store.finish_run(run_id, "failed", {"wall_s": 30.0, "cause": cause})
    store.close()
    at = open_timeline(app, run_id)
    errors = [str(e.value) for e in at.error]
    assert errors == ["cause: ValueError: no such dataset (node edge-1, logs/edge-1.log:12)"]


def test_timeline_of_a_functions_run_shows_slo_attainment(
    app: AppTest, controller: Controller
) -> None:
    from tests.ui.test_functions_page import seed_functions_run

    store = RunStore(controller.store_root)
    run_id = seed_functions_run(store, "gaia-a")
    store.close()
    at = open_timeline(app, run_id)
    e2e = at.dataframe[0].value.set_index("metric").loc["e2e_ms"]
    # matmul (SLO 30 ms in gaia.yaml): 5 of its 10 rows within; idle (SLO 80 ms): 10 of 10
    assert e2e["rows"] == 20 and e2e["within SLO %"] == pytest.approx(75.0)
    assert e2e["kind"] == "not tagged"
