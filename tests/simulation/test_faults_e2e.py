"""50 clients on Flower's Simulation Engine with a crash, a partition and a straggler:
the statuses on virtual time are what the spec implies. Slow (Ray, 6 rounds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

pytestmark = pytest.mark.slow

DEADLINE_S = 5.0
ROUNDS = 6
SPEC = f"""\
name: sim-faults
seed: 3
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, profile: rpi5, count: 50}}
links:
  defaults:
    edge-cloud: {{bandwidth_mbps: 100, latency_ms: 20}}
workload:
  fl:
    rounds: {ROUNDS}
    local_epochs: 1
    round_timeout_s: {DEADLINE_S}
simulation:  # device and link time only: the rounds' virtual lengths are the spec's
  protocol_delay_s: 0.0
  startup_s: 0.0
  latency_legs: 0
  startup_latency_legs: 0
  flow_window_bytes: null
  server_reply_s: 0.0
faults:
  - {{kind: crash, node: edge-5, at_round: 2}}
  # rounds with a late reply last the deadline: this covers rounds 3 and 4 exactly
  - {{kind: partition, node: edge-10, at_round: 3, duration_s: {2 * DEADLINE_S}}}
  - {{kind: straggler, node: edge-20, at_round: 2, factor: 5000, rounds: 2}}
"""


def test_crash_partition_straggler_on_virtual_time(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    res = run_experiment(parse_spec(SPEC), store, spec_path="inline", backend="simulation")
    assert res.status == "completed", res.summary
    st = {(s.round, s.node): s for s in store.round_status(res.run_id)}
    rounds = range(1, ROUNDS + 1)

    def of(node: str) -> list[str]:
        return [st[(r, node)].status for r in rounds]

    assert of("edge-5") == ["completed"] + ["excluded"] * (ROUNDS - 1)
    assert "crash" in str(st[(2, "edge-5")].reason)
    assert of("edge-10") == ["completed", "completed", "late", "late", "completed", "completed"]
    slow = of("edge-20")
    assert slow[0] == "completed" and slow[3:] == ["completed"] * (ROUNDS - 3)
    assert set(slow[1:3]) <= {"failed", "late"}, slow
    others = {f"edge-{i}" for i in range(1, 51)} - {"edge-5", "edge-10", "edge-20"}
    assert {st[(r, n)].status for r in rounds for n in others} == {"completed"}

    vt = {(m.round, m.node): m.value for m in store.metrics(res.run_id, "virtual_client_s")}
    assert all(vt[(r, "edge-20")] > DEADLINE_S for r in (2, 3))
    assert all(vt[(r, "edge-20")] < DEADLINE_S for r in (1, 4, 5, 6))
    assert all(vt[(r, "edge-10")] > DEADLINE_S for r in (3, 4))
    rs = [m.value for m in store.metrics(res.run_id, "virtual_round_s")]
    assert rs[1:4] == [DEADLINE_S] * 3 and max(rs[0], rs[4], rs[5]) < DEADLINE_S

    ev = store.events(res.run_id)
    injected = sorted((e.node, e.round) for e in ev if e.kind == "fault_injected")
    assert injected == [("edge-10", 3), ("edge-20", 2), ("edge-5", 2)]  # (the round they act in)
    assert any(e.kind == "link_healed" and e.node == "edge-10" for e in ev)
