"""Chaos engine: applies scheduled and live faults to a running fleet, and records
every fault and its observed effect as events (nothing is lost: the store has it all).

The kinds are registered classes (:mod:`testbed.faults`); the engine owns the
triggers (``at_round``/``phase``/``delay_s``, ``at_time_s``, ``probability``, live
injections), the timers that undo timed faults, and the down/rejoin bookkeeping.

Effects observed: ``node_down`` / ``node_restarted`` / ``node_rejoined`` (with
``time_to_rejoin_s`` and ``rounds_missed``), per-(round, node) statuses, and the bytes
sent to a node that never answered (``bytes_lost`` metric, from the ServerApp).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import time
from collections import Counter
from collections.abc import Callable, Container
from typing import Any

import numpy as np

from kernel.dilation import wall
from testbed.backends.base import Backend, NotStarted
from testbed.faults import FAULT_KINDS, FaultKind
from testbed.planner import Plan
from testbed.spec.models import FaultSpec
from testbed.store import RunStore


class ChaosEngine:
    """Fire faults on round/time/probability triggers and from live injections.

    Parameters
    ----------
    plan : Plan
        The run (targets are resolved against its client nodes).
    backend : Backend
        The running backend (fault kinds act through its node handles and links).
    store, run_id
        Where events go.
    seed : int
        Seeds the probability triggers.
    """

    def __init__(
        self, plan: Plan, backend: Backend, store: RunStore, run_id: str, seed: int
    ) -> None:
        self.plan, self.backend, self.store, self.run_id = plan, backend, store, run_id
        self.rng = np.random.default_rng([seed, 7])
        self.faults = list(plan.faults)
        self.timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.t0 = time.time()
        self.round = 0  # the last round that started (0 before the first)
        self._acting_round: int | None = None  # what a "before round r" fault records
        self.down: dict[str, dict[str, Any]] = {}
        self.back: dict[str, dict[str, Any]] = {}

    # -- targets and triggers ------------------------------------------------------
    def targets(self, f: FaultSpec) -> list[str]:
        """Client nodes fault ``f`` names (:func:`fault_targets`)."""
        return fault_targets(self.plan, f)

    def start(self) -> None:
        """Fleet is ready: arm time triggers and round-1 faults."""
        self.t0 = time.time()
        for f in self.faults:
            if f.at_time_s is not None:
                self.later(f.at_time_s, functools.partial(self.fire, f, "schedule"))
            elif f.at_round == 1 and f.phase == "before":
                self._fire_before(f, 1)

    def later(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` from :meth:`tick` once ``delay_s`` emulated seconds have passed
        (``delay_s`` x the run's time-dilation factor on the wall clock)."""
        heapq.heappush(self.timers, (time.time() + wall(delay_s), next(self._seq), fn))

    def tick(self) -> None:
        """Run due timers and pending live injections (call often)."""
        now = time.time()
        while self.timers and self.timers[0][0] <= now:
            _, _, fn = heapq.heappop(self.timers)
            fn()
        for inj in self.store.pending_injections(self.run_id):
            try:
                self.fire(FaultSpec.model_validate(inj.spec), "live")
                self.store.mark_injection(inj.id, "applied")
            except Exception as exc:  # a bad live request must not stop the run
                self.store.mark_injection(inj.id, f"rejected: {exc}")

    def on_record(self, rec: dict[str, Any]) -> None:
        """React to ServerApp telemetry (round boundaries, node statuses)."""
        kind, name = rec.get("kind"), rec.get("name")
        if kind == "event" and name == "round_start":
            self._round_started(int(rec["round"]))
        elif kind == "event" and name == "round_end":
            self._round_ended(int(rec["round"]))
        elif kind == "status" and rec.get("status") == "completed":
            self._node_completed(rec["node"], int(rec["round"]))

    def _round_started(self, r: int) -> None:
        self.round = r
        for f in self.faults:
            if f.at_round == r and f.phase == "during":
                self.later(f.delay_s, functools.partial(self.fire, f, "schedule"))

    def _round_ended(self, r: int) -> None:
        for f in self.faults:
            if f.at_round == r + 1 and f.phase == "before":
                self._fire_before(f, r + 1)
            elif f.probability is not None:
                self._draw(f)

    def _fire_before(self, f: FaultSpec, r: int) -> None:
        """Fire a fault triggered ``before`` round ``r``: it acts in round ``r``, so its
        events carry ``r`` (``ctx.round`` stays the last round started)."""
        self._acting_round = r
        try:
            self.fire(f, "schedule")
        finally:
            self._acting_round = None

    def _draw(self, f: FaultSpec) -> None:
        """Probability trigger: one draw per target that is not down."""
        for node in self.targets(f):
            if node not in self.down and self.rng.random() < (f.probability or 0.0):
                self.fire(f.model_copy(update={"node": node, "tier": None}), "probability")

    def _node_completed(self, node: str, r: int) -> None:
        if node in self.back:
            info = self.back.pop(node)
            self.event(
                "node_rejoined",
                node,
                round=r,
                time_to_rejoin_s=time.time() - info["restarted_at"],
                rounds_missed=r - info["round_down"] - 1,
                fault=info["fault"],
            )

    # -- what fault kinds call (testbed.faults.FaultContext) -------------------------
    def event(self, name: str, node: str | None, round: int | None = None, **data: Any) -> None:
        """Record an event of the run (``round`` defaults to the round the fault acts
        in: the current one, or the next for a fault fired before it)."""
        if round is None:
            round = self._acting_round if self._acting_round is not None else self.round
        self.store.add_event(self.run_id, name, round=round, node=node, **data)

    def node_down(self, node: str, reason: str, kind: str) -> None:
        """Book ``node`` as down since now (``node_down`` event). Faults that take a node
        down overlap as on the virtual clock: each holds it down, and it comes back when
        the last one that holds it ends (:meth:`release`); a crash holds it for good."""
        if node in self.down:  # already down: one more hold
            self.down[node]["holds"] += 1
        else:
            self.down[node] = {
                "since": time.time(), "round_down": self.round, "fault": kind, "holds": 1
            }  # fmt: skip
        self.event("node_down", node, reason=reason)

    def release(self, node: str, kind: str) -> bool:
        """A fault of ``kind`` that held ``node`` down ends: True when no other fault
        holds it (restart it now, then :meth:`node_restarted`); else the node stays down
        (``node_held`` event, naming what still holds it)."""
        info = self.down.get(node)
        if info is None:
            return True
        if info["holds"] > 1:
            info["holds"] -= 1
            self.event("node_held", node, ended=kind, holds=info["holds"])
            return False
        return True

    def node_restarted(self, node: str) -> None:
        """Book ``node`` as restarted (``node_restarted``; ``node_rejoined`` follows when
        it next completes a round)."""
        info = self.down.pop(node, None)
        if info is None:
            return
        info["restarted_at"] = time.time()
        self.back[node] = info
        self.event("node_restarted", node, down_s=time.time() - info["since"])

    # -- firing -----------------------------------------------------------------------
    def fire(self, f: FaultSpec, source: str) -> None:
        """Apply fault ``f`` now to each of its targets (the server for server kinds)."""
        kind = FAULT_KINDS[f.kind](f)
        spec = json.loads(f.model_dump_json(exclude_none=True))
        names: list[str | None] = [None] if kind.target == "server" else list(self.targets(f))
        for name in names:
            self.event("fault_injected", name, kind=f.kind, source=source, spec=spec)
            try:
                self._apply(kind, name)
            except NotImplementedError as exc:
                self.event("fault_rejected", name, kind=f.kind, reason=str(exc))
            except NotStarted as exc:  # (a node nothing runs on: an LLM stage HEFT skipped)
                self.event("fault_rejected", name, kind=f.kind, reason=str(exc.args[0]))

    def _apply(self, kind: FaultKind, name: str | None) -> None:
        state = kind.apply(self, name)
        after = kind.undo_after_s()
        if after is not None:
            self.later(after, lambda: kind.undo(self, name, state))


def finalize_statuses(store: RunStore, run_id: str, plan: Plan, rounds: int) -> None:
    """Settle the (round, client node) statuses after the run, from what was observed.

    Rows recorded under Flower's numeric id (``node-<id>``) are renamed with the
    ``node_identified`` events of the run; a row whose id was never identified stays
    under its id (it is not attributed to a node by elimination). A round that ended
    (``round_end`` event) gives each client without a status ``excluded`` (not
    sampled: down or not connected, the reason taken from the chaos events). A round
    that never started, or started but did not end, gets no invented rows: a run that
    ends early has rows only for what happened (docs/faults.md).

    ``rounds`` is the planned count; rounds past it are not looked at.

    A fleet of more than :data:`ROWS_PER_CLIENT_MAX` clients (a simulation's virtual
    clients) gets no ``excluded`` row for a client that was merely not sampled: per
    round and (tier/profile) group, the count of such clients is one ``not_sampled``
    metric (``node`` = ``tier/profile``), and an event ``statuses_grouped`` says so. A
    client observed down (a ``node_down`` event) still gets its ``excluded`` row.
    """
    if plan.num_clients > ROWS_PER_CLIENT_MAX:
        _finalize_grouped(store, run_id, plan, rounds)
        return
    names = set(plan.client_names())
    ended, downs = _observed(store, run_id, names)
    have = {(s.round, s.node) for s in store.round_status(run_id)}
    for r in sorted(x for x in ended if 1 <= x <= rounds):
        for n in sorted(names):
            if (r, n) not in have:
                why = [
                    ev.data_dict.get("reason", "down")
                    for ev in downs
                    if ev.node == n and ev.round is not None and ev.round <= r
                ]
                reason = f"not sampled: {why[-1]}" if why else "not sampled this round"
                store.set_status(run_id, r, n, "excluded", reason)


def _observed(store: RunStore, run_id: str, names: Any) -> tuple[set[int], list[Any]]:
    """What :func:`finalize_statuses` reads of a run's events, once: its status rows
    renamed from Flower's node ids to node names (``node_identified``), then the rounds
    that ended and the ``node_down`` events with a round."""
    events = store.events(run_id)
    ids = {
        ev.data_dict.get("node_id"): ev.node
        for ev in events
        if ev.kind == "node_identified" and ev.node is not None
    }
    _rename_rows(store, run_id, names, ids)
    ended = {int(ev.round) for ev in events if ev.kind == "round_end" and ev.round is not None}
    downs = [ev for ev in events if ev.kind == "node_down" and ev.round is not None]
    return ended, downs


#: Above this many client nodes, clients that were not sampled in a round are counted
#: per group instead of getting a row each (:func:`finalize_statuses`).
ROWS_PER_CLIENT_MAX = 10_000


def _finalize_grouped(store: RunStore, run_id: str, plan: Plan, rounds: int) -> None:
    """:func:`finalize_statuses` of a large fleet: rows renamed, ``excluded`` rows for
    clients observed down, ``not_sampled`` counts per round and group."""
    names = plan.client_names()
    clients = plan.clients
    find = getattr(names, "find", None)
    pid_of: Callable[[str], int | None] = (
        find if find is not None else {n: i for i, n in enumerate(names)}.get
    )
    ended, downs = _observed(store, run_id, names)
    rows: dict[int, set[str]] = {}
    for st in store.round_status(run_id):
        rows.setdefault(st.round, set()).add(st.node)
    totals = {f"{t}/{p}": k for (t, p), k in plan.client_counts().items()}
    label: dict[str, str] = {}

    def group(name: str) -> str | None:
        if name not in label:
            pid = pid_of(name)
            if pid is None:
                return None
            node = clients[pid]
            label[name] = f"{node.tier}/{node.profile_name}"
        return label[name]

    for r in sorted(x for x in ended if 1 <= x <= rounds):
        have = rows.setdefault(r, set())
        for n, reason in sorted(_down_before(downs, r).items()):
            if n not in have and pid_of(n) is not None:
                store.set_status(run_id, r, n, "excluded", f"not sampled: {reason}")
                have.add(n)
        seen = Counter(g for g in map(group, have) if g is not None)
        for g, total in sorted(totals.items()):
            store.add_metric(run_id, "not_sampled", total - seen.get(g, 0), round=r, node=g)
    store.add_event(
        run_id,
        "statuses_grouped",
        clients=plan.num_clients,
        limit=ROWS_PER_CLIENT_MAX,
        why=f"over {ROWS_PER_CLIENT_MAX} clients: clients not sampled in a round are "
        "counted per tier/profile (metric not_sampled), not given a row each",
    )


def _down_before(downs: list[Any], r: int) -> dict[str, str]:
    """Node -> the reason of its last ``node_down`` event up to round ``r``."""
    why: dict[str, str] = {}
    for ev in downs:  # (in order: the last reason wins)
        if ev.node is not None and ev.round is not None and ev.round <= r:
            why[ev.node] = str(ev.data_dict.get("reason", "down"))
    return why


def _rename_rows(
    store: RunStore, run_id: str, names: Container[str], ids: dict[Any, str]
) -> None:
    """Move rows recorded under ``node-<flower id>`` to the node's name (a status row
    already under the name for that round wins; metrics move as they are); rows of
    unidentified ids stay as they are."""
    by_id = store.metric_nodes(run_id, "node-")  # (one look, not a scan per node id)
    for fid, node in ids.items():  # metrics of the id too (bytes_lost of a silent node)
        if node in names and fid is not None and f"node-{fid}" in by_id:
            store.rename_metric_node(run_id, f"node-{fid}", node)
    rows = store.round_status(run_id, with_ts=True)
    seen = {(row.round, row.node) for row in rows if row.node in names}
    for row in rows:
        name = None if row.node in names else ids.get(row.node.removeprefix("node-"))
        if name is None:
            continue
        store.delete_status(run_id, row.round, row.node)
        if (row.round, name) not in seen:
            reason = row.reason if row.reason is not None else ""
            store.set_status(run_id, row.round, name, row.status, reason, ts=row.ts)
            seen.add((row.round, name))


def fault_targets(plan: Plan, f: FaultSpec) -> list[str]:
    """Client nodes of ``plan`` fault ``f`` names (a node, the replicas of a node id, a
    tier)."""
    clients = plan.clients
    if f.node is not None:
        return [n.name for n in clients if n.name == f.node or n.name.rsplit("-", 1)[0] == f.node]
    return [n.name for n in clients if n.tier == f.tier]
