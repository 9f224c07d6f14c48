"""Unit tests of the virtual clock (no Ray)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.emulation.link import LinkParams
from testbed.simulation.clock import ClientModel, VirtualClock, protocol_delay_s
from tests.simulation.calibration_doc import DOC_ROUNDING_S, derived_flower, measured_fast

#: Relative tolerance of the link-time arithmetic (float rounding only).
REL_TOL = 1e-9


def test_link_time_is_size_over_bandwidth_plus_latency() -> None:
    link = ClientModel(params=LinkParams(bandwidth_mbps=100.0, latency_ms=20.0))
    # 1 MB down + 0.5 MB up over 100 Mbit/s: 12 Mbit / 100 Mbit/s = 0.12 s; + 2 x 20 ms
    assert link.link_s(1_000_000, 500_000) == pytest.approx(0.12 + 0.04, rel=REL_TOL)


def test_unlimited_link_has_only_latency() -> None:
    model = ClientModel(params=LinkParams(latency_ms=5.0))
    assert model.link_s(10**9, 10**9) == pytest.approx(0.01, rel=REL_TOL)


def test_client_time_stretches_compute_and_adds_protocol_delay() -> None:
    clock = VirtualClock(
        {"edge-0": ClientModel(stretch=4.0, params=LinkParams(bandwidth_mbps=8.0))},
        deadline_s=30.0,
        protocol_delay_s=0.5,
    )
    # 2 s compute x 4 + 1 MB each way at 8 Mbit/s (2 s) + 0.5 s
    assert clock.client_s("edge-0", 2.0, 1_000_000, 1_000_000) == pytest.approx(10.5, rel=REL_TOL)
    # an unknown node: no stretch, no link
    assert clock.client_s("other", 2.0, 1, 1) == pytest.approx(2.5, rel=REL_TOL)


def test_protocol_delay_defaults_to_the_timing_and_an_explicit_value_wins() -> None:
    # the defaults are the measured figures (docs/results/calibration.md), not constants:
    # fast, the sweep's median constant; flower, the earlier runs' less the new terms
    assert protocol_delay_s("fast") == pytest.approx(measured_fast()[0], rel=REL_TOL)
    assert protocol_delay_s("flower") == pytest.approx(derived_flower()[0], abs=DOC_ROUNDING_S)
    assert protocol_delay_s("flower", 0.0) == 0.0  # an explicit 0 is kept
    assert protocol_delay_s("fast", 1.25) == 1.25
    with pytest.raises(ValueError, match="workload.fl.protocol_timing"):
        protocol_delay_s("grpc-bidi")


def test_backend_settings_carry_the_protocol_delay(tmp_path: Path) -> None:
    from testbed.backends.simulation import SimulationBackend
    from testbed.planner import make_plan
    from testbed.spec.loader import parse_spec

    def delay(extra: str) -> float:
        spec = parse_spec(
            "name: d\nfleet:\n  nodes:\n    - {id: cloud, tier: cloud}\n"
            "    - {id: edge, tier: edge}\nworkload:\n  fl:\n    rounds: 1\n" + extra
        )
        settings = SimulationBackend(make_plan(spec), tmp_path).settings({})
        return float(settings["clock"]["protocol_delay_s"])

    # Flower's default timing, then fast: the measured figures reach the run's clock
    assert delay("") == pytest.approx(derived_flower()[0], abs=DOC_ROUNDING_S)
    assert delay("    protocol_timing: fast\n") == pytest.approx(measured_fast()[0], rel=REL_TOL)
    assert delay("simulation: {protocol_delay_s: 0.75}\n") == 0.75
