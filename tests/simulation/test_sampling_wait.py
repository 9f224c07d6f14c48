"""Flower's ``sample_nodes`` waiting for enough clients on the virtual clock: it moves
on to the poll at which a down client is back, and a fleet that never comes back ends
the run with its cause instead of hanging (fuzz case: every client down before round 1).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from flwr.serverapp.strategy.strategy_utils import sample_nodes

from testbed.simulation.availability import Availability, ClientTrace
from testbed.simulation.grid import ClockedGrid
from tests.simulation.inmemory import inmemory_grid
from tests.simulation.test_vfaults import NAMES, events, make

BOUND_S = 30.0  # wall seconds; Flower's own loop would wait forever


def sample(tmp_path: Path, *faults: dict[str, object]) -> tuple[ClockedGrid, Any, Path]:
    """Round 1's sampling of every client through the clocked grid, the faults fired
    before it; returns the grid, what ``sample_nodes`` returned or raised, and the
    telemetry path."""
    clock, path = make(tmp_path, *faults)
    assert clock.faults is not None
    grid, _, mapping = inmemory_grid(len(NAMES), 11)
    clocked = ClockedGrid(grid, clock, NAMES, clock.faults.tel, 30.0, mapping)
    clocked.arm()
    out: list[Any] = []

    def run() -> None:
        try:
            with clocked.sampling_waits():
                out.append(sample_nodes(grid, len(NAMES), len(NAMES)))
        except RuntimeError as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND_S)
    assert not thread.is_alive(), "sample_nodes still waiting on the virtual clock"
    return clocked, out[0], path


def test_sampling_waits_for_an_outage_on_virtual_time(tmp_path: Path) -> None:
    clocked, result, path = sample(
        tmp_path,
        {"kind": "outage", "tier": "edge", "at_round": 1, "phase": "before", "duration_s": 4.5},
    )
    sampled, _ = result
    assert len(sampled) == len(NAMES)
    assert clocked.elapsed_s == pytest.approx(5.0)  # the first 1 s poll after 4.5 s
    waited = [e for e in events(path) if e["name"] == "fleet_waited"]
    assert sum(e["data"]["waited_s"] for e in waited) == pytest.approx(5.0)
    back = [e["node"] for e in events(path) if e["name"] == "node_restarted"]
    assert sorted(back) == ["edge-1", "edge-2", "edge-3"]


def test_a_fleet_that_never_comes_back_ends_the_run_naming_why(tmp_path: Path) -> None:
    _, result, path = sample(
        tmp_path,
        {"kind": "crash", "node": "edge-1", "at_round": 1, "phase": "before"},
        {"kind": "outage", "node": "fog-1", "at_round": 1, "phase": "before", "duration_s": 2},
    )
    assert isinstance(result, RuntimeError)
    assert "edge-1 (crash (never returns))" in str(result)
    gone = [e for e in events(path) if e["name"] == "fleet_gone"]
    assert gone and gone[0]["data"]["down"] == ["edge-1"]  # fog-1 came back first


def test_up_at_follows_faults_and_the_availability_trace(tmp_path: Path) -> None:
    clock, _ = make(tmp_path)
    assert clock.faults is not None
    clock.faults.of("edge-1").down.append((0.0, 10.0, "outage"))
    clock.availability = Availability(
        {"edge-1": ClientTrace.of([(0, 5), (12, 20)], 30.0)}, NAMES, time_scale=1.0
    )
    assert clock.up_at("edge-1", 2.0) == 12.0  # fault until 10, trace off until 12
    assert clock.up_at("edge-1", 25.0) == 30.0  # the trace's next period
    assert clock.up_at("edge-2", 3.0) == 3.0
    clock.faults.of("edge-2").down.append((1.0, float("inf"), "crash"))
    assert clock.up_at("edge-2", 3.0) is None
    once = ClientTrace.of([(0, 5)], None)
    assert once.next_on(4.0) == 4.0 and once.next_on(6.0) is None
