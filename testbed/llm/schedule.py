"""Online request scheduling over pipeline replicas: ARTS, round-robin, HEFT.

A *route* is the list of ``(node, start, stop)`` hops one request crosses. Every
scheduler picks a route when a request arrives and hears back when it ends:

- :class:`Arts` (Hyperion's online part): each replica's estimated completion time for
  the new request is ``latency_r / capacity_r + queue_r * bottleneck_r / capacity_r``
  from its modelled one-request latency and bottleneck stage (the partition's cost
  model), the requests it holds now (``queue_r``), and its *effective capacity*
  ``capacity_r``: an exponentially weighted mean of modelled / observed service times,
  re-estimated at every completion (a slowed node lowers it). The lowest estimate
  wins; a replica whose request failed is skipped for ``cooldown_s``.
- :class:`RoundRobin`: replicas in turn (a plain router; the GPipe baseline batches
  instead, :mod:`testbed.llm.gpipe`).
- :class:`Heft` (HEFT's processor selection at run time): every replica's placement
  was chosen offline by HEFT (:func:`testbed.llm.partition.heft_placement`); a new
  request goes to the replica whose route finishes earliest given each node's predicted
  free time (a node shared by replicas is one processor), and the chosen route's nodes
  are then predicted busy until its hops finish.

Every scheduler keeps **emulated** time (:func:`emulated_clock`: the monotonic clock over
the run's time-dilation factor, :mod:`kernel.dilation`), the clock of the partition's
modelled costs and of the observed service times it hears back: ARTS's cool-down and
HEFT's predicted free times last ``TDF`` times longer on the wall clock.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from kernel.dilation import emulated
from testbed.llm.partition import Chain, Cut, Placement, cut_placement, placement_cost

__all__ = [
    "Arts",
    "Heft",
    "Replica",
    "Route",
    "RoundRobin",
    "Scheduler",
    "emulated_clock",
    "make_scheduler",
]

Route = tuple[tuple[str, int, int], ...]
"""``(node, start unit, stop unit)`` of each non-empty stage, in order."""


@dataclass
class Replica:
    """One pipeline: a chain, its cut or placement, and its modelled costs (s).

    ``placement`` (hops as chain node indices) defaults to the cut's non-empty stages;
    HEFT's placement may skip nodes or revisit them, and then ``cut`` is empty.
    """

    chain: Chain
    cut: Cut
    placement: Placement = ()
    latency_s: float = 0.0
    bottleneck_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.placement:
            self.placement = cut_placement(self.cut)
        self.bottleneck_s, self.latency_s = placement_cost(self.chain, self.placement)

    @property
    def route(self) -> Route:
        return tuple((self.chain.nodes[i], a, b) for i, a, b in self.placement)

    def hop_s(self) -> list[float]:
        """Modelled time of each hop of the route, s."""
        return [self.chain.stage_s(i, a, b) for i, a, b in self.placement]


def emulated_clock() -> float:
    """The monotonic clock in emulated seconds (wall / the run's TDF)."""
    return emulated(time.monotonic())


@dataclass
class _State:
    queue: int = 0
    capacity: float = 1.0
    down_until: float = 0.0


class Scheduler:
    """Base: picks routes; ``done`` reports an outcome (observed service time, emulated s).

    ``clock`` is read for the current time (emulated s; :func:`emulated_clock`)."""

    name = "base"

    def __init__(self, replicas: list[Replica], clock: object = emulated_clock) -> None:
        if not replicas:
            raise ValueError("no replicas to schedule on")
        self.replicas = replicas
        self.clock = clock
        self.lock = threading.Lock()
        self.state = [_State() for _ in replicas]

    def now(self) -> float:
        clock = self.clock
        assert callable(clock)
        return float(clock())

    def pick(self) -> tuple[int, Route]:
        """The replica index (-1: per-stage choice) and route for a new request."""
        raise NotImplementedError

    def done(self, replica: int, route: Route, observed_s: float | None) -> None:
        """The request on ``replica`` ended after ``observed_s`` (None: it failed)."""
        if replica < 0:
            return
        with self.lock:
            st = self.state[replica]
            st.queue = max(0, st.queue - 1)
            if observed_s is None:
                st.down_until = self.now() + self.cooldown_s
            else:
                self.learn(st, self.replicas[replica], observed_s)

    cooldown_s = 5.0  # emulated s (the clock's)

    def learn(self, st: _State, rep: Replica, observed_s: float) -> None:
        """Update a replica's state from an observed service time (default: nothing)."""


class RoundRobin(Scheduler):
    """Replicas in turn (GPipe baseline)."""

    name = "round_robin"

    def __init__(self, replicas: list[Replica], clock: object = emulated_clock) -> None:
        super().__init__(replicas, clock)
        self._next = 0

    def pick(self) -> tuple[int, Route]:
        with self.lock:
            r = self._next % len(self.replicas)
            self._next += 1
            self.state[r].queue += 1
            return r, self.replicas[r].route


class Arts(Scheduler):
    """Adaptive routing by the lowest estimated completion time (Hyperion's ARTS).

    Parameters
    ----------
    alpha : float
        Weight of the newest observation in the capacity estimate.
    """

    name = "arts"

    def __init__(
        self, replicas: list[Replica], clock: object = emulated_clock, alpha: float = 0.3
    ) -> None:
        super().__init__(replicas, clock)
        self.alpha = alpha

    def estimate(self, r: int) -> float:
        """Estimated completion time of a new request on replica ``r``, s."""
        st, rep = self.state[r], self.replicas[r]
        if st.down_until > self.now():
            return math.inf
        return (rep.latency_s + st.queue * rep.bottleneck_s) / st.capacity

    def pick(self) -> tuple[int, Route]:
        with self.lock:
            est = [self.estimate(r) for r in range(len(self.replicas))]
            r = min(range(len(est)), key=lambda k: (est[k], self.state[k].queue, k))
            self.state[r].queue += 1
            return r, self.replicas[r].route

    def learn(self, st: _State, rep: Replica, observed_s: float) -> None:
        ratio = rep.latency_s / max(observed_s, 1e-9)
        st.capacity = (1 - self.alpha) * st.capacity + self.alpha * ratio


class Heft(Scheduler):
    """HEFT's earliest-finish rule over the replicas' routes (placements from
    :func:`~testbed.llm.partition.heft_placement`); ties go to the earlier replica."""

    name = "heft"

    def __init__(self, replicas: list[Replica], clock: object = emulated_clock) -> None:
        super().__init__(replicas, clock)
        self.free_at: dict[str, float] = {n: 0.0 for r in replicas for n in r.chain.nodes}

    def finish(self, r: int, ready: float) -> list[float]:
        """Predicted finish time of each hop of replica ``r``'s route from ``ready``."""
        out, t = [], ready
        free = dict(self.free_at)
        for (node, _a, _b), hop in zip(self.replicas[r].route, self.replicas[r].hop_s(),
                                       strict=True):  # fmt: skip
            t = max(free[node], t) + hop
            free[node] = t
            out.append(t)
        return out

    def pick(self) -> tuple[int, Route]:
        with self.lock:
            ready = self.now()
            ends = [self.finish(r, ready) for r in range(len(self.replicas))]
            r = min(range(len(ends)), key=lambda k: (ends[k][-1], k))
            for (node, _a, _b), t in zip(self.replicas[r].route, ends[r], strict=True):
                self.free_at[node] = t
            self.state[r].queue += 1
            return r, self.replicas[r].route


SCHEDULERS: dict[str, type[Scheduler]] = {"arts": Arts, "round_robin": RoundRobin, "heft": Heft}


def make_scheduler(name: str, replicas: list[Replica]) -> Scheduler:
    """A scheduler by name (ValueError naming the choices)."""
    if name not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {name!r}; choose one of {sorted(SCHEDULERS)}")
    return SCHEDULERS[name](replicas)
