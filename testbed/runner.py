"""Run one experiment (or a sweep) on a backend, recording everything to the store."""

from __future__ import annotations

import json
import platform
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from testbed.backends import get_backend
from testbed.chaos import ChaosEngine, finalize_statuses
from testbed.planner import Plan, make_plan
from testbed.spec.models import Experiment
from testbed.store import RunStore

PACKAGES = ("flwr", "torch", "numpy", "scikit-learn", "pydantic", "sionna-no-rt", "tensorly")


class Observer(Protocol):
    """Receives progress of a run (the CLI draws it; tests may record it)."""

    def started(self, run_id: str, plan: Plan) -> None: ...
    def record(self, rec: dict[str, Any]) -> None: ...
    def finished(self, result: RunResult) -> None: ...


@dataclass
class RunResult:
    """Outcome of one run."""

    run_id: str
    status: str
    artifact_dir: Path
    wall_s: float
    summary: dict[str, Any] = field(default_factory=dict)


def new_run_id(name: str) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")[:32]
    return f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            timeout=5,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def snapshot(exp: Experiment, seed: int, run_dir: Path, extra: dict[str, Any]) -> None:
    """Write the resolved spec and metadata (seed, versions, git revision, host)."""
    from importlib.metadata import PackageNotFoundError, version

    (run_dir / "spec.resolved.yaml").write_text(
        yaml.safe_dump(exp.model_dump(mode="json"), sort_keys=False)
    )
    versions = {}
    for p in PACKAGES:
        try:
            versions[p] = version(p)
        except PackageNotFoundError:
            pass
    meta = {
        "seed": seed,
        "versions": versions,
        "python": sys.version.split()[0],
        "git_revision": git_revision(),
        "host": platform.node(),
        "platform": platform.platform(),
        **extra,
    }
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2, default=str))


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


def run_experiment(
    exp: Experiment,
    store: RunStore,
    *,
    seed: int | None = None,
    backend: str = "local",
    spec_path: str | None = None,
    sweep_id: str | None = None,
    observer: Observer | None = None,
    backend_options: dict[str, Any] | None = None,
    assignment: dict[str, Any] | None = None,
    variant: str | None = None,
) -> RunResult:
    """Run ``exp`` and record it; Ctrl-C stops it, marks it ``interrupted`` and re-raises."""
    import os

    seed = exp.seed if seed is None else seed
    run_id = new_run_id(exp.name)
    run_dir = store.create_run(
        run_id,
        exp.name,
        seed=seed,
        backend=backend,
        spec_path=spec_path,
        sweep_id=sweep_id,
        variant=variant,
        pid=os.getpid(),
    )
    snapshot(
        exp,
        seed,
        run_dir,
        {"run_id": run_id, "backend": backend, "sweep_assignment": assignment or {}},
    )
    t0 = time.time()
    status, summary = "failed", {}
    plan = make_plan(exp, seed)
    try:
        if exp.workload.fl is not None:
            summary = _run_fl(
                plan, run_id, run_dir, store, backend, observer, backend_options or {}
            )
        else:
            summary = _run_library(exp, seed, run_id, run_dir, store, observer)
        status = summary.pop("status", "completed")
    except KeyboardInterrupt:
        status, summary = "interrupted", {"reason": "interrupted by user (Ctrl-C)"}
        raise
    except Exception as exc:
        summary = {"reason": f"{type(exc).__name__}: {exc}"}
        store.add_event(run_id, "error", message=summary["reason"])
        raise
    finally:
        summary["wall_s"] = time.time() - t0
        store.finish_run(run_id, status, summary)
        store.add_event(run_id, "run_finished", status=status)
        result = RunResult(run_id, status, run_dir, summary["wall_s"], summary)
        if observer:
            observer.finished(result)
    return result


def _run_fl(
    plan: Plan,
    run_id: str,
    run_dir: Path,
    store: RunStore,
    backend_name: str,
    observer: Observer | None,
    backend_options: dict[str, Any],
) -> dict[str, Any]:
    spec = plan.experiment.workload.fl
    assert spec is not None
    backend = get_backend(backend_name)(plan, run_dir, **backend_options)
    tail = TelemetryTail(run_dir / "telemetry.jsonl")
    peak: dict[str, float] = {}
    ended = False
    chaos: ChaosEngine | None = None
    gone: set[str] = set()

    def pump() -> None:
        nonlocal ended
        recs = tail.read()
        if recs:
            store.ingest(run_id, recs)
            for r in recs:
                ended |= r.get("kind") == "event" and r.get("name") == "run_end"
                if chaos:
                    chaos.on_record(r)
                if observer:
                    observer.record(r)
        if chaos:
            chaos.tick()
            _engine_exits(backend, chaos, gone)
        for name, mb in backend.rss_mb().items():
            peak[name] = max(peak.get(name, 0.0), mb)

    if observer:
        observer.started(run_id, plan)
    try:
        store.add_event(run_id, "fleet_starting", nodes=[n.name for n in plan.nodes])
        backend.start()
        store.add_event(run_id, "fleet_ready", superlink_port=backend.superlink_port)
        for name, lim in backend.node_limits().items():
            store.add_event(run_id, "node_limits", node=name, **lim)
        chaos = ChaosEngine(plan, backend, store, run_id, plan.seed)
        chaos.start()
        backend.start_schedules()
        space = backend.space_model()
        if space is not None:  # orbital record: windows, compression, assignment
            rec = space.record()
            (run_dir / "space.json").write_text(json.dumps(rec, indent=1, default=str))
            store.add_event(
                run_id,
                "space_clock",
                start_utc=rec.get("start_utc"),
                time_compression=space.compression,
            )
        proc = backend.submit(
            {
                "fl-spec": spec.model_dump_json(),
                "seed": plan.seed,
                "node-names": json.dumps(plan.client_names()),
                "telemetry-path": str((run_dir / "telemetry.jsonl").resolve()),
                "artifact-dir": str(run_dir.resolve()),
            }
        )
        deadline = time.time() + spec.round_timeout_s * (spec.rounds + 2) + 120
        restarts = 0
        while time.time() < deadline and not ended:
            pump()
            if proc.poll() is not None:
                time.sleep(0.5)
                pump()
                # The log stream drops when the SuperLink restarts (fault
                # superlink-restart); the run itself goes on: stream it again.
                now = backend.superlink_restarts
                if ended or now == restarts or backend.flwr_run_id() is None:
                    break
                restarts = now
                proc = backend.attach(backend.flwr_run_id())
                store.add_event(run_id, "stream_reattached", after_restarts=now)
            time.sleep(0.25)
        if not ended and proc.poll() is None:
            raise TimeoutError("the Flower run did not finish in time (see logs/flwr-run.log)")
    finally:
        pump()
        links = backend.link_counters()
        for nid, name in backend.node_ids().items():
            store.add_event(run_id, "node_identified", node=name, node_id=nid)
        backend.stop()
        for name, c in links.items():  # bytes that crossed each emulated link
            for key in ("bytes_up", "bytes_down", "partitioned_s", "stalled_s"):
                store.add_metric(run_id, f"link_{key}", float(c.get(key) or 0), node=name)
            for ch in c.get("changes", []):
                store.add_event(run_id, "link_changed", node=name, **ch)
        for name, mb in peak.items():
            store.add_metric(run_id, "peak_rss_mb", mb, node=name)
        _engine_cpu(store, run_id, backend)
        finalize_statuses(store, run_id, plan, spec.rounds)
        _round_clock(store, run_id, backend.space_model())
    return _fl_summary(store, run_id, plan, ended)


def _engine_exits(backend: Any, chaos: ChaosEngine, gone: set[str]) -> None:
    """A node container that died on its own (docker: an OOM kill) is a node down with
    the engine's reason, once (backends without ``exit_reasons`` have none)."""
    for name, why in getattr(backend, "exit_reasons", dict)().items():
        if name not in gone:
            gone.add(name)
            chaos.node_down(name, why, "engine")


def _engine_cpu(store: RunStore, run_id: str, backend: Any) -> None:
    """Mean CPU per node from the engine's stats (docker), as ``mean_cpu_pct``."""
    for name, pct in getattr(backend, "mean_cpu_pct", dict)().items():
        store.add_metric(run_id, "mean_cpu_pct", pct, node=name)


def _round_clock(store: RunStore, run_id: str, space) -> None:
    """Per round: participation (completed nodes), wall time since the fleet was ready
    and, for a space tier, orbital time (wall x time compression)."""
    events = store.events(run_id)
    ready = next((ts for _i, ts, k, *_ in events if k == "fleet_ready"), None)
    done: dict[int, int] = {}
    for r, _n, status, _why in store.round_status(run_id):
        done[r] = done.get(r, 0) + (status == "completed")
    for r, n in done.items():
        store.add_metric(run_id, "participation", n, round=r)
    for _i, ts, kind, r, _n, _d in events:
        if kind == "round_end" and ready is not None and r is not None:
            store.add_metric(run_id, "wall_time_s", ts - ready, round=r)
            if space is not None:
                store.add_metric(
                    run_id, "orbital_time_s", (ts - ready) * space.compression, round=r
                )


def _fl_summary(store: RunStore, run_id: str, plan: Plan, ended: bool) -> dict[str, Any]:
    acc = {r: v for r, _n, _k, v, _t in store.metrics(run_id, "global_acc")}
    fed = {r: v for r, _n, _k, v, _t in store.metrics(run_id, "federated_acc")}
    dur = {r: v for r, _n, _k, v, _t in store.metrics(run_id, "round_duration_s")}
    peak = {n: v for _r, n, _k, v, _t in store.metrics(run_id, "peak_rss_mb")}
    nodes = {}
    for r, node, st, _reason in store.round_status(run_id):
        nodes.setdefault(node, {})[r] = st
    rounds = plan.experiment.workload.fl.rounds  # type: ignore[union-attr]
    return {
        "status": "completed" if ended else "failed",
        "rounds": rounds,
        "global_acc": {int(k): v for k, v in acc.items() if k is not None},
        "federated_acc": {int(k): v for k, v in fed.items() if k is not None},
        "round_duration_s": {int(k): v for k, v in dur.items() if k is not None},
        "final_global_acc": acc.get(rounds),
        "node_status": nodes,
        "peak_rss_mb": peak,
    }


def _run_library(
    exp: Experiment,
    seed: int,
    run_id: str,
    run_dir: Path,
    store: RunStore,
    observer: Observer | None,
) -> dict[str, Any]:
    """Workloads that run in-process (radio, compression): same store, same records."""
    from testbed.workloads import run_workload

    def report(row: dict[str, Any]) -> None:
        store.add_metric(
            run_id,
            row["name"],
            row["value"],
            round=row.get("step"),
            node=row.get("node"),
            tags=row.get("tags"),
        )
        if observer:
            observer.record({"kind": "metric", **row})

    def progress(desc: str, frac: float) -> None:
        if observer:
            observer.record({"kind": "progress", "name": desc, "value": frac})

    if observer:
        observer.started(run_id, make_plan(exp, seed))
    return run_workload(exp, seed, run_dir, report, progress)


@dataclass(frozen=True)
class SweepItem:
    """One run of a sweep: grid assignment, repetition, seed and its experiment."""

    assignment: dict[str, Any]
    repetition: int
    seed: int
    experiment: Experiment

    @property
    def variant(self) -> str:
        return json.dumps({"grid": self.assignment, "seed": self.seed}, sort_keys=True, default=str)


def sweep_items(expanded: list[tuple[dict[str, Any], Experiment]]) -> list[SweepItem]:
    """Grid combinations times repetitions; repetition ``k`` uses seed ``seed + k``."""
    return [SweepItem(a, k, e.seed + k, e) for a, e in expanded for k in range(e.repetitions)]


def sweep_id_of(spec_path: str, text: str) -> str:
    """A stable sweep id from the file name and its content (edits start a new sweep)."""
    import hashlib

    return f"{Path(spec_path).stem}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
