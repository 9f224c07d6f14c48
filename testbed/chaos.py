"""Chaos engine: applies scheduled and live faults to a running fleet, and records
every fault and its observed effect as events (nothing is lost: the store has it all).

Effects observed: ``node_down`` / ``node_restarted`` / ``node_rejoined`` (with
``time_to_rejoin_s`` and ``rounds_missed``), per-(round, node) statuses, and the bytes
sent to a node that never answered (``bytes_lost`` metric, from the ServerApp).
"""

from __future__ import annotations

import heapq
import itertools
import json
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from nodes.emulation import NodeControl
from testbed.planner import Plan
from testbed.spec.models import FaultSpec
from testbed.store import RunStore


class FaultTarget(Protocol):
    """What a backend offers the chaos engine."""

    def kill_node(self, name: str) -> None: ...
    def restart_node(self, name: str) -> None: ...
    def set_control(self, name: str, control: NodeControl) -> None: ...
    def partition(self, name: str, on: bool) -> None: ...
    def set_link(self, name: str, **changes: float) -> dict[str, object]: ...
    def restart_superlink(self) -> None: ...


class ChaosEngine:
    """Fire faults on round/time/probability triggers and from live injections.

    Parameters
    ----------
    plan : Plan
        The run (targets are resolved against its client nodes).
    backend : FaultTarget
        The running backend.
    store, run_id
        Where events go.
    seed : int
        Seeds the probability triggers.
    """

    def __init__(
        self, plan: Plan, backend: FaultTarget, store: RunStore, run_id: str, seed: int
    ) -> None:
        self.plan, self.backend, self.store, self.run_id = plan, backend, store, run_id
        self.rng = np.random.default_rng([seed, 7])
        self.faults = list(plan.faults)
        self.timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.t0 = time.time()
        self.round = 0
        self.down: dict[str, dict[str, Any]] = {}
        self.back: dict[str, dict[str, Any]] = {}

    # -- targets and triggers ------------------------------------------------------
    def targets(self, f: FaultSpec) -> list[str]:
        clients = self.plan.clients
        if f.node is not None:
            return [
                n.name for n in clients if n.name == f.node or n.name.rsplit("-", 1)[0] == f.node
            ]
        return [n.name for n in clients if n.tier == f.tier]

    def start(self) -> None:
        """Fleet is ready: arm time triggers and round-1 faults."""
        self.t0 = time.time()
        for f in self.faults:
            if f.at_time_s is not None:
                self.later(f.at_time_s, lambda f=f: self.fire(f, "schedule"))
            elif f.at_round == 1 and f.phase == "before":
                self.fire(f, "schedule")

    def later(self, delay_s: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self.timers, (time.time() + delay_s, next(self._seq), fn))

    def tick(self) -> None:
        """Run due timers and pending live injections (call often)."""
        now = time.time()
        while self.timers and self.timers[0][0] <= now:
            _, _, fn = heapq.heappop(self.timers)
            fn()
        for inj_id, spec in self.store.pending_injections(self.run_id):
            try:
                self.fire(FaultSpec.model_validate(spec), "live")
                self.store.mark_injection(inj_id, "applied")
            except Exception as exc:  # a bad live request must not stop the run
                self.store.mark_injection(inj_id, f"rejected: {exc}")

    def on_record(self, rec: dict[str, Any]) -> None:
        """React to ServerApp telemetry (round boundaries, node statuses)."""
        kind, name = rec.get("kind"), rec.get("name")
        if kind == "event" and name == "round_start":
            self.round = int(rec["round"])
            for f in self.faults:
                if f.at_round == self.round and f.phase == "during":
                    self.later(f.delay_s, lambda f=f: self.fire(f, "schedule"))
        elif kind == "event" and name == "round_end":
            r = int(rec["round"])
            for f in self.faults:
                if f.at_round == r + 1 and f.phase == "before":
                    self.fire(f, "schedule")
                elif f.probability is not None:
                    for node in self.targets(f):
                        if node not in self.down and self.rng.random() < f.probability:
                            self.fire(
                                f.model_copy(update={"node": node, "tier": None}), "probability"
                            )
        elif kind == "status" and rec.get("status") == "completed":
            node = rec["node"]
            if node in self.back:
                info = self.back.pop(node)
                self.event(
                    "node_rejoined",
                    node,
                    round=rec["round"],
                    time_to_rejoin_s=time.time() - info["restarted_at"],
                    rounds_missed=int(rec["round"]) - info["round_down"] - 1,
                    fault=info["fault"],
                )

    # -- actions --------------------------------------------------------------------
    def event(self, name: str, node: str | None, round: int | None = None, **data: Any) -> None:
        self.store.add_event(
            self.run_id, name, round=round if round is not None else self.round, node=node, **data
        )

    def fire(self, f: FaultSpec, source: str) -> None:
        """Apply fault ``f`` now to each of its targets."""
        spec = json.loads(f.model_dump_json(exclude_none=True))
        if f.kind == "superlink-restart":
            self.event("fault_injected", None, kind=f.kind, source=source, spec=spec)
            try:
                self.backend.restart_superlink()
            except NotImplementedError as exc:
                self.event("fault_rejected", None, kind=f.kind, reason=str(exc))
            return
        for node in self.targets(f):
            self.event("fault_injected", node, kind=f.kind, source=source, spec=spec)
            try:
                getattr(self, "_" + f.kind.replace("-", "_"))(node, f)
            except NotImplementedError as exc:
                self.event("fault_rejected", node, kind=f.kind, reason=str(exc))

    def _crash(self, node: str, f: FaultSpec) -> None:
        self.backend.kill_node(node)
        self.down[node] = {"since": time.time(), "round_down": self.round, "fault": f.kind}
        self.event("node_down", node, reason="crash (never returns)")

    def _outage(self, node: str, f: FaultSpec, cycles_left: int = 1) -> None:
        self.backend.kill_node(node)
        self.down[node] = {"since": time.time(), "round_down": self.round, "fault": f.kind}
        self.event("node_down", node, reason=f"{f.kind} for {f.duration_s} s")

        def up() -> None:
            self.backend.restart_node(node)
            info = self.down.pop(node)
            info["restarted_at"] = time.time()
            self.back[node] = info
            self.event("node_restarted", node, down_s=time.time() - info["since"])
            if cycles_left > 1:
                self.later(f.duration_s or 0, lambda: self._outage(node, f, cycles_left - 1))

        self.later(f.duration_s or 0, up)

    def _flapping(self, node: str, f: FaultSpec) -> None:
        self._outage(node, f, f.repeat)

    def _partition(self, node: str, f: FaultSpec) -> None:
        self.backend.partition(node, True)
        self.event("link_partitioned", node, duration_s=f.duration_s)

        def heal() -> None:
            self.backend.partition(node, False)
            self.event("link_healed", node)

        self.later(f.duration_s or 0, heal)

    def _degrade(self, node: str, f: FaultSpec) -> None:
        changes = f.link_changes()
        old = self.backend.set_link(node, **changes)
        self.event("link_degraded", node, duration_s=f.duration_s, **changes)
        if f.duration_s is not None:

            def restore() -> None:
                self.backend.set_link(node, **old)
                self.event("link_restored", node, **old)

            self.later(f.duration_s, restore)

    def _until(self, f: FaultSpec) -> int | None:
        start = max(self.round, 1) if f.phase == "during" else self.round + 1
        return None if f.rounds is None else start + f.rounds - 1

    def _straggler(self, node: str, f: FaultSpec) -> None:
        until = self._until(f)
        self.backend.set_control(node, NodeControl(slowdown=f.factor or 1.0, until_round=until))
        self.event("straggler_set", node, factor=f.factor, until_round=until)

    def _misconfig(self, node: str, f: FaultSpec) -> None:
        until = self._until(f)
        self.backend.set_control(
            node, NodeControl(misconfig=f.mode, factor=f.factor or 1.0, until_round=until)
        )
        self.event("misconfig_set", node, mode=f.mode, factor=f.factor, until_round=until)


def finalize_statuses(store: RunStore, run_id: str, plan: Plan, rounds: int) -> None:
    """Give every (round, client node) exactly one status after the run.

    Rows recorded under Flower's numeric id (``node-<id>``) are renamed with the
    ``node_identified`` events of the run; a row still unknown is attributed by
    elimination when exactly one client lacks a status that round. A (round, node) with
    no status at all is ``excluded`` (not sampled: down or not connected), with the
    reason taken from the chaos events.
    """
    names = plan.client_names()
    events = store.events(run_id)
    ids = {
        json.loads(d).get("node_id"): node
        for _i, _t, k, _r, node, d in events
        if k == "node_identified"
    }
    downs = [(rd, node, json.loads(d)) for _i, _t, k, rd, node, d in events if k == "node_down"]
    have: dict[int, dict[str, tuple[str, str, float]]] = {}
    for r, node, status, reason, ts in store.round_status(run_id, with_ts=True):
        if node not in names:
            store.delete_status(run_id, r, node)
            node = ids.get(node.removeprefix("node-"), node)
        have.setdefault(r, {}).setdefault(node, (status, reason, ts))
    for r in range(1, rounds + 1):
        got = have.get(r, {})
        missing = [n for n in names if n not in got]
        unknown = [n for n in got if n not in names]
        if len(unknown) == 1 and len(missing) == 1:
            got[missing[0]] = got.pop(unknown[0])
            missing = []
        for n, (status, reason, ts) in got.items():  # keep when it was observed
            store.set_status(run_id, r, n, status, reason, ts=ts)
        for n in missing:
            why = [d.get("reason", "down") for rd, node, d in downs if node == n and rd < r]
            store.set_status(
                run_id,
                r,
                n,
                "excluded",
                f"not sampled: {why[-1]}" if why else "not sampled this round",
            )
