"""The clock's protocol terms (no Ray): the first-exchange start-up term and Flower's
poll grids on virtual time."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodes.fl.telemetry import Telemetry
from testbed.emulation.link import LinkParams
from testbed.simulation.clock import (
    ClientModel,
    VirtualClock,
    startup_s,
)
from testbed.simulation.config import SimulationSpec
from testbed.simulation.polls import PollGrid, poll_period_s
from tests.simulation.calibration_doc import DOC_ROUNDING_S, derived_flower, measured_fast

#: Relative tolerance of the clock's arithmetic (float rounding only).
REL_TOL = 1e-9


def test_startup_is_added_to_each_clients_first_exchange_only() -> None:
    clock = VirtualClock(
        {"a": ClientModel(params=LinkParams(latency_ms=50.0))},
        deadline_s=60.0,
        protocol_delay_s=1.0,
        startup_s=2.5,
    )
    base = 1.0 + 2 * 0.05 + 0.2  # delay + latency each way + compute
    first = clock.exchange("a", 0, 1, 0.0, 0.2, 10, 10).seconds
    again = clock.exchange("a", 0, 2, 10.0, 0.2, 10, 10).seconds
    other = clock.exchange("b", 1, 2, 10.0, 0.2, 10, 10).seconds  # b's first: round 2
    assert first == pytest.approx(base + 2.5, rel=REL_TOL)
    assert again == pytest.approx(base, rel=REL_TOL)
    assert other == pytest.approx(1.0 + 0.2 + 2.5, rel=REL_TOL)


def test_startup_defaults_to_the_timing_and_an_explicit_value_wins() -> None:
    # the measured figures (docs/results/calibration.md): fast, the sweep's median
    # round-1 excess; flower, the earlier runs' less the 4 start-up legs
    assert startup_s("fast") == pytest.approx(measured_fast()[1], rel=REL_TOL)
    assert startup_s("flower") == pytest.approx(derived_flower()[1], abs=DOC_ROUNDING_S)
    assert startup_s("flower", 0.0) == 0.0
    with pytest.raises(ValueError, match="simulation.startup_s"):
        startup_s("grpc-bidi")


def _clock_settings(tmp_path: Path, extra: str) -> dict[str, object]:
    from testbed.backends.simulation import SimulationBackend
    from testbed.planner import make_plan
    from testbed.spec.loader import parse_spec

    spec = parse_spec(
        "name: d\nfleet:\n  nodes:\n    - {id: cloud, tier: cloud}\n"
        "    - {id: edge, tier: edge}\nworkload:\n  fl:\n    rounds: 1\n" + extra
    )
    clock: dict[str, object] = SimulationBackend(make_plan(spec), tmp_path).settings({})["clock"]
    return clock


def test_backend_settings_carry_startup_and_poll_grid(tmp_path: Path) -> None:
    c = _clock_settings(tmp_path, "")
    assert c["startup_s"] == pytest.approx(derived_flower()[1], abs=DOC_ROUNDING_S)
    assert c["poll_period_s"] is None
    c = _clock_settings(tmp_path, "    protocol_timing: fast\nsimulation: {startup_s: 0.3}\n")
    assert c["startup_s"] == 0.3
    assert c["protocol_delay_s"] == pytest.approx(measured_fast()[0], rel=REL_TOL)
    # the grid plays the two polls: the default delay loses their expected sum (a period)
    c = _clock_settings(tmp_path, "simulation: {poll_grid: true}\n")
    assert c["poll_period_s"] == 3.0
    assert c["protocol_delay_s"] == pytest.approx(derived_flower()[0] - 3.0, abs=DOC_ROUNDING_S)
    c = _clock_settings(tmp_path, "simulation: {poll_grid: true, protocol_delay_s: 1.5}\n")
    assert c["protocol_delay_s"] == 1.5  # an explicit delay is kept


def test_the_simulation_process_builds_the_specs_protocol_model(tmp_path: Path) -> None:
    from testbed.simulation.protocol import ProtocolModel
    from testbed.simulation.runner import clock_of

    def model(extra: str) -> ProtocolModel:
        c = _clock_settings(tmp_path, extra)
        settings = {"clock": {**c, "models": [], "model_of": []}, "names": []}
        return clock_of(settings, Telemetry(str(tmp_path / "tel.jsonl"))).protocol

    assert model("") == SimulationSpec().protocol_model() != ProtocolModel()
    off = "simulation: {latency_legs: 0, flow_window_bytes: null, server_reply_s: 0}\n"
    assert model(off) == ProtocolModel(startup_latency_legs=SimulationSpec().startup_latency_legs)


def test_poll_period_is_flowers_hard_coded_wait() -> None:
    assert poll_period_s("flower") == 3.0
    assert poll_period_s("fast") == pytest.approx(0.1)
    # the real fleet's fast waits grow with it (x N/4 beyond 4 nodes), Flower's at most
    assert poll_period_s("fast", 8) == pytest.approx(0.2)
    assert poll_period_s("fast", 10_000) == 3.0
    with pytest.raises(ValueError, match="protocol_timing"):
        poll_period_s("grpc-bidi")
    with pytest.raises(ValueError, match="period_s"):
        PollGrid(0.0)


def test_pickup_waits_for_the_supernodes_next_pull() -> None:
    grid = PollGrid(3.0, phases={0: 1.0})
    assert grid.pickup_wait(0, 0.0) == pytest.approx(1.0)
    assert grid.pickup_wait(0, 1.0) == pytest.approx(0.0)  # a pull at the push instant
    assert grid.pickup_wait(0, 1.5) == pytest.approx(2.5)
    grid.pushed(0, 7.2)  # the SuperNode pulls again right after its reply: phase 1.2
    assert grid.pickup_wait(0, 9.0) == pytest.approx(1.2)  # next pull at 10.2


def test_first_phases_come_from_the_seed() -> None:
    a, b, c = PollGrid(3.0, seed=11), PollGrid(3.0, seed=11), PollGrid(3.0, seed=12)
    phases = [a.phase(p) for p in range(20)]
    assert phases == [b.phase(p) for p in range(20)]
    assert phases != [c.phase(p) for p in range(20)]
    assert all(0.0 <= x < 3.0 for x in phases)
    assert max(phases) - min(phases) > 1.5  # spread over the period, not one value


def test_round_ends_at_the_serverapps_next_reply_poll() -> None:
    grid = PollGrid(3.0)
    assert grid.round_end(0.0) == 0.0
    assert grid.round_end(0.4) == pytest.approx(3.0)
    assert grid.round_end(3.0) == pytest.approx(3.0)  # a reply at a poll is seen there
    assert grid.round_end(7.9) == pytest.approx(9.0)


def test_clock_exchange_waits_for_the_pull_and_moves_the_phase() -> None:
    polls = PollGrid(3.0, phases={0: 1.0})
    clock = VirtualClock({}, deadline_s=60.0, protocol_delay_s=0.25, polls=polls)
    # pull at 1.0, then 0.5 s compute and the 0.25 s delay: reply at 1.75
    assert clock.exchange("a", 0, 1, 0.0, 0.5, 0, 0).seconds == pytest.approx(1.75)
    assert polls.phases[0] == pytest.approx(1.75)
    # round 2 pushed at 3.0: next pull at 4.75
    assert clock.exchange("a", 0, 2, 3.0, 0.5, 0, 0).seconds == pytest.approx(1.75 + 0.75)
