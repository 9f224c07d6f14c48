"""Time dilation: the run's clock factor TDF, read by every process of a run.

A device faster than this host cannot be emulated by waiting. Time dilation (DieCast,
Gupta et al., NSDI 2008) slows the whole emulated world down instead: with a
time-dilation factor ``TDF`` every emulated second lasts ``TDF`` wall seconds. A device
of speed ``s`` (relative to this host) then needs ``work / s * TDF`` wall seconds for
``work`` host-seconds of compute, which can be waited for whenever ``TDF >= s``; links
carry ``bandwidth / TDF`` and delay by ``latency * TDF``; faults, schedules and
timeouts fire ``TDF`` times later on the wall clock; and what the run reports is
emulated time, ``wall / TDF``.

The runner chooses the factor (``time_dilation`` in the spec, see docs/time-dilation.md)
and publishes it in the environment variable :data:`ENV` for the run, so the processes it
starts (nodes, containers, link shapers in this process) read the same value with
:func:`tdf`. Without the variable the factor is 1: nothing is dilated.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator

ENV = "TESTBED_TDF"

#: Metrics measured on the run's (dilated) wall clock; the store records them in
#: emulated time (``wall / TDF``). Not on it: the host's own work (``train_cpu_s``, and
#: ``train_duration_s``, training's host wall time before the device's wait), figures a
#: node computes in emulated time already (``tt_device_s``: :func:`stretch`'s return),
#: modelled figures (``radio_*``) and the orbital clock (``orbital_time_s``).
CLOCK_METRICS = frozenset(
    {
        "round_duration_s",
        "device_time_s",
        "wall_time_s",
        "round_trip_s",
        "round_trip_median_s",
        "link_stalled_s",
        "link_partitioned_s",
    }
)


def tdf() -> float:
    """The run's time-dilation factor (``1.0`` when none is set); ValueError on a
    malformed value."""
    raw = os.environ.get(ENV)
    if not raw:
        return 1.0
    value = float(raw)
    if not (math.isfinite(value) and value >= 1.0):
        raise ValueError(f"{ENV}={raw!r}: a time-dilation factor is a number >= 1")
    return value


def wall(emulated_s: float, factor: float | None = None) -> float:
    """Wall seconds that ``emulated_s`` emulated seconds last."""
    return emulated_s * (tdf() if factor is None else factor)


def emulated(wall_s: float, factor: float | None = None) -> float:
    """Emulated seconds that ``wall_s`` wall seconds stand for."""
    return wall_s / (tdf() if factor is None else factor)


@contextlib.contextmanager
def dilated(factor: float) -> Iterator[None]:
    """Publish ``factor`` in :data:`ENV` for the block (restored after), so the
    processes and link shapers started inside it run on the dilated clock."""
    old = os.environ.get(ENV)
    if factor == 1.0:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = repr(float(factor))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old
