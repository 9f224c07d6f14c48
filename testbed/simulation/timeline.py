"""A client's link over virtual time: piecewise-constant states, and transfers on it.

The simulation's link model (modelled, not measured). A link is a list of segments
``(start_s, LinkParams)`` on the run's virtual time (seconds since the fleet was
ready): the node's own ``schedule`` and its satellite passes as its link kind priced
them (:mod:`testbed.simulation.links`), and the changes faults make
(``partition``: ``partitioned``; ``degrade``: new values for a while). A transfer of
``n`` bytes starting at ``t``:

1. waits while the link is partitioned (traffic held, as the shaping proxy holds it);
2. takes one latency: ``latency_ms + U(-jitter_ms, +jitter_ms)`` of the segment it
   starts in, clipped at 0 (the proxy's and netem's uniform jitter);
3. sends ``n`` bytes at the goodput ``rate_bytes_per_s * (1 - loss_pct / 100)``
   (every lost segment sent again, no congestion control modelled), segment by
   segment; no progress while partitioned; unlimited bandwidth: no transfer term.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from testbed.emulation.link import LinkParams

INF = math.inf


@dataclass(frozen=True)
class Override:
    """A change of a link's parameters during ``[start_s, end_s)`` (virtual seconds)."""

    start_s: float
    end_s: float
    changes: Mapping[str, Any]


class LinkTimeline:
    """Piecewise-constant link parameters over virtual time.

    Parameters
    ----------
    segments : sequence of (float, LinkParams)
        ``(start_s, params)``, each holding until the next start; the first holds
        before its start too. At least one.
    overrides : sequence of Override
        Changes applied on top, in order (later ones win).
    """

    def __init__(
        self, segments: Sequence[tuple[float, LinkParams]], overrides: Sequence[Override] = ()
    ) -> None:
        base = sorted(segments, key=lambda s: s[0])
        if not base:
            raise ValueError("segments: at least one (start_s, LinkParams) is required")
        cuts = {s for s, _ in base} | {o.start_s for o in overrides} | {o.end_s for o in overrides}
        starts = sorted(c for c in cuts if c < INF)
        self.starts: list[float] = []
        self.params: list[LinkParams] = []
        for t in starts:
            p = base[max(0, bisect.bisect_right([s for s, _ in base], t) - 1)][1]
            for o in overrides:
                if o.start_s <= t < o.end_s:
                    p = replace(p, **o.changes)
            if not self.params or self.params[-1] != p:
                self.starts.append(t)
                self.params.append(p)

    def at(self, t: float) -> LinkParams:
        """The link's parameters at virtual time ``t``."""
        return self.params[max(0, bisect.bisect_right(self.starts, t) - 1)]

    def _next_change(self, t: float) -> float:
        i = bisect.bisect_right(self.starts, t)
        return self.starts[i] if i < len(self.starts) else INF

    def _unblocked(self, t: float) -> float:
        """The first time >= ``t`` the link is not partitioned (INF: never)."""
        while self.at(t).partitioned:
            t = self._next_change(t)
            if t == INF:
                return INF
        return t

    def transfer(self, t: float, nbytes: int, rng: np.random.Generator | None = None) -> float:
        """Virtual time at which ``nbytes`` sent at ``t`` have arrived (INF: never).

        Parameters
        ----------
        t : float
            Start, virtual seconds.
        nbytes : int
            Payload, bytes.
        rng : numpy.random.Generator, optional
            Draws the jitter (none drawn without it, or with ``jitter_ms`` 0).
        """
        t = self._unblocked(t)
        if t == INF:
            return INF
        p = self.at(t)
        latency_ms = p.latency_ms
        if p.jitter_ms > 0 and rng is not None:
            latency_ms = max(0.0, latency_ms + rng.uniform(-p.jitter_ms, p.jitter_ms))
        t += latency_ms / 1000.0
        left = float(nbytes)
        while left > 0:
            t = self._unblocked(t)
            if t == INF:
                return INF
            p = self.at(t)
            if p.rate_bytes_per_s is None:
                return t
            rate = p.rate_bytes_per_s * (1.0 - p.loss_pct / 100.0)  # goodput, bytes/s
            end = self._next_change(t)
            if rate <= 0:
                t = end
                continue
            if left <= (end - t) * rate:
                return t + left / rate
            left -= (end - t) * rate
            t = end
        return t


def first_overlap(intervals: Sequence[tuple[float, float]], a: float, b: float) -> int | None:
    """Index of the first ``[start, end)`` interval meeting ``[a, b]``, else None."""
    for i, (s, e) in enumerate(intervals):
        if s <= b and e > a:
            return i
    return None


def advance_compute(frozen: Sequence[tuple[float, float]], t: float, work_s: float) -> float:
    """Virtual end of ``work_s`` seconds of compute from ``t``, stopped while frozen
    (``[start, end)`` intervals, sorted by start)."""
    for s, e in frozen:
        if e <= t:
            continue
        if s >= t + work_s:
            break
        if s > t:
            work_s -= s - t
        t = e
    return t + work_s
