"""End to end on Flower's Simulation Engine (Ray): the same apps, the same records.

Slow: Ray starts in ~10 s and the local comparison run starts a real fleet.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

pytestmark = pytest.mark.slow

#: Named tolerance: final global accuracy, simulation vs local, same seed (2 points,
#: the issue's calibration goal; training is deterministic, aggregation order fixed).
ACC_TOL = 0.02
CLIENTS = ("edge-1", "edge-2", "edge-3", "edge-4")


def spec_yaml(extra_nodes: str = "", links: str = "", timeout_s: int = 60) -> str:
    return f"""\
name: sim-e2e
seed: 7
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, profile: rpi5, count: 4}}
{extra_nodes}links:
  defaults:
    edge-cloud: {{bandwidth_mbps: 100, latency_ms: 20}}
{links}workload:
  fl:
    rounds: 3
    local_epochs: 1
    round_timeout_s: {timeout_s}
"""


def ray_processes() -> set[int]:
    """Pids of Ray's own daemons and workers on this machine."""
    names = ("raylet", "gcs_server", "ray::", "default_worker")
    return {
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if any(n in " ".join(p.info["cmdline"] or []) for n in names)
    }


def statuses(store: RunStore, run_id: str) -> set[tuple[int, str, str]]:
    return {(s.round, s.node, s.status) for s in store.round_status(run_id)}


def final_acc(store: RunStore, run_id: str) -> float:
    acc = {m.round: m.value for m in store.metrics(run_id, "global_acc")}
    assert sorted(acc) == [0, 1, 2, 3], acc
    return float(acc[3])


def test_same_records_and_accuracy_as_local(tmp_path: Path) -> None:
    before = ray_processes()
    store = RunStore(tmp_path)
    sim = run_experiment(parse_spec(spec_yaml()), store, spec_path="inline", backend="simulation")
    assert sim.status == "completed", sim.summary
    assert statuses(store, sim.run_id) == {(r, n, "completed") for r in (1, 2, 3) for n in CLIENTS}
    assert store.run(sim.run_id).backend == "simulation"
    for name in ("train_loss", "bytes_sent", "bytes_received", "virtual_client_s"):
        rows = {(m.round, m.node) for m in store.metrics(sim.run_id, name)}
        assert rows == {(r, n) for r in (1, 2, 3) for n in CLIENTS}, name
    vt = [m.value for m in store.metrics(sim.run_id, "virtual_time_s")]
    assert len(vt) == 3 and vt == sorted(vt) and vt[0] > 0.04  # >= 2 x 20 ms latency
    assert {m.round for m in store.metrics(sim.run_id, "wall_time_s")} == {1, 2, 3}
    assert ray_processes() <= before, "Ray processes left behind"

    local = run_experiment(parse_spec(spec_yaml()), store, spec_path="inline")
    assert local.status == "completed", local.summary
    a_sim, a_local = final_acc(store, sim.run_id), final_acc(store, local.run_id)
    assert abs(a_sim - a_local) <= ACC_TOL, (a_sim, a_local)


def test_deadline_on_virtual_time(tmp_path: Path) -> None:
    """A client behind a 0.01 Mbit/s link needs > 20 s of virtual time per round (its
    model download alone): failed in every round, as the local backend records it."""
    slow = "    - {id: slow, tier: edge, profile: rpi5}\n"
    link = "  nodes:\n    slow: {bandwidth_mbps: 0.01, latency_ms: 20}\n"
    store = RunStore(tmp_path)
    spec = parse_spec(spec_yaml(slow, link, timeout_s=20))
    res = run_experiment(spec, store, spec_path="inline", backend="simulation")
    assert res.status == "completed", res.summary
    got = statuses(store, res.run_id)
    assert {(r, "slow", "failed") for r in (1, 2, 3)} <= got
    assert {(r, n, "completed") for r in (1, 2, 3) for n in CLIENTS} <= got
    lost = {m.round: m.value for m in store.metrics(res.run_id, "bytes_lost") if m.node == "slow"}
    for m in store.metrics(res.run_id, "virtual_client_s"):
        if m.node == "slow":
            assert m.value > 20 and m.value >= lost[m.round] * 8 / 1e4
    assert [m.value for m in store.metrics(res.run_id, "virtual_round_s")] == [20.0] * 3
