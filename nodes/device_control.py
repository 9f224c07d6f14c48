"""Device emulation on a node (compute stretched to its profile) and its live fault controls.

A node's compute runs at this host's speed; :func:`stretch` then waits so that the
node's wall time equals the emulated device time ``work / speed_factor * slowdown``
(times the run's time-dilation factor, :mod:`kernel.dilation`; both are recorded),
``work`` the step's measured CPU time where the caller has it (FL training:
single-threaded, so the thread's CPU time), else its wall time. The
control plane changes a node's behaviour live (straggler
slowdown, misconfiguration) by writing a small JSON control file that the ClientApp
reads at every task.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

MISCONFIG_MODES = ("lr", "label-flip", "noise", "nan")


@dataclass(frozen=True)
class NodeControl:
    """Live fault state of a node (from its control file).

    Attributes
    ----------
    slowdown : float
        Straggler factor on compute time (1 = none).
    misconfig : str or None
        One of ``lr`` (learning rate x ``factor``), ``label-flip`` (labels permuted),
        ``noise`` (Gaussian noise of std ``factor`` added to the update), ``nan``.
    factor : float
        Parameter of the misconfiguration.
    until_round : int or None
        Last round the fault applies to (inclusive); ``None`` = until cleared.
    """

    slowdown: float = 1.0
    misconfig: str | None = None
    factor: float = 1.0
    until_round: int | None = None

    def active(self, server_round: int) -> NodeControl:
        """The control in force at ``server_round`` (none once ``until_round`` passed)."""
        if self.until_round is not None and server_round > self.until_round:
            return NodeControl()
        return self


def read_control(path: str | os.PathLike[str] | None) -> NodeControl:
    """Read a node's control file; a missing or empty path means no fault."""
    if not path:
        return NodeControl()
    try:
        data = json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return NodeControl()
    return NodeControl(**{k: v for k, v in data.items() if k in NodeControl.__dataclass_fields__})


def write_control(path: str | os.PathLike[str], control: NodeControl) -> None:
    """Atomically replace a node's control file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(control.__dict__))
    os.replace(tmp, p)


def stretch(
    real_s: float, speed_factor: float, slowdown: float = 1.0, cpu_s: float | None = None
) -> float:
    """Wait so that a compute step of ``real_s`` seconds takes the emulated device time.

    Parameters
    ----------
    real_s : float
        Measured wall time of the step on this host, seconds.
    speed_factor : float
        Device speed relative to this host (0.5 = twice as slow, 2 = twice as fast).
    slowdown : float
        Extra straggler factor.
    cpu_s : float, optional
        Measured CPU time of the step (the thread's, for single-threaded work). Given,
        it is the step's work: the device time no longer grows with this host's load
        (other nodes' processes contending for its cores stretch the wall time, not the
        CPU time; stretching the wall time would multiply that contention by the
        profile's factor). ``None``: the wall time is the work, as before.

    Returns
    -------
    float
        Emulated device time, seconds: ``work / speed_factor * slowdown`` (work =
        ``cpu_s`` or ``real_s``). The step lasts that times the run's time-dilation
        factor on the wall clock (:mod:`kernel.dilation`; 1 without dilation). A device
        faster than ``TDF`` times this host (or than this host under its current load)
        cannot be emulated by waiting: the step then took ``real_s / TDF`` emulated
        seconds, which is returned.
    """
    from kernel.dilation import tdf

    factor = tdf()
    work = real_s if cpu_s is None else cpu_s
    device_s = max(real_s / factor, work / speed_factor * slowdown)
    wait = device_s * factor - real_s
    if wait > 0:
        time.sleep(wait)
    return device_s
