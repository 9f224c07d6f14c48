"""Unit tests of the virtual clock (no Ray)."""

from __future__ import annotations

import pytest

from testbed.simulation.clock import ClientModel, VirtualClock

#: Relative tolerance of the link-time arithmetic (float rounding only).
REL_TOL = 1e-9


def test_link_time_is_size_over_bandwidth_plus_latency() -> None:
    link = ClientModel(bandwidth_mbps=100.0, latency_ms=20.0)
    # 1 MB down + 0.5 MB up over 100 Mbit/s: 12 Mbit / 100 Mbit/s = 0.12 s; + 2 x 20 ms
    assert link.link_s(1_000_000, 500_000) == pytest.approx(0.12 + 0.04, rel=REL_TOL)


def test_unlimited_link_has_only_latency() -> None:
    assert ClientModel(latency_ms=5.0).link_s(10**9, 10**9) == pytest.approx(0.01, rel=REL_TOL)


def test_client_time_stretches_compute_and_adds_protocol_delay() -> None:
    clock = VirtualClock(
        {"edge-0": ClientModel(stretch=4.0, bandwidth_mbps=8.0, latency_ms=0.0)},
        deadline_s=30.0,
        protocol_delay_s=0.5,
    )
    # 2 s compute x 4 + 1 MB each way at 8 Mbit/s (2 s) + 0.5 s
    assert clock.client_s("edge-0", 2.0, 1_000_000, 1_000_000) == pytest.approx(10.5, rel=REL_TOL)
    # an unknown node: no stretch, no link
    assert clock.client_s("other", 2.0, 1, 1) == pytest.approx(2.5, rel=REL_TOL)
