"""Device emulation by waiting: the work is the step's CPU time when the caller has it.

The waits are judged as requested, not as timed: :func:`record_sleeps` replaces
``time.sleep`` for the calling thread with a spy (a loaded host overruns sleeps; what
``stretch`` asks for is its whole decision)."""

from __future__ import annotations

import threading
import time

import pytest

from nodes.device_control import stretch


def record_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Seconds of every ``time.sleep`` this thread asks for from now on (not slept);
    other threads sleep as usual."""
    me, real, asked = threading.get_ident(), time.sleep, []

    def sleep(seconds: float) -> None:
        if threading.get_ident() != me:
            return real(seconds)
        asked.append(seconds)
        return None

    monkeypatch.setattr(time, "sleep", sleep)
    return asked


def test_wall_time_is_the_work_without_cpu_time(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = record_sleeps(monkeypatch)
    assert stretch(real_s=0.05, speed_factor=0.5, slowdown=2.0) == pytest.approx(0.2)
    assert slept == [pytest.approx(0.15)]  # 0.2 - 0.05 already spent


def test_contended_wall_time_is_not_multiplied_by_the_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 0.05 s of CPU that took 0.25 s of wall on a loaded host: a device 2x slower than
    # this host needs 0.1 s, already exceeded, so no wait (the old rule waited 0.25 s)
    slept = record_sleeps(monkeypatch)
    assert stretch(real_s=0.25, speed_factor=0.5, slowdown=1.0, cpu_s=0.05) == pytest.approx(0.25)
    assert slept == []


def test_cpu_time_sets_the_device_time_and_the_straggler_multiplies_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept = record_sleeps(monkeypatch)
    device_s = stretch(real_s=0.06, speed_factor=0.5, slowdown=3.0, cpu_s=0.05)
    assert device_s == pytest.approx(0.3)  # 0.05 / 0.5 * 3
    assert slept == [pytest.approx(0.24)]  # 0.3 - 0.06


def test_a_faster_device_than_this_host_is_never_emulated_below_the_wall_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept = record_sleeps(monkeypatch)
    assert stretch(real_s=0.05, speed_factor=4.0, cpu_s=0.05) == pytest.approx(0.05)
    assert slept == []
