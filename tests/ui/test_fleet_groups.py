"""A large fleet by group: the controller's fleet view of a 200-node run and of a million
virtual clients (counts per tier/profile, nothing made per node), and the Fleet page
drawing it (Streamlit's AppTest against a real controller and SQLite store)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest
import requests
from streamlit.testing.v1 import AppTest

from testbed.controller.fleet import fleet_state, planned_fleet
from testbed.controller.fleet_groups import GROUPED_ABOVE
from testbed.planner import PlannedNodes, make_plan
from testbed.runner import snapshot
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.simulation.test_lazy_scale import MILLION
from tests.ui.conftest import Controller
from tests.ui.test_pages import APP, graph, open_page

#: 200 nodes: a server, 49 fog servers, 150 edge clients of two profiles.
FLEET_200 = """\
name: fleet200
seed: 11
fleet:
  nodes:
    - {id: cloud, tier: cloud, profile: cloud-gpu}
    - {id: fog, tier: fog, profile: fog-server, count: 49}
    - {id: edge, tier: edge, count: 150, profile_mix: {rpi5: 0.6, jetson-orin-nano: 0.4}}
links:
  defaults:
    edge-cloud: {bandwidth_mbps: 50, latency_ms: 10}
    fog-cloud: {bandwidth_mbps: 500, latency_ms: 4}
workload:
  fl: {rounds: 2, local_epochs: 1}
"""
FLEET_SIZE_BYTES = 12_000  # the whole view of a million clients: a few groups


def seed_run(store: RunStore, run_id: str, text: str, backend: str = "local") -> str:
    """A run of ``text`` written through ``RunStore``: ready, 2 rounds; edge-7 crashed
    in round 1 (and excluded from round 2); edge-9 failed round 2; the rest completed
    (a million clients: 100 sampled a round, and ``not_sampled`` counts per group)."""
    exp = parse_spec(text)
    plan = make_plan(exp)
    run_dir = store.create_run(run_id, exp.name, seed=exp.seed, backend=backend,
                               spec_path=f"{exp.name}.yaml", pid=os.getpid())  # fmt: skip
    snapshot(exp, exp.seed, run_dir, {"run_id": run_id})
    store.add_event(run_id, "fleet_ready", ts=time.time() - 20, superlink_port=1)
    sampled = [f"edge-{i}" for i in range(1, 101)] if plan.num_clients > 10_000 else None
    names = sampled or list(plan.client_names())
    for i, n in enumerate(names):  # (every node the run saw: not a node to list)
        store.add_event(run_id, "node_identified", node=n, node_id=str(1000 + i))
    for r in (1, 2):
        store.add_event(run_id, "round_start", round=r)
        if r == 1:
            store.add_event(run_id, "fault_injected", round=1, node="edge-7", kind="crash",
                            spec={"kind": "crash", "node": "edge-7"})  # fmt: skip
            store.add_event(run_id, "node_down", round=1, node="edge-7", reason="crash")
        for n in names:
            status = "failed" if (n, r) == ("edge-9", 2) else "completed"
            if n == "edge-7" and r == 2:
                status = "excluded"
            store.set_status(run_id, r, n, status, None)
            if status != "excluded":
                store.add_metric(run_id, "bytes_sent", 1e6, round=r, node=n)
        if sampled:  # (as finalize_statuses counts them: here half of each group)
            for (tier, prof), k in plan.client_counts().items():
                store.add_metric(run_id, "not_sampled", k // 2, round=r, node=f"{tier}/{prof}")
        store.add_event(run_id, "round_end", round=r)
    return run_id


@pytest.fixture
def app(controller: Controller, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    monkeypatch.setenv("TESTBED_CONTROLLER_URL", controller.url)
    monkeypatch.delenv("TESTBED_TOKEN", raising=False)
    import streamlit as st

    st.cache_data.clear()
    yield AppTest.from_file(APP, default_timeout=60)


def test_a_million_clients_plan_as_a_few_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = make_plan(parse_spec(MILLION))
    made = []
    node = PlannedNodes.node
    monkeypatch.setattr(PlannedNodes, "node", lambda s, g, k: made.append(k) or node(s, g, k))
    fleet = planned_fleet(plan)
    assert fleet["grouped"] and fleet["node_count"] == 1_000_004
    assert len(made) < 10, f"made {len(made)} nodes one by one"  # the own links, a sample
    assert fleet["nodes"] == [] and fleet["links"] == []
    groups = {g["group"]: g for g in fleet["groups"]}
    assert set(groups) == {"cloud/host", "fog/rpi5", "edge/rpi5", "edge/jetson-orin-nano",
                           "edge/host"}  # fmt: skip
    assert sum(g["nodes"] for g in fleet["groups"]) == 1_000_004
    counts = plan.client_counts()  # the same seeded profile rule
    assert groups["edge/rpi5"]["nodes"] == counts[("edge", "rpi5")]
    assert groups["edge/rpi5"]["states"] == {"planned": counts[("edge", "rpi5")]}
    assert groups["edge/rpi5"]["link"]["bandwidth_mbps"] == 20.0
    assert sum(g["own_links"] for g in fleet["groups"]) == 2  # phone-77, phone-999999
    assert len(json.dumps(fleet)) < FLEET_SIZE_BYTES


def test_run_of_a_million_lists_only_its_faulted_and_failed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = RunStore(tmp_path / "runs")
    seed_run(store, "m1-a", MILLION.replace("phone", "edge"), backend="simulation")
    plan = make_plan(parse_spec(MILLION.replace("phone", "edge")))
    fleet = fleet_state(plan, store.events("m1-a"), store.metrics("m1-a"), "completed",
                        store.round_status("m1-a"))  # fmt: skip
    store.close()
    assert [n["name"] for n in fleet["nodes"]] == ["edge-7", "edge-9"]
    crashed, failed = fleet["nodes"]
    assert crashed["state"] == "down" and crashed["fault"]["kind"] == "crash"
    assert failed["state"] == "up" and failed["failed_rounds"] == [2]
    states = [g["states"] for g in fleet["groups"]]
    assert sum(s.get("down", 0) for s in states) == 1
    assert sum(sum(s.values()) for s in states) == 1_000_004
    assert sum(s.get("up", 0) for s in states) == 1_000_003
    total = sum(k // 2 for k in plan.client_counts().values())
    assert fleet["round_counts"] == [
        {"round": 1, "sampled": 100, "completed": 100, "failed": 0, "other": 0,
         "not_sampled": total},
        {"round": 2, "sampled": 99, "completed": 98, "failed": 1, "other": 0,
         "not_sampled": total + 1},
    ]  # fmt: skip
    assert sum(g["bytes_down"] or 0 for g in fleet["groups"]) == 200 * 1e6 - 1e6
    assert len(json.dumps(fleet)) < FLEET_SIZE_BYTES + 2 * 1_000


def test_small_fleet_keeps_a_box_per_node() -> None:
    small = FLEET_200.replace("count: 150", "count: 2").replace("count: 49", "count: 2")
    plan = make_plan(parse_spec(small))
    assert len(plan.nodes) <= GROUPED_ABOVE
    fleet = planned_fleet(plan)
    assert "grouped" not in fleet and len(fleet["nodes"]) == len(plan.nodes)


def test_fleet_page_draws_200_nodes_as_groups(app: AppTest, controller: Controller) -> None:
    store = RunStore(controller.store_root)
    run_id = seed_run(store, "fleet200-a", FLEET_200)
    store.close()
    view = requests.get(f"{controller.url}/runs/{run_id}/fleet", timeout=30).json()
    assert view["grouped"] and len(view["groups"]) == 4
    at = open_page(app, "fleet")
    at.selectbox[0].set_value(run_id).run()
    dot = graph(at)
    boxes = [ln for ln in dot.splitlines() if "[label=" in ln and "->" not in ln]
    assert len(boxes) == 4, dot  # server, fog servers, two edge profiles: not 200 boxes
    assert '"edge-7"' not in dot and "edge-1" not in dot
    assert "49 nodes\\n49 up" in dot and "200 nodes in 4 groups" in _captions(at)
    edge = [ln for ln in boxes if "edge/" in ln]
    assert sum("1 down" in ln for ln in edge) == 1 and "#cf222e" in "".join(edge)
    assert "50 Mbps / 10 ms" in dot and "500 Mbps / 4 ms" in dot
    assert "not up: 1 down" in _captions(at)
    [exp] = [e for e in at.expander if e.label.startswith("Nodes that failed or were faulted")]
    assert exp.label.endswith(": 2")
    listed = exp.dataframe[0].value
    assert list(listed["node"]) == ["edge-7", "edge-9"]
    assert list(listed["fault"]) == ["crash", "-"] and list(listed["failed rounds"]) == ["-", "2"]
    rounds = next(d.value for d in at.dataframe if "sampled" in d.value.columns)
    assert list(rounds["sampled"]) == [199, 198] and list(rounds["not sampled"]) == [0, 1]


def test_live_page_counts_statuses_of_a_large_fleet(app: AppTest, controller: Controller) -> None:
    store = RunStore(controller.store_root)
    run_id = seed_run(store, "fleet200-b", FLEET_200)
    store.close()
    at = open_page(app, "live")
    at.selectbox[0].set_value(run_id).run()
    assert "199 nodes have a status: counts per round" in _captions(at)
    tables = [d.value for d in at.dataframe]
    assert not any(len(t) >= 199 for t in tables), "a row per node"  # no grid of 199
    rounds = next(t for t in tables if "sampled" in t.columns)
    assert list(rounds["failed"]) == [0, 1]
    bad = next(t for t in tables if "reason" in t.columns)
    assert list(bad["node"]) == ["edge-9"]


def _captions(at: AppTest) -> str:
    return "\n".join(c.value for c in at.caption)
