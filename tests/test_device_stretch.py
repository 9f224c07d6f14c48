"""Device emulation by waiting: the work is the step's CPU time when the caller has it."""

from __future__ import annotations

import time

import pytest

from nodes.device_control import stretch


def _timed(**kw: float) -> tuple[float, float]:
    t0 = time.perf_counter()
    device_s = stretch(**kw)  # type: ignore[arg-type]
    return device_s, time.perf_counter() - t0


def test_wall_time_is_the_work_without_cpu_time() -> None:
    device_s, waited = _timed(real_s=0.05, speed_factor=0.5, slowdown=2.0)
    assert device_s == pytest.approx(0.2)
    assert 0.14 <= waited < 0.3


def test_contended_wall_time_is_not_multiplied_by_the_profile() -> None:
    # 0.05 s of CPU that took 0.25 s of wall on a loaded host: a device 2x slower than
    # this host needs 0.1 s, already exceeded, so no wait (the old rule waited 0.25 s)
    device_s, waited = _timed(real_s=0.25, speed_factor=0.5, slowdown=1.0, cpu_s=0.05)
    assert device_s == pytest.approx(0.25)
    assert waited < 0.05


def test_cpu_time_sets_the_device_time_and_the_straggler_multiplies_it() -> None:
    device_s, waited = _timed(real_s=0.06, speed_factor=0.5, slowdown=3.0, cpu_s=0.05)
    assert device_s == pytest.approx(0.3)  # 0.05 / 0.5 * 3
    assert 0.2 <= waited < 0.35  # 0.3 - 0.06


def test_a_faster_device_than_this_host_is_never_emulated_below_the_wall_time() -> None:
    device_s, waited = _timed(real_s=0.05, speed_factor=4.0, cpu_s=0.05)
    assert device_s == pytest.approx(0.05)
    assert waited < 0.02
