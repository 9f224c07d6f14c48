"""Faults on virtual time: the spec's fault schedule decided on the simulation's clock.

The local backend's chaos engine (:mod:`testbed.chaos`) acts on processes and links
at wall instants. The simulation has neither, so each fault becomes what it does to
a client on virtual time (seconds since the fleet was ready). What that is, each kind
says itself (:meth:`testbed.faults.FaultKind.apply_virtual`, in its own file under
``testbed/faults/``): it books its effect here, through :class:`VirtualFaults`
(``down``, ``freeze``, ``change_link``, ``slow``, ``control``) and its events with
``later``; a kind that keeps the base's ``apply_virtual`` is refused by
:func:`check_faults` with the kind's reason (``superlink-restart``: no SuperLink runs).

A down client is not sampled at a round's start; one that goes down during its
exchange loses it (its reply is withheld: ``failed``). Triggers are those of the chaos
engine on virtual time: ``at_round`` (``before``: when round ``at_round`` starts;
``during``: ``delay_s`` virtual seconds after), ``at_time_s`` (virtual seconds) and
``probability`` (per round end and target not down, from ``default_rng([seed, 7])``
as the chaos engine draws). Events are the chaos engine's, with ``virtual_t_s``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nodes.device_control import NodeControl, write_control
from nodes.fl.telemetry import Telemetry
from testbed.faults import FAULT_KINDS
from testbed.simulation.timeline import INF, Override, first_overlap

if TYPE_CHECKING:
    from testbed.spec.models import FaultSpec


def simulated_kinds() -> list[str]:
    """The registered fault kinds the simulation decides on virtual time (their class
    overrides :meth:`testbed.faults.FaultKind.apply_virtual`)."""
    return [name for name in FAULT_KINDS if FAULT_KINDS[name].simulated()]


def check_faults(faults: Sequence[FaultSpec]) -> None:
    """ValueError naming ``faults[i].kind`` for each kind the simulation cannot decide
    (the kind's class has no virtual effect), with the class's reason."""
    problems = []
    for i, f in enumerate(faults):
        cls = FAULT_KINDS[f.kind]
        if not cls.simulated():
            problems.append(
                f"faults[{i}].kind: {f.kind!r} cannot be simulated by --backend simulation: "
                f"{cls.not_simulated} (simulated kinds: {', '.join(simulated_kinds())}); "
                "run it on --backend local"
            )
    if problems:
        raise ValueError("; ".join(problems))


@dataclass
class ClientFaults:
    """What faults did to one client, on virtual time (intervals ``[start, end)``)."""

    down: list[tuple[float, float, str]] = field(default_factory=list)
    frozen: list[tuple[float, float]] = field(default_factory=list)
    overrides: list[Override] = field(default_factory=list)
    slow: list[tuple[int, int | None, float]] = field(default_factory=list)

    def down_reason(self, a: float, b: float) -> str | None:
        """Why the client is down somewhere in ``[a, b]`` (None: up all along)."""
        i = first_overlap([(s, e) for s, e, _ in self.down], a, b)
        return None if i is None else self.down[i][2]

    def up_at(self, t: float) -> float | None:
        """The earliest virtual time from ``t`` on at which no fault holds the client
        down (None: it never returns)."""
        cur = t
        for _ in range(len(self.down) + 1):
            ends = [e for s, e, _ in self.down if s <= cur < e]
            if not ends:
                return cur
            cur = max(ends)
            if cur >= INF:
                return None
        return cur

    def slowdown(self, rnd: int) -> float:
        """Straggler factor of round ``rnd`` (the last straggler fault in force wins)."""
        factor = 1.0
        for first, last, f in self.slow:
            if first <= rnd and (last is None or rnd <= last):
                factor = f
        return factor


@dataclass(frozen=True)
class Pending:
    """An event due at virtual time ``t``."""

    t: float
    name: str
    node: str | None
    data: dict[str, Any]
    round: int | None = None  # the round it acts in (a fault fired before that round)


class VirtualFaults:
    """Fire the spec's faults on virtual time and keep each client's fault state.

    Parameters
    ----------
    faults : sequence of FaultSpec
        The schedule (kinds that are :func:`simulated_kinds`).
    tiers : dict of str to str
        Tier of every client node, by name (targets by ``tier``).
    seed : int
        Seeds the probability triggers.
    tel : Telemetry
        Where events go (the run's telemetry JSONL).
    control_dir : pathlib.Path or None
        Where misconfig control files go (``<partition id>.json``); None: not written.
    """

    def __init__(
        self,
        faults: Sequence[FaultSpec],
        tiers: dict[str, str],
        seed: int,
        tel: Telemetry,
        control_dir: Path | None = None,
    ) -> None:
        self.faults, self.tiers, self.tel = list(faults), tiers, tel
        self.pid = {name: i for i, name in enumerate(tiers)}
        self.control_dir = control_dir
        self.rng = np.random.default_rng([seed, 7])
        self.state: dict[str, ClientFaults] = {}
        self.pending: list[Pending] = []
        self.controls: list[tuple[int, str, NodeControl]] = []  # (first round, node, control)
        self.rejoin: dict[str, tuple[float, int, str]] = {}  # node -> (back at, round down, kind)
        self.round = 0
        self._acting: int | None = None  # what events of a "before round r" fault carry
        self.fired: set[int] = set()  # indices of at_time_s faults already fired

    def of(self, name: str) -> ClientFaults:
        """The fault state of client ``name`` (empty if no fault touched it)."""
        return self.state.setdefault(name, ClientFaults())

    def targets(self, f: FaultSpec) -> list[str]:
        """Clients fault ``f`` names (a node, the replicas of a node id, or a tier)."""
        if f.node is not None:
            return [n for n in self.tiers if n == f.node or n.rsplit("-", 1)[0] == f.node]
        return [n for n, tier in self.tiers.items() if tier == f.tier]

    # -- the clock drives these ------------------------------------------------------
    def round_started(self, rnd: int, t: float, horizon_s: float) -> None:
        """Round ``rnd`` starts at virtual ``t`` and ends by ``t + horizon_s``: its round
        triggers fire, and the ``at_time_s`` triggers before ``t + horizon_s`` (counted
        in round ``rnd``, or the one before when already due); events up to ``t`` are
        written (tagged with the previous round, as the chaos engine does, except those
        of a fault fired before round ``rnd``: they carry ``rnd``, the round it acts in)."""
        for i, f in enumerate(self.faults):
            if f.at_round == rnd and f.phase == "during":
                self.fire(f, t + f.delay_s, "schedule", rnd)
            elif f.at_round == rnd:
                self._acting = rnd
                try:
                    self.fire(f, t, "schedule", rnd - 1)
                finally:
                    self._acting = None
            elif f.at_time_s is not None and i not in self.fired and f.at_time_s < t + horizon_s:
                self.fire(f, f.at_time_s, "schedule", rnd if f.at_time_s >= t else rnd - 1)
                self.fired.add(i)
        self.flush(t, rnd - 1)
        self.round = rnd
        for first, name, control in [c for c in self.controls if c[0] <= rnd]:
            self._write_control(name, control)
            self.controls.remove((first, name, control))

    def round_ended(self, rnd: int, t: float) -> None:
        """Round ``rnd`` ended at virtual ``t``: probability draws (targets not down)."""
        for f in self.faults:
            if f.probability is None:
                continue
            for node in self.targets(f):
                if self.of(node).down_reason(t, t) is None and self.rng.random() < f.probability:
                    one = f.model_copy(update={"node": node, "tier": None})
                    self.fire(one, t, "probability", rnd)
        self.flush(t, rnd)

    def completed(self, name: str, rnd: int, t: float) -> None:
        """Client ``name`` completed round ``rnd`` at virtual ``t`` (rejoin bookkeeping)."""
        back = self.rejoin.get(name)
        if back is not None and back[0] <= t:
            del self.rejoin[name]
            self.later(
                t,
                "node_rejoined",
                name,
                time_to_rejoin_s=t - back[0],
                rounds_missed=rnd - back[1] - 1,
                fault=back[2],
            )

    def flush(self, t: float, rnd: int) -> None:
        """Write the events due by virtual ``t`` with round ``rnd``."""
        due = sorted((p for p in self.pending if p.t <= t), key=lambda p: p.t)
        self.pending = [p for p in self.pending if p.t > t]
        for p in due:
            r = p.round if p.round is not None else rnd
            self.tel.event(p.name, round=max(r, 0), node=p.node, virtual_t_s=p.t, **p.data)

    def later(self, t: float, name: str, node: str | None, **data: Any) -> None:
        """An event at virtual ``t`` (written once the clock passes it)."""
        self.pending.append(Pending(t, name, node, data, self._acting))

    # -- firing ----------------------------------------------------------------------
    def fire(self, f: FaultSpec, t: float, source: str, rnd: int) -> None:
        """Apply ``f`` at virtual ``t`` to each target (its kind's
        :meth:`~testbed.faults.FaultKind.apply_virtual`); ``rnd`` is the round it counts
        in (the chaos engine's current round when it fires)."""
        kind = FAULT_KINDS[f.kind](f)
        spec = json.loads(f.model_dump_json(exclude_none=True))
        for name in self.targets(f):
            self.later(t, "fault_injected", name, kind=f.kind, source=source, spec=spec)
            kind.apply_virtual(self, name, t, rnd)

    # -- what a kind books (FaultKind.apply_virtual) -----------------------------------
    def down(
        self, name: str, start: float, end: float | None, *, rnd: int, kind: str, why: str
    ) -> None:
        """Client ``name`` down during ``[start, end)`` (None: never returns) because of
        ``why``: ``node_down``, and ``node_restarted`` / ``node_rejoined`` once back."""
        stop = INF if end is None else end
        self.of(name).down.append((start, stop, why))
        self.later(start, "node_down", name, reason=why)
        if stop < INF:
            self.later(stop, "node_restarted", name, down_s=stop - start)
            self.rejoin[name] = (stop, rnd, kind)

    def freeze(self, name: str, start: float, end: float) -> None:
        """Client ``name`` frozen during ``[start, end)``: its compute stops (its link
        does not, unless the kind changes it too)."""
        self.of(name).frozen.append((start, end))
        self.of(name).frozen.sort()

    def change_link(
        self, name: str, start: float, end: float | None, changes: Mapping[str, Any]
    ) -> None:
        """Client ``name``'s link takes ``changes`` (:class:`LinkParams` fields, or
        ``partitioned: True``) during ``[start, end)`` (None: to the end of the run)."""
        self.of(name).overrides.append(Override(start, INF if end is None else end, changes))

    def slow(self, name: str, first: int, last: int | None, factor: float) -> None:
        """Client ``name``'s compute x ``factor`` in rounds ``first`` to ``last``
        (None: to the end of the run)."""
        self.of(name).slow.append((first, last, factor))

    def control(self, name: str, first: int, control: NodeControl) -> None:
        """Client ``name``'s ClientApp reads ``control`` from round ``first`` on (its
        control file, written when that round starts, as on the local backend)."""
        self.controls.append((first, name, control))

    def _write_control(self, name: str, control: NodeControl) -> None:
        if self.control_dir is not None:
            write_control(self.control_dir / f"{self.pid[name]}.json", control)
