"""A fault triggered ``before`` round r is recorded in round r (issue 31: a partition
``at_round: 2, phase: before`` was recorded with round 1), on a real SQLite store and a
real local backend's node."""

from __future__ import annotations

import time
from pathlib import Path

from testbed.backends.local import LocalBackend
from testbed.chaos import ChaosEngine
from testbed.planner import make_plan
from testbed.procs import free_port
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

SPEC = """\
name: rounds
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, count: 1}
links: {mode: none}
workload:
  fl: {rounds: 2}
faults:
  - {kind: straggler, node: edge, at_round: 1, factor: 2, rounds: 1}
  - {kind: straggler, node: edge, at_round: 2, factor: 3, rounds: 1}
  - {kind: straggler, node: edge, at_round: 2, phase: during, delay_s: 0, factor: 4}
"""


def test_before_faults_carry_the_round_they_act_in(tmp_path: Path) -> None:
    plan = make_plan(parse_spec(SPEC))
    store = RunStore(tmp_path / "store")
    store.create_run("r1", "rounds", seed=3, backend="local")
    backend = LocalBackend(plan, tmp_path / "run", warm=False)
    backend.superlink_port = free_port()  # nothing listens: the node keeps retrying
    backend.start_node("edge")
    engine = ChaosEngine(plan, backend, store, "r1", plan.seed)
    try:
        engine.start()  # fleet ready: "before round 1" fires
        for rec in (
            {"kind": "event", "name": "round_start", "round": 1},
            {"kind": "event", "name": "round_end", "round": 1},  # "before round 2" fires
            {"kind": "event", "name": "round_start", "round": 2},
        ):
            engine.on_record(rec)
        time.sleep(0.01)
        engine.tick()  # the "during round 2" timer (delay 0)
    finally:
        backend.stop()
    fired = [
        (e.round, e.data_dict["factor"], e.data_dict["until_round"])
        for e in store.events("r1")
        if e.kind == "straggler_set"
    ]
    injected = [e.round for e in store.events("r1") if e.kind == "fault_injected"]
    assert fired == [(1, 2.0, 1), (2, 3.0, 2), (2, 4.0, None)]
    assert injected == [1, 2, 2]


OVERLAP = """\
name: overlap
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, count: 1}
links: {mode: none}
workload:
  fl: {rounds: 1}
faults:
  - {kind: outage, node: edge, at_round: 1, duration_s: 0.3}
  - {kind: outage, node: edge, at_round: 1, duration_s: 0.6}
  - {kind: crash, node: edge, at_time_s: 0.9}
  - {kind: outage, node: edge, at_time_s: 1.0, duration_s: 0.2}
"""


def test_overlapping_down_faults_hold_the_node_until_the_last_ends(tmp_path: Path) -> None:
    """Two outages before round 1 (fuzz case: flapping and an outage on one node raised
    KeyError in the chaos engine): the node restarts once, when the longer ends; a crash
    then holds it for good, through an outage that ends meanwhile. As on the virtual
    clock: down while any fault holds it."""
    plan = make_plan(parse_spec(OVERLAP))
    store = RunStore(tmp_path / "store")
    store.create_run("r1", "overlap", seed=3, backend="local")
    backend = LocalBackend(plan, tmp_path / "run", warm=False)
    backend.superlink_port = free_port()
    backend.start_node("edge")
    engine = ChaosEngine(plan, backend, store, "r1", plan.seed)

    def effects() -> list[str]:
        events = store.events("r1")
        return [e.kind for e in events if e.node == "edge" and e.kind != "fault_injected"]

    try:
        engine.start()
        deadline = time.time() + 30.0  # (kills and starts take longer on a loaded host)
        while time.time() < deadline and effects().count("node_held") < 2:
            engine.tick()
            time.sleep(0.02)
        time.sleep(0.3)
        engine.tick()  # (nothing else is due: the crash holds the node)
        alive = backend.procs.procs["edge"].poll() is None
    finally:
        backend.stop()
    kinds = effects()
    assert kinds == [
        "node_down",
        "node_down",  # two outages
        "node_held",
        "node_restarted",  # the first ends: held; the second: restarted
        "node_down",
        "node_down",  # the crash, then an outage of the crashed node
        "node_held",  # that outage ends: the crash holds it
    ], kinds
    assert not alive, "a crashed node was started again"


def test_a_fault_on_a_node_that_runs_nothing_is_rejected_not_fatal(tmp_path: Path) -> None:
    """A crash of a node the fleet never started (HEFT left its LLM stage empty) is
    recorded as ``fault_rejected`` naming the node, and the run goes on."""
    plan = make_plan(parse_spec(SPEC))
    store = RunStore(tmp_path / "store")
    store.create_run("r1", "rounds", seed=3, backend="local")
    backend = LocalBackend(plan, tmp_path / "run", warm=False)  # (nothing started)
    engine = ChaosEngine(plan, backend, store, "r1", plan.seed)
    crash = parse_spec(SPEC + "  - {kind: crash, node: edge, at_round: 1}\n").faults[-1]
    engine.fire(crash, "schedule")
    rejected = [
        (e.node, e.data_dict["reason"]) for e in store.events("r1") if e.kind == "fault_rejected"
    ]
    assert rejected == [("edge", "no started client node 'edge' (nodes: [])")]
