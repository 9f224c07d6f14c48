"""Federated learning (``workload.fl``): Flower's Deployment Engine on the backend's fleet.

The backend starts one SuperLink and one SuperNode per client node (behind its link);
the run is submitted with ``flwr run``; the ServerApp's telemetry (JSONL) streams into
the store as it is written, the chaos engine applies the fault schedule, and when the
run ends the links' counters, peak memory, round statuses and round clocks are recorded.
Its sweep report is the failure study (:mod:`testbed.failure_study`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernel.dilation import emulated, wall
from nodes.fl.config import FLSpec
from testbed.backends.base import Backend
from testbed.chaos import ChaosEngine, finalize_statuses
from testbed.planner import Plan
from testbed.store import RunStore
from testbed.workloads import register_workload
from testbed.workloads.base import RunContext, record_link_counters, record_links


class TelemetryTail:
    """Follow a JSONL file, returning whole new lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        return [json.loads(line) for line in data[:end].splitlines() if line.strip()]


#: Seconds without a round starting or ending, beyond twice the round deadline, after
#: which a run is declared stuck (set-up and the first round included).
IDLE_GRACE_S = 300.0
#: Seconds after a SuperLink restart during which a dropped log stream is opened again.
REATTACH_WINDOW_S = 60.0


class FlRun:
    """One FL run on a started backend: pumps telemetry, drives chaos, records the end.

    Parameters
    ----------
    ctx : RunContext
        The run.
    backend : Backend
        The fleet (not started yet).
    """

    def __init__(self, ctx: RunContext, backend: Backend) -> None:
        spec = ctx.experiment.workload.fl
        assert spec is not None
        self.ctx, self.spec, self.backend = ctx, spec, backend
        self.tail = TelemetryTail(ctx.run_dir / "telemetry.jsonl")
        if ctx.resume and self.tail.path.exists():  # the earlier attempts' lines are in
            self.tail.offset = self.tail.path.stat().st_size
        self.peak: dict[str, float] = {}
        self.ended = False
        self.progress_t = time.monotonic()  # when a round last started or ended
        self._restarts_seen, self._restart_t = 0, 0.0  # SuperLink restarts, the last one's time
        self.chaos: ChaosEngine | None = None
        self.gone: set[str] = set()  # nodes whose end the engine reported
        self.links: dict[str, Any] = {}  # the links in force (for the summary)
        # a user's app holds a round with faults planned before it until they are applied
        self.hold_path = ctx.run_dir / "round_released" if spec.app else None

    def pump(self) -> None:
        """Ingest new telemetry, let chaos react, sample memory."""
        recs = self.tail.read()
        if recs:
            self.ctx.store.ingest(self.ctx.run_id, recs)
        for r in recs:
            self.ended |= r.get("kind") == "event" and r.get("name") == "run_end"
            if r.get("kind") == "event" and r.get("name") in ("round_start", "round_end"):
                self.progress_t = time.monotonic()
            if self.chaos:
                self.chaos.on_record(r)
            if self.ctx.observer:
                self.ctx.observer.record(r)
            if self.hold_path and r.get("kind") == "event" and r.get("name") == "round_end":
                self.hold_path.write_text(str(int(r["round"]) + 1))  # its faults: applied
        if self.chaos:
            self.chaos.tick()
            self.engine_exits()
        for name, mb in self.backend.rss_mb().items():
            self.peak[name] = max(self.peak.get(name, 0.0), mb)

    def engine_exits(self) -> None:
        """A node container that died on its own (docker: an OOM kill) is a node down
        with the engine's reason, once (backends without one report none)."""
        assert self.chaos is not None
        for name, why in self.backend.exit_reasons().items():
            if name not in self.gone:
                self.gone.add(name)
                self.chaos.node_down(name, why, "engine")

    def start(self) -> None:
        """Start the fleet, the chaos engine, the link schedules and the space clock."""
        ctx, store, plan = self.ctx, self.ctx.store, self.ctx.plan
        store.add_event(ctx.run_id, "fleet_starting", **fleet_names(plan))
        self.backend.start()
        info = self.backend.fleet_info()  # the links in force (docker: netem may fall back)
        store.add_event(
            ctx.run_id, "fleet_ready", superlink_port=self.backend.superlink_port, **info
        )
        self.links = record_links(ctx, info)
        for name, lim in self.backend.node_limits().items():
            store.add_event(ctx.run_id, "node_limits", node=name, **lim)
        if self.backend.decides_faults:  # simulation: on virtual time
            plan = dataclasses.replace(plan, faults=())
            self.chaos = ChaosEngine(plan, self.backend, store, ctx.run_id, plan.seed)
        else:
            self.chaos = ctx.chaos_engine(self.backend)
        self.chaos.start()
        self.backend.start_schedules()
        space = self.backend.space_model()
        if space is not None:  # orbital record: windows, compression, assignment
            rec = space.record()
            (ctx.run_dir / "space.json").write_text(json.dumps(rec, indent=1, default=str))
            store.add_event(
                ctx.run_id,
                "space_clock",
                start_utc=rec.get("start_utc"),
                time_compression=space.compression,
            )

    def submit(self) -> Any:
        """Submit the Flower app; return the process that ends with the run."""
        run_dir = self.ctx.run_dir
        if self.spec.app is not None:
            return self._submit_user_app()
        return self.backend.submit(
            {
                "fl-spec": self.spec.model_dump_json(),
                "seed": self.ctx.seed,
                "node-names": self.ctx.plan.client_names_json(),
                "telemetry-path": str((run_dir / "telemetry.jsonl").resolve()),
                "artifact-dir": str(run_dir.resolve()),
                "resume": int(self.ctx.resume),
            }
        )

    def _submit_user_app(self) -> Any:
        """Submit the user's Flower App, copied with its components observed
        (:func:`nodes.fl.userapp.observed_fab`) and its ``app_config`` as run config."""
        from nodes.fl.userapp import TESTBED_PREFIX, observed_fab

        run_dir, plan = self.ctx.run_dir, self.ctx.plan
        before = [f.at_round for f in plan.faults if f.phase == "before" and f.at_round]
        holds = sorted({r for r in before if r > 1})  # (round 1's: fired before the run)
        if self.backend.decides_faults:  # (on its own clock: nothing to wait for)
            holds = []
        keys: dict[str, bool | int | float | str] = {
            "telemetry-path": str((run_dir / "telemetry.jsonl").resolve()),
            "node-names": plan.client_names_json(),
            "hold-rounds": json.dumps(holds),
            "hold-path": str(self.hold_path.resolve()) if self.hold_path else "",
            "round-timeout-s": wall(float(self.spec.round_timeout_s)),  # (dilated)
            "protocol-timing": self.spec.protocol_timing,
            "artifact-dir": str(run_dir.resolve()),
            "node-config": json.dumps(self.spec.node_config),
        }
        keys = {f"{TESTBED_PREFIX}{k}": v for k, v in keys.items()}
        assert self.spec.app is not None
        fab = observed_fab(self.spec.app, run_dir, keys)
        self.ctx.store.add_event(self.ctx.run_id, "user_app", app=str(self.spec.app), fab=str(fab))
        return self.backend.submit({**self.spec.app_config, **keys}, fab)

    def rounds(self) -> int:
        """Rounds of the run: planned (the testbed's app), or observed (a user's app:
        the last round that ended)."""
        if self.spec.app is None:
            return self.spec.rounds
        ends = [e.round for e in self.ctx.store.events(self.ctx.run_id) if e.kind == "round_end"]
        return max((int(r) for r in ends if r is not None), default=0)

    def follow(self, proc: Any) -> None:
        """Pump until the run ends (re-attaching after SuperLink restarts) or times out."""
        # A run that makes progress is never cut: the limit is on the time since a round
        # last started or ended (a SuperLink restart can hold one round for minutes while
        # Flower's clients back off), not on the whole run.
        idle_s = 2 * wall(self.spec.round_timeout_s) + IDLE_GRACE_S
        self.progress_t = time.monotonic()
        while time.monotonic() - self.progress_t < idle_s and not self.ended:
            self.pump()
            if proc.poll() is not None:
                time.sleep(0.5)
                self.pump()
                proc = self._reattach()
                if proc is None:
                    break
            time.sleep(0.25)
        if proc is None:
            return
        if not self.ended and proc.poll() is None:
            raise TimeoutError(
                f"the Flower run made no progress (no round started or ended) for {idle_s:.0f} s"
                " (see logs/flwr-run.log)"
            )

    def _reattach(self) -> Any | None:
        """A new log stream of the Flower run, or None if the run is over.

        The stream drops when the SuperLink restarts (fault ``superlink-restart``) and a
        stream opened while it is still down (two restarts in a row) fails at once: the
        run itself goes on, so it is streamed again for up to ``REATTACH_WINDOW_S`` after
        the last restart seen.
        """
        now = self.backend.superlink_restarts
        if now != self._restarts_seen:
            self._restarts_seen, self._restart_t = now, time.monotonic()
        recent = time.monotonic() - self._restart_t < REATTACH_WINDOW_S
        run_id = self.backend.flwr_run_id()
        if self.ended or not (now and recent) or run_id is None:
            return None
        time.sleep(1.0)  # (the SuperLink may still be starting)
        self.ctx.store.add_event(self.ctx.run_id, "stream_reattached", after_restarts=now)
        return self.backend.attach(run_id)

    def finish(self) -> None:
        """Stop the fleet and record what it observed: ids, links, memory, rounds."""
        store, run_id = self.ctx.store, self.ctx.run_id
        self.pump()
        links, read_at = self.backend.link_counters(), time.time()
        for nid, name in self.backend.node_ids().items():
            store.add_event(run_id, "node_identified", node=name, node_id=nid)
        self.backend.stop()
        record_link_counters(store, run_id, links, read_at)
        for name, mb in self.peak.items():
            store.add_metric(run_id, "peak_rss_mb", mb, node=name)
        for name, pct in self.backend.mean_cpu_pct().items():
            store.add_metric(run_id, "mean_cpu_pct", pct, node=name)  # engine stats (docker)
        finalize_statuses(store, run_id, self.ctx.plan, self.rounds())
        round_clock(store, run_id, self.backend.space_model())


def round_clock(store: RunStore, run_id: str, space: Any) -> None:
    """Per round: participation (completed nodes), wall time since the fleet was ready
    and, for a space tier, orbital time (wall x time compression)."""
    events = store.events(run_id)
    ready = next((e.ts for e in events if e.kind == "fleet_ready"), None)
    done: dict[int, int] = {}
    for st in store.round_status(run_id):
        done[st.round] = done.get(st.round, 0) + (st.status == "completed")
    for r, n in done.items():
        store.add_metric(run_id, "participation", n, round=r)
    if ready is None:
        return
    for e in events:
        if e.kind == "round_end" and e.round is not None:
            store.add_metric(run_id, "wall_time_s", e.ts - ready, round=e.round)  # (/ TDF)
            if space is not None:  # the orbital clock runs on emulated time
                orbital = emulated(e.ts - ready) * space.compression
                store.add_metric(run_id, "orbital_time_s", orbital, round=e.round)


def fl_summary(store: RunStore, run_id: str, rounds: int, ended: bool) -> dict[str, Any]:
    """The run summary, read from the store's tables (metrics and round statuses)."""

    def per_round(name: str) -> dict[int, float | None]:
        return {int(m.round): m.value for m in store.metrics(run_id, name) if m.round is not None}

    acc = per_round("global_acc")
    nodes: dict[str, dict[int, str]] = {}
    for st in store.round_status(run_id):
        nodes.setdefault(st.node, {})[st.round] = st.status
    return {
        "status": "completed" if ended else "failed",
        "rounds": rounds,
        "global_acc": acc,
        "federated_acc": per_round("federated_acc"),
        "round_duration_s": per_round("round_duration_s"),
        "final_global_acc": acc.get(rounds),
        "node_status": nodes,
        "peak_rss_mb": {str(m.node): m.value for m in store.metrics(run_id, "peak_rss_mb")},
        **virtual_clock(store, run_id),
    }


def virtual_clock(store: RunStore, run_id: str) -> dict[str, Any]:
    """A simulation's virtual clock (docs/simulation.md): ``virtual_round_s`` per round
    and ``virtual_time_s`` (the virtual time at the last round's end), modelled; empty
    for a run on a wall clock (no such metrics)."""
    rounds = {
        int(m.round): m.value
        for m in store.metrics(run_id, "virtual_round_s")
        if m.round is not None
    }
    if not rounds:
        return {}
    ends = [m.value for m in store.metrics(run_id, "virtual_time_s") if m.value is not None]
    return {"virtual_round_s": rounds, "virtual_time_s": max(ends) if ends else None}


def user_app_verdict(store: RunStore, run_id: str, summary: dict[str, Any]) -> None:
    """A user's app: the run failed when the ServerApp failed (no ``run_end``) or no
    message was ever answered (every status ``failed``); the reason is the app's
    error or the first node's, as recorded."""
    rows = store.round_status(run_id)
    errors = [e.data_dict.get("error") for e in store.events(run_id) if e.kind == "app_error"]
    if summary["status"] == "failed":
        summary["reason"] = str(errors[0]) if errors else "the Flower run ended without run_end"
        return
    if rows and not any(r.status in ("completed", "late") for r in rows):
        first = min(rows, key=lambda r: (r.round, r.node))
        summary["status"] = "failed"
        summary["reason"] = (
            f"no node completed a round of the app; first: {first.node} in round "
            f"{first.round}: {first.reason}"
        )


#: A fleet of more clients than this gets ``node_groups`` (tier/profile by node) in its
#: summary: the terminal shows it by group, then only the nodes with a failure.
NODE_GROUPS_OVER = 24


def fleet_names(plan: Plan) -> dict[str, Any]:
    """The ``fleet_starting`` event's fields: ``nodes`` (every name) for a fleet of up
    to :data:`nodes.fl.identity.LISTED_NAMES` nodes, else ``node_groups`` (``[id,
    count]`` of each fleet entry) and ``node_count``."""
    from nodes.fl.identity import LISTED_NAMES

    groups = plan.groups
    if groups is None or len(plan.nodes) <= LISTED_NAMES:
        return {"nodes": [n.name for n in plan.nodes]}
    return {"node_groups": [[g.spec.id, g.count] for g in groups], "node_count": len(plan.nodes)}


def node_groups(
    store: RunStore, run_id: str, plan: Plan, statuses: Mapping[str, Any]
) -> dict[str, Any]:
    """Summary keys of a large fleet: ``node_groups`` (tier/profile of each node with a
    status row), ``group_nodes`` (client nodes per tier/profile, the whole fleet) and,
    where the store counted clients not sampled per group (:func:`finalize_statuses`),
    ``not_sampled`` ((round, node) pairs per tier/profile)."""
    names, clients = plan.client_names(), plan.clients
    find = getattr(names, "find", None)
    pid_of = find if find is not None else {n: i for i, n in enumerate(names)}.get
    groups: dict[str, str] = {}
    for name in statuses:
        pid = pid_of(name)
        if pid is not None:
            n = clients[pid]
            groups[name] = f"{n.tier}/{n.profile_name}"
    out: dict[str, Any] = {
        "node_groups": groups,
        "group_nodes": {f"{t}/{p}": k for (t, p), k in plan.client_counts().items()},
    }
    counted: dict[str, int] = {}
    for m in store.metrics(run_id, "not_sampled"):
        if m.node is not None and m.value is not None:
            counted[str(m.node)] = counted.get(str(m.node), 0) + int(m.value)
    if counted:
        out["not_sampled"] = counted
    return out


@register_workload("fl")
class FederatedLearning:
    """``workload.fl``: Flower SuperLink + SuperNodes on the backend; failure-study report."""

    section = "fl"
    spec_model = FLSpec
    page = None  # the Live run, Chaos and Results pages are FL's
    key_metrics = ("global_acc", "round_duration_s")  # (the Timeline page draws these)

    def run(self, ctx: RunContext) -> dict[str, Any]:
        backend = ctx.make_backend()
        run = FlRun(ctx, backend)
        if ctx.observer:
            ctx.observer.started(ctx.run_id, ctx.plan)
        try:
            run.start()
            run.follow(run.submit())
        finally:
            run.finish()
        summary = {**fl_summary(ctx.store, ctx.run_id, run.rounds(), run.ended), **run.links}
        if ctx.plan.num_clients > NODE_GROUPS_OVER:  # (the summary groups a large fleet)
            summary.update(node_groups(ctx.store, ctx.run_id, ctx.plan, summary["node_status"]))
        if run.spec.app is not None:
            user_app_verdict(ctx.store, ctx.run_id, summary)
        return summary

    def write_report(self, store: RunStore, sweep_id: str, out: Path) -> tuple[Path, Path]:
        from testbed.failure_study import write_failure_study

        return write_failure_study(store, sweep_id, out)

    def rounds(self, section: Mapping[str, Any]) -> int | None:
        rounds = section.get("rounds")
        return int(rounds) if rounds is not None else None
