"""Links on virtual time: transfers across schedules, partitions, loss and jitter."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.emulation.link import LinkParams
from testbed.simulation.timeline import INF, LinkTimeline, Override, advance_compute

#: Float rounding only: the model is closed-form arithmetic.
REL_TOL = 1e-9


def test_transfer_is_latency_plus_size_over_rate() -> None:
    link = LinkTimeline([(0.0, LinkParams(bandwidth_mbps=8.0, latency_ms=50.0))])
    # 1 MB at 8 Mbit/s = 1 s, + 50 ms
    assert link.transfer(2.0, 1_000_000) == pytest.approx(3.05, rel=REL_TOL)


def test_transfer_crosses_a_schedule_change() -> None:
    link = LinkTimeline(
        [(0.0, LinkParams(bandwidth_mbps=8.0)), (0.5, LinkParams(bandwidth_mbps=16.0))]
    )
    # 0.5 s at 1 MB/s = 0.5 MB, the other 0.5 MB at 2 MB/s = 0.25 s
    assert link.transfer(0.0, 1_000_000) == pytest.approx(0.75, rel=REL_TOL)


def test_partition_holds_traffic_until_healed() -> None:
    base = [(0.0, LinkParams(bandwidth_mbps=8.0, latency_ms=10.0))]
    cut = LinkTimeline(base, [Override(1.0, 5.0, {"partitioned": True})])
    # starts inside the cut: waits to 5 s, then 10 ms + 1 s
    assert cut.transfer(2.0, 1_000_000) == pytest.approx(6.01, rel=REL_TOL)
    # starts before: 0.5 MB before the cut, the rest after it
    assert cut.transfer(0.49, 1_000_000) == pytest.approx(5.5, rel=REL_TOL)
    assert LinkTimeline(base, [Override(1.0, INF, {"partitioned": True})]).transfer(2, 1) == INF


def test_loss_lowers_goodput_and_jitter_is_bounded() -> None:
    lossy = LinkTimeline([(0.0, LinkParams(bandwidth_mbps=8.0, loss_pct=20.0))])
    assert lossy.transfer(0.0, 1_000_000) == pytest.approx(1.25, rel=REL_TOL)
    jit = LinkTimeline([(0.0, LinkParams(latency_ms=100.0, jitter_ms=30.0))])
    rng = np.random.default_rng(1)
    draws = [jit.transfer(0.0, 0, rng) for _ in range(200)]
    assert min(draws) >= 0.07 and max(draws) <= 0.13 and np.std(draws) > 0.01


def test_degrade_override_then_restore() -> None:
    link = LinkTimeline(
        [(0.0, LinkParams(bandwidth_mbps=8.0))], [Override(10.0, 20.0, {"bandwidth_mbps": 0.8})]
    )
    assert link.at(15.0).bandwidth_mbps == 0.8 and link.at(20.0).bandwidth_mbps == 8.0
    assert link.transfer(10.0, 100_000) == pytest.approx(11.0, rel=REL_TOL)


def test_compute_stops_while_frozen() -> None:
    assert advance_compute([(1.0, 3.0)], 0.0, 2.0) == pytest.approx(4.0)
    assert advance_compute([(5.0, 6.0)], 0.0, 2.0) == pytest.approx(2.0)
    assert advance_compute([(0.0, 3.0)], 1.0, 1.0) == pytest.approx(4.0)
