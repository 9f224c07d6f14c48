"""The virtual clock of ``--backend simulation`` (a model, labelled ``modelled``).

Flower's Simulation Engine runs every ClientApp on a Ray actor of this host, so wall
time says nothing about the devices and links a spec describes. Per client and round,
starting at the round's virtual start ``T``::

    t1 = link.transfer(T, bytes_down) + stall(bytes_down)   (latency, jitter, rate, loss,
                                                       held while partitioned; schedules;
                                                       flow-control window waits)
    t2 = t1 + compute_s * stretch * straggler         (stopped while paused)
    t3 = link.transfer(t2, bytes_up) + stall(bytes_up)
    virtual_client_s = t3 + protocol_delay_s + latency_legs * latency
                       [+ startup_s + startup_latency_legs * latency] - T

``startup_s`` and its latency legs are added to a client's first train exchange of the
run only (the first-task costs of a real node: :data:`STARTUP_S`). ``latency`` is the
link's one-way latency when the exchange starts; the legs, the window stalls and the
ServerApp's per-reply work that ends a round (``server_reply_s``, applied by
:mod:`testbed.simulation.grid`) are :mod:`testbed.simulation.protocol`.
With ``simulation.poll_grid`` the exchange also waits for the client's next pull on
its SuperNode's poll grid, and the round ends on the ServerApp's reply-poll grid
(:mod:`testbed.simulation.polls`).

``compute_s`` is the ClientApp's measured ``train-cpu-s`` (the training thread's CPU
time, as the local backend's device emulation uses it; ``train-duration-s``, the wall
time, for an app that does not report it), ``stretch = 1 /
cpu_speed_factor`` of the node's profile (never below 1, as the local backend's
emulated wait), the link is :class:`testbed.simulation.timeline.LinkTimeline` (the
node's link, its schedule or satellite passes, as its link kind priced them:
:mod:`testbed.simulation.links`; and the faults' changes). A client down
(crash, outage, flapping, availability trace) anywhere in ``[T, T + virtual_client_s]``
loses its exchange. See :mod:`testbed.simulation.grid` for what is done with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from testbed.emulation.link import LinkParams
from testbed.simulation.protocol import ProtocolModel
from testbed.simulation.timeline import LinkTimeline, advance_compute

if TYPE_CHECKING:
    from testbed.simulation.availability import Availability
    from testbed.simulation.polls import PollGrid
    from testbed.simulation.vfaults import VirtualFaults

#: Default of the named protocol-delay term per ``workload.fl.protocol_timing``, seconds
#: added to every client's exchange: the time Flower's Deployment Engine spends on one
#: train exchange beyond device and link time and the protocol-on-the-link terms
#: (:mod:`testbed.simulation.protocol`): polling waits, object store, hand-offs.
#: Measured on the local fleet, this 2-core machine, as the median over the rounds after
#: the first of measured round time less the clock replayed on the run's own
#: measurements (:mod:`testbed.simulation.calibration`); docs/results/calibration.md
#: names the runs (``fast``: 11 latency-sweep runs; ``flower``: the earlier runs'
#: steady-state delay less what the new terms add on their spec).
PROTOCOL_DELAY_S: dict[str, float] = {"flower": 6.89, "fast": 0.52}

#: Default of the first-exchange start-up term per ``workload.fl.protocol_timing``,
#: seconds added to a client's first train exchange of a run: what a real node's first
#: round costs beyond the later ones and beyond ``startup_latency_legs`` (the warm
#: ClientApp's first task: its FAB load, its first object pull meeting Flower's 1 + 2 s
#: back-off instead of 1 s, torch's first fit). Measured on the local fleet as round 1's
#: excess over the median of the later rounds, with the same replay and runs.
STARTUP_S: dict[str, float] = {"flower": 2.06, "fast": 0.37}


def _default(table: dict[str, float], key: str, timing: str, explicit: float | None) -> float:
    """``explicit`` (``simulation.<key>``) if given, else ``table[timing]``."""
    if explicit is not None:
        return explicit
    if timing not in table:
        raise ValueError(
            f"workload.fl.protocol_timing: {timing!r} has no default {key} "
            f"(allowed: {sorted(table)}); set simulation.{key}"
        )
    return table[timing]


def protocol_delay_s(timing: str, explicit: float | None = None) -> float:
    """The clock's protocol delay: ``explicit`` (``simulation.protocol_delay_s``) if
    given, else the measured default of ``timing`` (``workload.fl.protocol_timing``)."""
    return _default(PROTOCOL_DELAY_S, "protocol_delay_s", timing, explicit)


def startup_s(timing: str, explicit: float | None = None) -> float:
    """The clock's first-exchange term: ``explicit`` (``simulation.startup_s``) if
    given, else the measured default of ``timing`` (``workload.fl.protocol_timing``)."""
    return _default(STARTUP_S, "startup_s", timing, explicit)


@dataclass(frozen=True)
class ClientModel:
    """What the clock knows of one client node.

    Attributes
    ----------
    stretch : float
        Device time per second of measured host compute (>= 1).
    params : LinkParams
        The link's state at virtual time 0 (as its kind priced it:
        :func:`testbed.simulation.links.client_model`).
    schedule : sequence of (float, LinkParams)
        Later link states ``(at_s, params)`` (schedules, satellite passes).
    tier : str
        The node's tier (fault targets by tier).
    """

    stretch: float = 1.0
    params: LinkParams = LinkParams()
    schedule: Sequence[tuple[float, LinkParams]] = ()
    tier: str = "edge"

    @cached_property
    def link(self) -> LinkTimeline:
        """The link without faults."""
        return LinkTimeline([(0.0, self.params), *((float(t), p) for t, p in self.schedule)])

    def link_s(self, bytes_down: int, bytes_up: int) -> float:
        """Virtual link time of one exchange at virtual 0 without jitter, seconds."""
        return self.link.transfer(self.link.transfer(0.0, bytes_down), bytes_up)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the simulation's settings (JSON); :meth:`from_dict` reads it."""
        return {
            "stretch": self.stretch,
            "tier": self.tier,
            "params": self.params.to_dict(),
            "schedule": [[t, p.to_dict()] for t, p in self.schedule],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ClientModel:
        """The model :meth:`to_dict` wrote."""
        return cls(
            stretch=float(d["stretch"]),
            params=LinkParams.from_dict(d["params"]),
            schedule=tuple((float(t), LinkParams.from_dict(p)) for t, p in d["schedule"]),
            tier=str(d["tier"]),
        )


@dataclass(frozen=True)
class Exchange:
    """One client's exchange in a round on virtual time.

    Attributes
    ----------
    seconds : float
        ``virtual_client_s`` (INF: never completes, e.g. a link cut for good).
    lost : str or None
        Why the exchange is lost (the client went down), else None.
    """

    seconds: float
    lost: str | None = None


@dataclass
class VirtualClock:
    """The model's parameters for a run.

    Attributes
    ----------
    clients : mapping of str to ClientModel
        Per client node name.
    deadline_s : float
        Round deadline on virtual time (``workload.fl.round_timeout_s``), seconds.
    protocol_delay_s : float
        Added to every client's exchange, seconds (0 here; runs take
        :func:`protocol_delay_s`).
    startup_s : float
        Added to each client's first train exchange of the run, seconds (0 here; runs
        take :func:`startup_s`).
    seed : int
        Seeds the jitter draws (one generator per round and client).
    faults : VirtualFaults or None
        The fault schedule on virtual time.
    availability : Availability or None
        The availability trace.
    polls : PollGrid or None
        Flower's poll grids on virtual time (``simulation.poll_grid``), else None.
    protocol : ProtocolModel
        The protocol-on-the-link terms (off here; runs take the spec's,
        :mod:`testbed.simulation.protocol`); the grid queues the replies with its
        ``server_reply_s``.
    """

    clients: Mapping[str, ClientModel]
    deadline_s: float
    protocol_delay_s: float = 0.0
    seed: int = 0
    faults: VirtualFaults | None = None
    availability: Availability | None = None
    startup_s: float = 0.0
    polls: PollGrid | None = None
    protocol: ProtocolModel = field(default_factory=ProtocolModel)
    _links: dict[str, LinkTimeline] = field(default_factory=dict)
    _started: set[str] = field(default_factory=set)  # clients past their first exchange

    def model(self, name: str) -> ClientModel:
        return self.clients.get(name) or ClientModel()

    def client_s(self, name: str, compute_s: float, bytes_down: int, bytes_up: int) -> float:
        """Virtual time of one exchange at virtual 0, round 1 (no faults), seconds (the
        client's first exchange carries ``startup_s``)."""
        return self.exchange(name, 0, 1, 0.0, compute_s, bytes_down, bytes_up).seconds

    def link(self, name: str) -> LinkTimeline:
        """The client's link with the faults' changes so far."""
        base = self.model(name).link
        fs = self.faults.state.get(name) if self.faults else None
        changes = fs.overrides if fs else []
        if not changes:
            return base
        key = f"{name}/{len(changes)}"
        if key not in self._links:
            segs = list(zip(base.starts, base.params, strict=True))
            self._links[key] = LinkTimeline(segs, changes)
        return self._links[key]

    def exchange(
        self, name: str, pid: int, rnd: int, start: float, compute_s: float, down: int, up: int
    ) -> Exchange:
        """Client ``name`` (partition ``pid``) exchanging in round ``rnd`` from ``start``.

        Parameters
        ----------
        compute_s : float
            Measured host compute, seconds.
        down, up : int
            Payload bytes of the message and of its reply.
        """
        c = self.model(name)
        fs = self.faults.state.get(name) if self.faults else None
        rng = np.random.default_rng([self.seed, rnd, pid])
        link = self.link(name)
        t = start + (self.polls.pickup_wait(pid, start) if self.polls else 0.0)
        pm, at_start = self.protocol, link.at(t)
        t = link.transfer(t, down, rng) + pm.stall_s(down, at_start)
        work = compute_s * c.stretch * (fs.slowdown(rnd) if fs else 1.0)
        t = advance_compute(fs.frozen, t, work) if fs else t + work
        t = link.transfer(t, up, rng) + pm.stall_s(up, link.at(t))
        lat = at_start.latency_ms / 1000.0
        t += self.protocol_delay_s + pm.latency_legs * lat + self._startup(name, lat)
        if self.polls:
            self.polls.pushed(pid, t)
        lost = self.down_reason(name, start, min(t, start + 10 * self.deadline_s))
        return Exchange(t - start, lost)

    def _startup(self, name: str, latency: float) -> float:
        """``startup_s`` and its latency legs (``latency``: one-way, seconds) on the
        client's first exchange of the run, else 0."""
        if name in self._started:
            return 0.0
        self._started.add(name)
        return self.startup_s + self.protocol.startup_latency_legs * latency

    def down_reason(self, name: str, a: float, b: float) -> str | None:
        """Why client ``name`` is down somewhere in virtual ``[a, b]`` (None: up)."""
        fs = self.faults.state.get(name) if self.faults else None
        why = fs.down_reason(a, b) if fs else None
        if why is not None:
            return why
        if self.availability is not None:
            return self.availability.down_reason(name, a, b)
        return None

    def up_at(self, name: str, t: float) -> float | None:
        """The earliest virtual time from ``t`` on at which client ``name`` is up, its
        faults and the availability trace both (None: it never comes back)."""
        fs = self.faults.state.get(name) if self.faults else None
        cur: float | None = t
        for _ in range(64):  # alternate until both agree (each step only moves forward)
            if cur is None:
                return None
            before = cur
            cur = fs.up_at(cur) if fs else cur
            if cur is not None and self.availability is not None:
                cur = self.availability.up_at(name, cur)
            if cur == before:
                return cur
        return cur
