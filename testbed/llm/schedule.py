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
- :class:`RoundRobin` (the GPipe baseline's router): replicas in turn.
- :class:`Heft` (list scheduling): the stages of one request form a chain (its upward
  ranks are in chain order), so HEFT places each stage on the node with the earliest
  finish time among the nodes that hold that stage's units, from each node's predicted
  free time, the stage's compute time there and the transfer into it.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from testbed.llm.partition import Chain, Cut, cut_cost

__all__ = ["Arts", "Heft", "Replica", "Route", "RoundRobin", "Scheduler", "make_scheduler"]

Route = tuple[tuple[str, int, int], ...]
"""``(node, start unit, stop unit)`` of each non-empty stage, in order."""


@dataclass
class Replica:
    """One pipeline: a chain, its cut, and its modelled costs (s)."""

    chain: Chain
    cut: Cut
    latency_s: float = 0.0
    bottleneck_s: float = 0.0

    def __post_init__(self) -> None:
        self.bottleneck_s, self.latency_s = cut_cost(self.chain, self.cut)

    @property
    def route(self) -> Route:
        return tuple(
            (n, a, b) for n, (a, b) in zip(self.chain.nodes, self.cut, strict=True) if b > a
        )


@dataclass
class _State:
    queue: int = 0
    capacity: float = 1.0
    down_until: float = 0.0


class Scheduler:
    """Base: picks routes; ``done`` reports an outcome (observed service time, s)."""

    name = "base"

    def __init__(self, replicas: list[Replica], clock: object = time.monotonic) -> None:
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

    cooldown_s = 5.0

    def learn(self, st: _State, rep: Replica, observed_s: float) -> None:
        """Update a replica's state from an observed service time (default: nothing)."""


class RoundRobin(Scheduler):
    """Replicas in turn (GPipe baseline)."""

    name = "round_robin"

    def __init__(self, replicas: list[Replica], clock: object = time.monotonic) -> None:
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
        self, replicas: list[Replica], clock: object = time.monotonic, alpha: float = 0.3
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


@dataclass
class _Slot:
    node: str
    chain: Chain
    index: int  # the node's position in its chain
    free_at: float = 0.0


class Heft(Scheduler):
    """HEFT's processor selection for each request's chain of stages (all replicas must
    share one cut, so stage ``k`` can run on any replica's ``k``-th node)."""

    name = "heft"

    def __init__(self, replicas: list[Replica], clock: object = time.monotonic) -> None:
        super().__init__(replicas, clock)
        cuts = {r.cut for r in replicas}
        if len(cuts) != 1:
            raise ValueError("heft needs every replica to have the same cut (use cut: even)")
        self.cut = replicas[0].cut
        nodes: dict[str, _Slot] = {}
        self.slots: list[list[_Slot]] = []
        for k in range(len(self.cut)):
            stage = []
            for rep in replicas:
                name = rep.chain.nodes[k]
                stage.append(nodes.setdefault(name, _Slot(name, rep.chain, k)))
            self.slots.append(list({id(s): s for s in stage}.values()))

    def pick(self) -> tuple[int, Route]:
        with self.lock:
            ready = self.now()
            route = []
            for k, (a, b) in enumerate(self.cut):
                if b <= a:
                    continue
                best = min(self.slots[k], key=lambda s: self._finish(s, k, a, b, ready))
                finish = self._finish(best, k, a, b, ready)
                best.free_at = finish
                ready = finish
                route.append((best.node, a, b))
            return -1, tuple(route)

    @staticmethod
    def _finish(slot: _Slot, k: int, a: int, b: int, ready: float) -> float:
        t = slot.chain.stage_s(slot.index, a, b)
        return max(slot.free_at, ready) + t


SCHEDULERS: dict[str, type[Scheduler]] = {"arts": Arts, "round_robin": RoundRobin, "heft": Heft}


def make_scheduler(name: str, replicas: list[Replica]) -> Scheduler:
    """A scheduler by name (ValueError naming the choices)."""
    if name not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {name!r}; choose one of {sorted(SCHEDULERS)}")
    return SCHEDULERS[name](replicas)
