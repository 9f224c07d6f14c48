"""Run a sweep's configurations as child processes, N at a time, resumably.

Each child is ``testbed run FILE --item K --sweep-id S`` (one configuration, its own
fleet on its own free ports); the parent shows a progress bar over runs. Finished
configurations (same sweep id and variant, status completed) are skipped, so a re-run
resumes. Ctrl-C interrupts every child (each marks its run interrupted) and re-raises.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from testbed.runner import SweepItem
from testbed.store import RunStore


def child_flags(
    sets: list[str],
    spec_dir: Path | None,
    cold: bool,
    oversubscribe: bool = False,
    advertise: str | None = None,
) -> list[str]:
    """The flags of ``testbed run`` that a sweep's child repeats: every ``--set``,
    ``--spec-dir``, ``--cold``, ``--oversubscribe`` and ``--advertise-addr`` (a flag not
    passed on would be silently ignored)."""
    flags = [f for s in sets for f in ("--set", s)]
    if spec_dir is not None:
        flags += ["--spec-dir", str(spec_dir)]
    flags += ["--cold"] if cold else []
    flags += ["--advertise-addr", advertise] if advertise else []
    return [*flags, "--oversubscribe"] if oversubscribe else flags


def run_parallel(
    file: Path,
    items: list[SweepItem],
    sweep_id: str,
    out: Path,
    parallel: int,
    sets: list[str],
    backend: str,
    console: Console,
    spec_dir: Path | None = None,
    cold: bool = False,
    oversubscribe: bool = False,
    advertise: str | None = None,
) -> dict[str, int]:
    """Run every not-yet-completed item; return counts by final status (each child reads
    the spec's relative paths from ``spec_dir`` when given, and runs ``--cold`` when
    ``cold``)."""
    store = RunStore(out)
    todo = [k for k, it in enumerate(items) if not store.completed_variant(sweep_id, it.variant)]
    done = len(items) - len(todo)
    logs = out / "sweep-logs" / sweep_id
    logs.mkdir(parents=True, exist_ok=True)
    counts = {"completed": 0, "failed": 0, "skipped": done}
    running: dict[int, subprocess.Popen[bytes]] = {}
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=console,
    )
    with progress:
        task = progress.add_task(
            f"sweep {sweep_id}",
            total=len(items),
            completed=done,
            info=f"{done} already done, {parallel} at a time",
        )
        try:
            while todo or running:
                while todo and len(running) < parallel:
                    k = todo.pop(0)
                    cmd = [
                        *(sys.executable, "-m", "testbed", "run", str(file), "--out", str(out)),
                        *("--backend", backend, "--item", str(k), "--sweep-id", sweep_id),
                        *child_flags(sets, spec_dir, cold, oversubscribe, advertise),
                    ]
                    with open(logs / f"item-{k:03d}.log", "w") as log:
                        running[k] = subprocess.Popen(
                            cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                        )
                for k, p in list(running.items()):
                    if p.poll() is not None:
                        del running[k]
                        ok = p.returncode == 0
                        counts["completed" if ok else "failed"] += 1
                        progress.update(
                            task,
                            advance=1,
                            info=(
                                f"{counts['completed']} ok, {counts['failed']} failed, "
                                f"{len(running)} running"
                            ),
                        )
                time.sleep(0.5)
        except KeyboardInterrupt:
            for p in running.values():
                p.send_signal(signal.SIGINT)
            for p in running.values():
                p.wait(timeout=120)
            raise
    return counts
