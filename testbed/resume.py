"""``testbed resume RUN_ID``: continue a killed FL run from its last completed round.

The ServerApp checkpoints the global model at the start of every round
(:mod:`nodes.fl.checkpoint`): ``checkpoint.pt`` holds round ``k`` and the time ``T`` it
was written, and every record of rounds ``<= k`` is older than ``T``. Resuming

1. checks the run: it exists, did not complete, is not running, ran on the local
   backend, has a checkpoint and its resolved spec (else :class:`ResumeError`);
2. reaps what the dead runner left (:func:`testbed.reaper.reap_run`);
3. rolls the store back to the checkpoint: telemetry lines the dead runner wrote to
   ``telemetry.jsonl`` but never ingested (``t <= T``) are ingested now, and every metric,
   round status and event newer than ``T`` is deleted (the round in progress, ``k + 1``,
   is dropped whole and runs again), except the events that say how the attempt ended
   (``error``, ``run_finished``, ``runner_lost``);
4. moves the attempt's logs and node state to ``attempts/<n>/`` and records a
   ``resumed`` event (``from_round = k + 1``);
5. starts a new fleet for the same run id from ``spec.resolved.yaml`` and seed; its
   ServerApp loads the checkpoint and runs rounds ``k + 1 .. rounds``.

So the store ends with each (round, node) exactly once.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import psutil

from testbed.runner import RunResult, execute
from testbed.store import RunRow, RunStore
from testbed.workloads import Observer, RunContext

#: Events of an earlier attempt kept when the store is rolled back: how it ended.
ATTEMPT_EVENTS = ("error", "run_finished", "runner_lost")
#: What an attempt leaves in the run folder that the next one must not reuse.
ATTEMPT_FILES = ("logs", "nodes", "flwr_home", "run_config.toml", "fleet.json", "watchdog.log")


class ResumeError(ValueError):
    """A run that cannot be resumed, and why (the CLI exits 2)."""


def check_resumable(store: RunStore, run_id: str) -> tuple[RunRow, Any]:
    """The run and its checkpoint, or :class:`ResumeError` saying why not."""
    from nodes.fl.checkpoint import load_checkpoint

    try:
        run = store.run(run_id)
    except KeyError as e:
        why = e.args[0].split(": ", 1)[-1]  # no such run | ambiguous prefix
        raise ResumeError(f"run {run_id!r}: {why} in {store.path}") from None
    if run.status == "completed":
        raise ResumeError(f"run {run.run_id} completed; there is nothing to resume")
    if run.status == "running" and run.pid and run.pid != os.getpid() and _alive(run.pid):
        raise ResumeError(f"run {run.run_id} is still running (pid {run.pid})")
    if run.backend != "local":
        raise ResumeError(f"run {run.run_id} ran on backend {run.backend!r}; resume: local only")
    run_dir = store.artifact_dir(run.run_id)
    if not (run_dir / "spec.resolved.yaml").is_file():
        raise ResumeError(f"run {run.run_id} has no spec.resolved.yaml in {run_dir}")
    ckpt = load_checkpoint(run_dir)
    if ckpt is None:
        raise ResumeError(
            f"run {run.run_id} has no checkpoint (it ended before its first round completed);"
            " start it again with `testbed run`"
        )
    return run, ckpt


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def telemetry_lines(run_dir: Path) -> list[dict[str, Any]]:
    """The run's telemetry records; a half-written last line (the writer was killed
    mid-line) is cut off the file first, so the next attempt appends whole lines."""
    path = run_dir / "telemetry.jsonl"
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with open(path, "r+b") as f:
            f.truncate(end)
    return [json.loads(line) for line in data[:end].splitlines() if line.strip()]


def _missing(store: RunStore, run_id: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The telemetry records that are not in the store (never ingested)."""
    have_m = {(m.name, m.round, m.node, m.ts) for m in store.metrics(run_id)}
    have_e = {(e.kind, e.round, e.node, e.ts) for e in store.events(run_id)}
    have_s = {(s.round, s.node) for s in store.round_status(run_id)}
    out = []
    for r in records:
        kind = r.get("kind")
        if kind == "metric":
            known = (r["name"], r.get("round"), r.get("node"), r["t"]) in have_m
        elif kind == "event":
            known = (r["name"], r.get("round"), r.get("node"), r["t"]) in have_e
        else:  # status: the last one of a (round, node) wins, as in ingest
            known = (r["round"], r["node"]) in have_s
        if not known:
            out.append(r)
    return out


def roll_back(store: RunStore, run_id: str, run_dir: Path, ckpt_ts: float) -> dict[str, int]:
    """Make the store hold exactly the records up to the checkpoint (see the module
    docstring, step 3); return the counts ingested and dropped."""
    before = [r for r in telemetry_lines(run_dir) if r["t"] <= ckpt_ts]
    caught_up = store.ingest(run_id, _missing(store, run_id, before))
    dropped = store.drop_after(run_id, ckpt_ts, ATTEMPT_EVENTS)
    return {"ingested": caught_up, **{f"dropped_{k}": v for k, v in dropped.items()}}


def archive_attempt(run_dir: Path) -> Path:
    """Move the attempt's logs and node state to ``attempts/<n>/``; return that folder."""
    root = run_dir / "attempts"
    n = 1 + sum(1 for _ in root.iterdir()) if root.exists() else 1
    dest = root / str(n)
    dest.mkdir(parents=True)
    for name in ATTEMPT_FILES:
        if (run_dir / name).exists():
            shutil.move(str(run_dir / name), str(dest / name))
    return dest


def resume_run(store: RunStore, run_id: str, observer: Observer | None = None) -> RunResult:
    """Resume run ``run_id`` (see the module docstring); return how it ended.

    Raises
    ------
    ResumeError
        Unknown run id, a completed or still running run, no checkpoint.
    """
    from nodes.fl.checkpoint import load_checkpoint
    from testbed.planner import make_plan
    from testbed.reaper import reap_run
    from testbed.spec.loader import parse_spec

    run, ckpt = check_resumable(store, run_id)
    run_dir = store.artifact_dir(run.run_id)
    spec_file = run_dir / "spec.resolved.yaml"
    exp = parse_spec(spec_file.read_text(), str(spec_file))
    if exp.workload.fl is None or len(exp.workload.sections) > 1:
        raise ResumeError(f"run {run.run_id}: only runs of one fl workload are resumed")
    reaped = reap_run(run_dir)
    # the dead attempt's ServerApp may have checkpointed once more before it was reaped
    ckpt = load_checkpoint(run_dir) or ckpt
    counts = roll_back(store, run.run_id, run_dir, ckpt.ts)
    attempt = archive_attempt(run_dir)
    store.reopen_run(run.run_id, os.getpid())
    counts_data: dict[str, Any] = dict(counts)
    store.add_event(
        run.run_id,
        "resumed",
        from_round=ckpt.round + 1,
        checkpoint_round=ckpt.round,
        previous_status=run.status,
        previous_attempt=str(attempt.relative_to(run_dir)),
        reaped_processes=reaped["processes"],
        **counts_data,
    )
    seed = exp.seed if run.seed is None else int(run.seed)
    ctx = RunContext(make_plan(exp, seed), run.run_id, run_dir, store, "local", {}, observer, True)
    return execute(ctx)
