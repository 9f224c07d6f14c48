"""Faults on virtual time: the spec's fault schedule decided on the simulation's clock.

The local backend's chaos engine (:mod:`testbed.chaos`) acts on processes and links
at wall instants. The simulation has neither, so each fault becomes what it does to
a client on virtual time (seconds since the fleet was ready):

=============  ===============================================================
crash          down from the trigger on (never returns)
outage         down for ``duration_s``
flapping       ``repeat`` times down ``duration_s`` then up ``duration_s``
pause          frozen for ``duration_s`` (compute and link stop, nothing lost)
partition      link partitioned for ``duration_s`` (traffic held, then sent)
degrade        link values changed (for ``duration_s``, or to the end)
straggler      compute x ``factor`` in the rounds it covers
misconfig      the ClientApp's control file (as on the local backend) in its rounds
=============  ===============================================================

A down client is not sampled at a round's start; one that goes down during its
exchange loses it (its reply is withheld: ``failed``). Triggers are those of the chaos
engine on virtual time: ``at_round`` (``before``: when round ``at_round`` starts;
``during``: ``delay_s`` virtual seconds after), ``at_time_s`` (virtual seconds) and
``probability`` (per round end and target not down, from ``default_rng([seed, 7])``
as the chaos engine draws). Events are the chaos engine's, with ``virtual_t_s``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nodes.device_control import NodeControl, write_control
from nodes.fl.telemetry import Telemetry
from testbed.simulation.timeline import INF, Override, first_overlap
from testbed.spec.models import FaultSpec

#: Fault kinds the simulation decides on virtual time; any other kind is refused.
SIMULATED_KINDS = (
    "crash",
    "outage",
    "flapping",
    "pause",
    "partition",
    "degrade",
    "straggler",
    "misconfig",
)


def check_faults(faults: Sequence[FaultSpec]) -> None:
    """ValueError naming ``faults[i].kind`` for a kind the simulation cannot decide."""
    for i, f in enumerate(faults):
        if f.kind not in SIMULATED_KINDS:
            raise ValueError(
                f"faults[{i}].kind: {f.kind!r} cannot be simulated by --backend simulation "
                f"(simulated kinds: {', '.join(SIMULATED_KINDS)}); run it on --backend local"
            )


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


class VirtualFaults:
    """Fire the spec's faults on virtual time and keep each client's fault state.

    Parameters
    ----------
    faults : sequence of FaultSpec
        The schedule (kinds in :data:`SIMULATED_KINDS`).
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
        written (tagged with the previous round, as the chaos engine does)."""
        for i, f in enumerate(self.faults):
            if f.at_round == rnd:
                when = t + (f.delay_s if f.phase == "during" else 0.0)
                self.fire(f, when, "schedule", rnd if f.phase == "during" else rnd - 1)
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
            self.tel.event(p.name, round=max(rnd, 0), node=p.node, virtual_t_s=p.t, **p.data)

    def later(self, t: float, name: str, node: str | None, **data: Any) -> None:
        """An event at virtual ``t`` (written once the clock passes it)."""
        self.pending.append(Pending(t, name, node, data))

    # -- firing ----------------------------------------------------------------------
    def fire(self, f: FaultSpec, t: float, source: str, rnd: int) -> None:
        """Apply ``f`` at virtual ``t`` to each target; ``rnd`` is the round it counts
        in (the chaos engine's current round when it fires)."""
        spec = json.loads(f.model_dump_json(exclude_none=True))
        for name in self.targets(f):
            self.later(t, "fault_injected", name, kind=f.kind, source=source, spec=spec)
            APPLY[f.kind](self, f, name, t, rnd)

    def _down(self, name: str, kind: str, span: tuple[float, float], rnd: int, why: str) -> None:
        start, end = span
        self.of(name).down.append((start, end, why))
        self.later(start, "node_down", name, reason=why)
        if end < INF:
            self.later(end, "node_restarted", name, down_s=end - start)
            self.rejoin[name] = (end, rnd, kind)

    @staticmethod
    def _rounds(f: FaultSpec, rnd: int, rounds: int | None) -> tuple[int, int | None]:
        """First and last round a straggler/misconfig covers (chaos' ``until_round``)."""
        first = max(rnd, 1) if f.phase == "during" else rnd + 1
        return first, None if rounds is None else first + rounds - 1

    def _write_control(self, name: str, control: NodeControl) -> None:
        if self.control_dir is not None:
            write_control(self.control_dir / f"{self.pid[name]}.json", control)


def _crash(vf: VirtualFaults, f: FaultSpec, name: str, t: float, rnd: int) -> None:
    vf._down(name, f.kind, (t, INF), rnd, "crash (never returns)")


def _outage(vf: VirtualFaults, f: FaultSpec, name: str, t: float, rnd: int) -> None:
    d = float(f.params.duration_s)
    repeat = int(f.params.repeat) if f.kind == "flapping" else 1
    for k in range(repeat):
        span = (t + 2 * k * d, t + (2 * k + 1) * d)
        vf._down(name, f.kind, span, rnd, f"{f.kind} for {d} s")


def _pause(vf: VirtualFaults, f: FaultSpec, name: str, t: float, rnd: int) -> None:
    d = float(f.params.duration_s)
    vf.of(name).frozen.append((t, t + d))
    vf.of(name).frozen.sort()
    vf.of(name).overrides.append(Override(t, t + d, {"partitioned": True}))  # nothing sent
    vf.later(t, "node_paused", name, duration_s=d)
    vf.later(t + d, "node_resumed", name)


def _partition(vf: VirtualFaults, f: FaultSpec, name: str, t: float, rnd: int) -> None:
    d = float(f.params.duration_s)
    vf.of(name).overrides.append(Override(t, t + d, {"partitioned": True}))
    vf.later(t, "link_partitioned", name, duration_s=d)
    vf.later(t + d, "link_healed", name)


def _degrade(vf: VirtualFaults, f: FaultSpec, name: str, t: float, rnd: int) -> None:
    changes = f.params.changes()
    d = f.params.duration_s
    end = INF if d is None else t + float(d)
    vf.of(name).overrides.append(Override(t, end, changes))
    vf.later(t, "link_degraded", name, duration_s=d, **changes)
    if end < INF:
        vf.later(end, "link_restored", name)


def _straggler(vf: VirtualFaults, f: FaultSpec, name: str, t: float, rnd: int) -> None:
    first, last = vf._rounds(f, rnd, f.params.rounds)
    vf.of(name).slow.append((first, last, float(f.params.factor)))
    vf.later(t, "straggler_set", name, factor=f.params.factor, until_round=last)


def _misconfig(vf: VirtualFaults, f: FaultSpec, name: str, t: float, rnd: int) -> None:
    p = f.params
    first, last = vf._rounds(f, rnd, p.rounds)
    control = NodeControl(misconfig=p.mode, factor=p.factor or 1.0, until_round=last)
    vf.controls.append((first, name, control))
    vf.later(t, "misconfig_set", name, mode=p.mode, factor=p.factor, until_round=last)


APPLY: dict[str, Callable[[VirtualFaults, FaultSpec, str, float, int], None]] = {
    "crash": _crash,
    "outage": _outage,
    "flapping": _outage,
    "pause": _pause,
    "partition": _partition,
    "degrade": _degrade,
    "straggler": _straggler,
    "misconfig": _misconfig,
}
assert set(APPLY) == set(SIMULATED_KINDS)
