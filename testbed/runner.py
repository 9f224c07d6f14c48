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
from typing import Any

import yaml

from testbed.planner import make_plan
from testbed.spec.models import Experiment
from testbed.store import RunStore
from testbed.workloads import Observer, RunContext, workload

__all__ = ["Observer", "RunResult", "run_experiment", "sweep_items", "sweep_id_of"]

PACKAGES = ("flwr", "torch", "numpy", "scikit-learn", "pydantic", "sionna-no-rt", "tensorly")


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
    """Run ``exp`` and record it; Ctrl-C stops it, marks it ``interrupted`` and re-raises.

    The backend's preflight (:func:`testbed.backends.preflight`, what ``testbed
    validate --backend`` answers) runs first: a spec it refuses raises ValueError naming
    the field before anything is recorded.
    """
    import os

    from testbed.backends import preflight

    preflight(backend, [exp], backend_options)
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
        {
            "run_id": run_id,
            "backend": backend,
            "backend_options": dict(backend_options or {}),  # --cold, --oversubscribe
            "sweep_assignment": assignment or {},
        },
    )
    plan = make_plan(exp, seed)
    ctx = RunContext(plan, run_id, run_dir, store, backend, backend_options or {}, observer)
    return execute(ctx)


def execute(ctx: RunContext) -> RunResult:
    """Run the workload of ``ctx`` (a run already in the store) and record how it ended.

    On the local backend a watchdog process reaps the fleet if this process is killed
    (:mod:`testbed.reaper`). Ctrl-C marks the run ``interrupted`` and re-raises.
    """
    from kernel.dilation import dilated
    from testbed.reaper import Watchdog

    store, run_id = ctx.store, ctx.run_id
    watchdog = Watchdog(ctx.run_dir, run_id) if ctx.backend == "local" else None
    t0 = time.time()
    status, summary = "failed", {}
    tdf = time_dilation(ctx)
    try:
        with dilated(tdf):  # the run's processes and links read the factor
            summary = run_workloads(ctx)
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
        if tdf != 1.0:  # what the run's figures are in: emulated time = wall / TDF
            summary["time_dilation"] = {"tdf": tdf, "emulated_s": summary["wall_s"] / tdf}
        try:  # the watchdog stopped and leftovers reaped before the status says "ended"
            if watchdog is not None:
                _reap_leftovers(ctx, watchdog)
        finally:
            if status == "failed" and (cause := _cause(ctx, summary)):  # read once, now:
                summary["cause"] = cause  # the fleet is down, its logs are complete
            store.finish_run(run_id, status, summary)
            store.add_event(run_id, "run_finished", status=status)
        result = RunResult(run_id, status, ctx.run_dir, summary["wall_s"], summary)
        if ctx.observer:
            ctx.observer.finished(result)
    return result


def time_dilation(ctx: RunContext) -> float:
    """The run's time-dilation factor (:mod:`testbed.dilation`), recorded first (a
    ``time_dilation`` event: the store then keeps clock metrics in emulated time); 1
    on a backend with a virtual clock (simulation), or without dilation."""
    from testbed.backends import get_backend
    from testbed.dilation import resolve

    if not get_backend(ctx.backend).dilates_time:
        return 1.0
    d = resolve(ctx.experiment)
    if d.tdf == 1.0:
        return 1.0
    return ctx.store.set_time_dilation(ctx.run_id, **d.record())


def run_workloads(ctx: RunContext) -> dict[str, Any]:
    """Run the spec's workload, or its several workloads together on one fleet
    (:mod:`testbed.workloads.together`); every row is tagged with its workload."""
    from dataclasses import replace

    from testbed.workloads.base import LibraryWorkload
    from testbed.workloads.together import run_together

    sections = ctx.experiment.workload.sections
    if len(sections) > 1:
        return run_together(ctx, sections)
    store = ctx.store.tagged(sections[0])
    wl = workload(sections[0])
    try:
        summary = wl.run(replace(ctx, store=store, section=sections[0]))
    finally:
        store.close()
    if ctx.backend != "local" and isinstance(wl, LibraryWorkload):  # said, not silent
        summary["in_process"] = f"workload.{sections[0]} ran in {wl.runs_in}"
    return summary


def _cause(ctx: RunContext, summary: dict[str, Any]) -> dict[str, Any] | None:
    """The first error of a failed run (:func:`testbed.cause.find_cause`), as a dict."""
    from testbed.cause import find_cause

    server = next((n.name for n in ctx.plan.nodes if n.role == "server"), None)
    cause = find_cause(ctx.run_dir, summary, ctx.store.events(ctx.run_id), server)
    return cause.as_dict() if cause else None


def _reap_leftovers(ctx: RunContext, watchdog: Any) -> None:
    """Stop the watchdog, then reap what the fleet's own teardown missed (a node started
    in the instant Ctrl-C arrived, say); record a ``reaped`` event if there was any."""
    from testbed.reaper import reap_run

    watchdog.stop()
    left = reap_run(ctx.run_dir)
    if left["processes"] or left["netns"] or left["cgroups"]:
        ctx.store.add_event(ctx.run_id, "reaped", **left)


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
