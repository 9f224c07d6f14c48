"""Flower's poll grids on the virtual clock (``simulation.poll_grid``; modelled).

On a real fleet two of Flower's waits are polls with a fixed period (3 s in ``flower``
protocol timing, 0.1 s in ``fast``: :data:`nodes.fl.timing.WAITS`):

* a SuperNode whose pull finds no message sleeps one period and pulls again, so its
  pulls lie on a grid of its own phase: a message pushed at ``t`` is picked up at the
  SuperNode's next pull at or after ``t``. Right after pushing a reply the SuperNode
  pulls again (and finds nothing): its phase is then the reply's push time;
* the ServerApp's grid pulls replies right after pushing a round's messages, then once
  per period: the round ends at the first poll at or after its slowest reply.

:class:`PollGrid` plays both on virtual time. Nothing here observes the real fleet:
each client's first phase is drawn from the run's seed (``default_rng([seed,
POLL_STREAM, partition id])``, uniform over one period), later phases follow from the
clock's own reply times. So a simulated round has the real rounds' quantisation and
spread, not the phases a particular local run happened to have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

#: Stream id of the phase draws in the run's seed sequence (jitter uses [seed, round,
#: pid], probability faults [seed, 7]).
POLL_STREAM = 3
#: Float slack when a reply lands exactly on a poll, seconds.
EPS_S = 1e-9


def poll_period_s(timing: str, fleet_size: int = 1) -> float:
    """Flower's poll period in ``timing`` (``workload.fl.protocol_timing``) for a fleet of
    ``fleet_size`` clients, seconds: the ServerApp grid's reply poll of
    :data:`nodes.fl.timing.WAITS` (the SuperNode's empty pull sleeps as long), in
    ``fast`` mode scaled with the fleet as the real fleet's
    (:func:`nodes.fl.timing.fleet_scale`)."""
    from nodes.fl.timing import PROTOCOL_TIMINGS, SERVERAPP, WAITS, fast_wait_s, fleet_scale

    if timing not in PROTOCOL_TIMINGS:
        raise ValueError(
            f"workload.fl.protocol_timing: {timing!r} (allowed: {list(PROTOCOL_TIMINGS)})"
        )
    wait = WAITS[SERVERAPP][0]
    return wait.flower_s if timing == "flower" else fast_wait_s(wait, fleet_scale(fleet_size))


@dataclass
class PollGrid:
    """The SuperNodes' pull grids and the ServerApp's reply-poll grid.

    Attributes
    ----------
    period_s : float
        Poll period, seconds (> 0).
    seed : int
        The run's seed (first phases).
    phases : dict of int to float
        Partition id -> the SuperNode's pull phase, seconds in ``[0, period_s)``.
    """

    period_s: float
    seed: int = 0
    phases: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ValueError(f"poll period_s must be > 0, got {self.period_s}")

    def phase(self, pid: int) -> float:
        """The pull phase of partition ``pid`` (drawn from the seed the first time)."""
        if pid not in self.phases:
            rng = np.random.default_rng([self.seed, POLL_STREAM, max(pid, 0)])
            self.phases[pid] = float(rng.uniform(0.0, self.period_s))
        return self.phases[pid]

    def pickup_wait(self, pid: int, t: float) -> float:
        """Seconds from a message pushed at virtual ``t`` to partition ``pid``'s next
        pull (in ``[0, period_s)``)."""
        return (self.phase(pid) - t) % self.period_s

    def pushed(self, pid: int, t: float) -> None:
        """Partition ``pid`` pushed a reply at virtual ``t`` (and pulls again then)."""
        self.phases[pid] = t % self.period_s

    def round_end(self, slowest_s: float) -> float:
        """Length of a round whose slowest reply arrives ``slowest_s`` after the round's
        messages were pushed: the ServerApp's first poll at or after it, seconds."""
        return max(0, math.ceil(slowest_s / self.period_s - EPS_S)) * self.period_s
