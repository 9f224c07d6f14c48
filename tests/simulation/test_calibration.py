"""The clock replayed on a local run's measurements (its round, per round)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.simulation.calibration import replay
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

SPEC = """\
name: replay
seed: 1
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: pi, tier: edge, profile: rpi5, count: 2}
links:
  defaults:
    edge-cloud: {bandwidth_mbps: 2, latency_ms: 40}
  nodes:
    pi-2: {bandwidth_mbps: 1, latency_ms: 80}
workload:
  fl: {rounds: 2}
"""
#: arithmetic of the link model: bytes * 8 / rate + one latency each way
TOL_S = 1e-9


def _metric(name: str, rnd: int, node: str, value: float) -> dict[str, object]:
    return {"kind": "metric", "name": name, "value": value, "round": rnd, "node": node, "t": 1.0}


def test_slowest_client_link_plus_measured_device_time(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create_run("r", "replay", seed=1, backend="local")
    nbytes = 125_000  # 1 Mbit: 0.5 s at 2 Mbit/s, 1 s at 1 Mbit/s
    rows = []
    for node, device in (("pi-1", [2.0, 0.1]), ("pi-2", [0.2, 0.3])):
        for rnd, d in enumerate(device, start=1):
            rows += [
                _metric("device_time_s", rnd, node, d),
                _metric("bytes_received", rnd, node, nbytes),
                _metric("bytes_sent", rnd, node, nbytes),
            ]
    store.ingest("r", rows)
    rep = replay(store, "r", parse_spec(SPEC))
    out = rep.link_s
    # round 1: pi-1 (straggling) 0.5 + 0.04 + 2.0 + 0.5 + 0.04 beats pi-2's 2.36
    assert out[1] == pytest.approx(3.08, abs=TOL_S)
    # round 2: pi-2 behind its slower link: 1 + 0.08 + 0.3 + 1 + 0.08
    assert out[2] == pytest.approx(2.46, abs=TOL_S)
    # with the protocol terms (defaults: 7 legs, 4 more in round 1, 0.05 s per reply;
    # no window waits on these slow links): round 1 pi-2 3.24, pi-1 3.52; round 2
    # pi-1 1.46, pi-2 3.02; the ServerApp handles them in that order
    full = rep.full_s
    assert full[1] == pytest.approx(3.52 + 0.05, abs=TOL_S)
    assert full[2] == pytest.approx(3.02 + 0.05, abs=TOL_S)


def test_rounds_without_device_time_are_absent(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create_run("r", "replay", seed=1, backend="local")
    store.ingest("r", [_metric("bytes_received", 1, "pi-1", 10.0)])
    rep = replay(store, "r", parse_spec(SPEC))
    assert rep.link_s == {} and rep.full_s == {}
