"""Parity: the same small spec (a crash, a 20 s partition, a straggler and a
time-varying link) on ``--backend local`` and ``--backend docker`` gives the same
status for every (round, node) and link byte counters within :data:`BYTES_TOL`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import docker
import pytest

from testbed.planner import make_plan
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.spec.models import Experiment
from testbed.store import RunStore
from tests.docker.conftest import labelled_containers

BYTES_TOL = 0.15  # named tolerance: relative difference of a node's link bytes up/down
PARTITION_S = 20  # near-1's partition, from round 2's start
SLOWDOWN = 2.0  # far-1's straggler factor in round 3
#: named tolerance: round 2 lasts at least this share of the partition (near-1's reply
#: is held until the heal), and the straggled round's device time at least this share
#: of SLOWDOWN x the node's device time in its other rounds
EFFECT_TOL = 0.8
MB = 2**20

PARITY = """\
name: parity
seed: 5
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: near, tier: edge, profile: rpi5, count: 2, placement: {engine: a}}
    - {id: far, tier: edge, profile: rpi5, count: 2, placement: {engine: b}}
links:
  defaults:
    edge-cloud: {bandwidth_mbps: 50, latency_ms: 10}
  nodes:
    near-2:
      schedule:
        - {at_s: 5, bandwidth_mbps: 10, latency_ms: 40}
        - {at_s: 45, bandwidth_mbps: 50, latency_ms: 10}
workload:
  fl: {rounds: 4, local_epochs: 1, round_timeout_s: 30}
faults:
  - {kind: partition, node: near-1, at_round: 2, duration_s: 20}  # PARTITION_S
  - {kind: straggler, node: far-1, at_round: 3, rounds: 1, factor: 2.0}  # SLOWDOWN
  - {kind: crash, node: far-2, at_round: 4}
"""
# The placements (engine a / b) are read by --backend swarm only (tests/docker/
# test_swarm.py runs this spec on local, docker and a two-engine swarm); local and
# docker say they ignore them.
# Timing: the round timeout (30 s) leaves ~10 s between the partition's heal (20 s into
# round 2) and round 2's deadline, so near-1's held reply lands in round 2 on both
# backends; with a 15 s timeout the heal fell near round 3's deadline and the status of
# near-1 in round 3 (completed or late) was a race on either backend.


class Record(NamedTuple):
    """What the parity test compares of one run."""

    status: dict[tuple[int, str], str]
    bytes: dict[tuple[str, str], float]
    kinds: set[tuple[str, str | None]]
    limits: dict[str | None, dict[str, Any]]
    round_s: dict[int, float]  # round_duration_s
    device_s: dict[int, float]  # far-1's device_time_s per round
    cpu_s: dict[int, float]  # far-1's train_cpu_s per round (the work stretched)


def _record(store: RunStore, run_id: str) -> Record:
    events = store.events(run_id)
    return Record(
        status={(r, n): s for r, n, s, _w in store.round_status(run_id)},
        bytes={
            (name, n): v
            for name in ("link_bytes_up", "link_bytes_down")
            for _r, n, _k, v, _t in store.metrics(run_id, name)
        },
        kinds={(e.kind, e.node) for e in events},
        limits={e.node: json.loads(e.data) for e in events if e.kind == "node_limits"},
        round_s=_per_round(store, run_id, "round_duration_s", None),
        device_s=_per_round(store, run_id, "device_time_s", "far-1"),
        cpu_s=_per_round(store, run_id, "train_cpu_s", "far-1"),
    )


def _per_round(store: RunStore, run_id: str, name: str, node: str | None) -> dict[int, float]:
    return {
        m.round: m.value or 0.0
        for m in store.metrics(run_id, name)
        if m.round is not None and m.node == node
    }


def _faults_took_effect(rec: Record, speed: float) -> None:
    """The partition and the straggler changed the run, not only its events: near-1's
    reply is held until the heal, so round 2 lasts about the partition; far-1's device
    time in round 3 covers its training's CPU time stretched by its profile's speed
    ``speed`` and the factor (a loaded host may stretch the wall time, never less). The
    timeout, 30 s, keeps both within their rounds, so the statuses compared stay
    deterministic."""
    assert rec.round_s[2] >= EFFECT_TOL * PARTITION_S, rec.round_s
    stretched = SLOWDOWN * rec.cpu_s[3] / speed
    assert rec.device_s[3] >= EFFECT_TOL * stretched, (rec.device_s, rec.cpu_s, speed)


def runs(exp: Experiment, backends: Sequence[str], tmp_path: Path) -> dict[str, Record]:
    """Run ``exp`` on each backend in turn, each into a store of its own."""
    got = {}
    for backend in backends:
        store = RunStore(tmp_path / backend)
        res = run_experiment(exp, store, backend=backend)
        assert res.status == "completed", (backend, res.summary)
        got[backend] = _record(store, res.run_id)
    return got


def assert_parity(exp: Experiment, local: Record, other: Record, cpus: str) -> None:
    """``other`` (docker, swarm) recorded what ``local`` did: every (round, node) status,
    link bytes within :data:`BYTES_TOL`, the faults' events, their effects; ``cpus``:
    how its engine holds a CPU limit (``docker cpu_quota=``, ``swarm nano_cpus=``)."""
    speed = next(n for n in make_plan(exp).clients if n.name == "far-1").profile.cpu_speed_factor
    _faults_took_effect(local, speed)
    _faults_took_effect(other, speed)
    assert other.status == local.status
    assert len(local.status) == 4 * 4
    for key, v in local.bytes.items():
        assert other.bytes[key] == pytest.approx(v, rel=BYTES_TOL), key
    for kind in ("link_partitioned", "link_healed", "straggler_set", "node_down"):
        assert {n for k, n in other.kinds if k == kind} == {n for k, n in local.kinds if k == kind}
    assert ("link_changed", "near-2") in other.kinds
    # docker inspect, as recorded: rpi5 = 4 cores (capped at the host's), 8192 MB
    lim = other.limits["near-1"]
    assert lim["memory"] == f"docker memory={8192 * MB}"
    assert lim["cpus"].startswith(cpus)


def test_local_and_docker_agree(engine: docker.DockerClient, tmp_path: Path) -> None:
    """(docker/e2e.sh deselects it when its swarm step runs: tests/docker/test_swarm.py
    compares local, docker and swarm on this spec, once.)"""
    exp = parse_spec(PARITY)
    got = runs(exp, ("local", "docker"), tmp_path)
    assert_parity(exp, got["local"], got["docker"], "docker cpu_quota=")
    assert labelled_containers(engine) == []
