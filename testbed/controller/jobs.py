"""Launched experiments: one ``python -m testbed run`` subprocess per launch.

A launch runs one experiment file (every configuration of its sweep) in its own process
session, so the controller stays responsive, runs are isolated from it and from each
other, and a terminal Ctrl-C aimed at the controller does not reach them. Stopping a
launch sends SIGINT: the CLI then marks the current run ``interrupted`` and tears its
fleet down. The runs of a launch are the store rows whose ``pid`` is the subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXIT_STATES = {0: "completed", 1: "failed", 2: "invalid", 130: "stopped"}


@dataclass
class Job:
    """One launch of an experiment file.

    Attributes
    ----------
    job_id : str
        ``job-<n>``, unique within this controller.
    spec_path : pathlib.Path
        The experiment file run (from the experiments folder, or a saved upload).
    overrides : list of str
        ``key.path=value`` overrides passed with ``--set``.
    total : int
        Runs this launch is made of (sweep combinations x repetitions).
    sweep_id : str or None
        Sweep id the CLI will use (``None`` for a single run).
    backend : str
        The backend it runs on (``testbed run --backend``).
    """

    job_id: str
    spec_path: Path
    overrides: list[str]
    total: int
    sweep_id: str | None
    proc: subprocess.Popen[bytes]
    log_path: Path
    backend: str = "local"
    started_at: float = field(default_factory=time.time)
    stop_requested_at: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def state(self) -> str:
        """``running``, ``stopping`` or how the subprocess ended."""
        rc = self.proc.poll()
        if rc is None:
            return "stopping" if self.stop_requested_at else "running"
        if self.stop_requested_at and rc != 0:
            return "stopped"
        return EXIT_STATES.get(rc, f"exited {rc}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "pid": self.pid,
            "spec_path": str(self.spec_path),
            "overrides": self.overrides,
            "total": self.total,
            "sweep_id": self.sweep_id,
            "backend": self.backend,
            "state": self.state(),
            "returncode": self.proc.poll(),
            "started_at": self.started_at,
            "log_path": str(self.log_path),
        }


class JobManager:
    """Start, watch and stop launches.

    Parameters
    ----------
    store_root : pathlib.Path
        The run store folder passed to ``testbed run --out``; launch logs go to
        ``store_root / "launches"``.
    """

    def __init__(self, store_root: Path) -> None:
        self.store_root = Path(store_root)
        self.jobs: dict[str, Job] = {}

    def launch(
        self,
        spec_path: Path,
        overrides: list[str],
        total: int,
        sweep_id: str | None,
        spec_dir: Path | None = None,
        backend: str = "local",
    ) -> Job:
        """Start ``python -m testbed run spec_path --backend B --out store_root [--set
        ...] [--spec-dir DIR]`` (``spec_dir``: where the spec's relative paths point)."""
        job_id = f"job-{len(self.jobs) + 1}"
        logs = self.store_root / "launches"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{time.strftime('%Y%m%d-%H%M%S')}-{job_id}.log"
        cmd = [sys.executable, "-m", "testbed", "run", str(spec_path), "--backend", backend]
        cmd += ["--out", str(self.store_root)]
        for item in overrides:
            cmd += ["--set", item]
        if spec_dir is not None:
            cmd += ["--spec-dir", str(spec_dir)]
        env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="100")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        job = Job(job_id, spec_path, list(overrides), total, sweep_id, proc, log_path, backend)
        self.jobs[job_id] = job
        return job

    def get(self, job_id: str) -> Job:
        if job_id not in self.jobs:
            raise KeyError(f"no launch {job_id!r}")
        return self.jobs[job_id]

    def by_pid(self, pid: int | None) -> Job | None:
        return next((j for j in self.jobs.values() if j.pid == pid), None)

    def stop(self, job: Job, force: bool = False) -> None:
        """SIGINT the launch (the run is marked interrupted); ``force``: SIGKILL its group."""
        if job.proc.poll() is not None:
            return
        job.stop_requested_at = job.stop_requested_at or time.time()
        if force:
            os.killpg(job.pid, signal.SIGKILL)
        else:
            job.proc.send_signal(signal.SIGINT)

    def shutdown(self, timeout_s: float = 60.0) -> None:
        """Stop every running launch and wait for them (controller exit)."""
        running = [j for j in self.jobs.values() if j.proc.poll() is None]
        for j in running:
            self.stop(j)
        deadline = time.time() + timeout_s
        for j in running:
            try:
                j.proc.wait(max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                self.stop(j, force=True)
