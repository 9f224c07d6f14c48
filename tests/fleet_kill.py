"""Helpers of the kill tests: a runner in a subprocess, waits on its store, host state.

Used by ``tests/test_resume.py`` and ``tests/test_orphans.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from testbed.store import RunStore

MEMORY_CGROUPS = Path("/sys/fs/cgroup/memory/continuum-testbed")
CPU_CGROUPS = Path("/sys/fs/cgroup/cpu/continuum-testbed")


def cli(out: Path, *args: str) -> subprocess.Popen[str]:
    """``python -m testbed ARGS --out OUT`` in a subprocess (output piped)."""
    return subprocess.Popen(
        [sys.executable, "-m", "testbed", *args, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_store(
    out: Path, done: Callable[[RunStore, str], bool], proc: subprocess.Popen[str], timeout_s: float
) -> str:
    """Wait until ``done(store, run_id)`` holds for the (only) run in ``out``; return its
    id. Fails (killing ``proc``) on timeout or if ``proc`` ends first."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if (out / "testbed.db").exists():
            store = RunStore(out)
            runs = store.runs()
            try:
                if runs and done(store, runs[-1].run_id):
                    return runs[-1].run_id
            finally:
                store.close()
        if proc.poll() is not None:
            raise AssertionError(f"runner ended early ({proc.returncode}): {proc.stdout}")
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"condition not met in {timeout_s:.0f} s")


def has_event(kind: str, round: int | None = None) -> Callable[[RunStore, str], bool]:
    """A ``wait_store`` condition: an event ``kind`` (of ``round``) is in the store."""

    def check(store: RunStore, run_id: str) -> bool:
        return any(
            e.kind == kind and (round is None or e.round == round) for e in store.events(run_id)
        )

    return check


def netns() -> set[str]:
    """Network namespaces that exist now."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def node_cgroups() -> set[str]:
    """The testbed's node cgroups that exist now (memory and cpu hierarchies)."""
    return {
        f"{root.name}/{d.name}"
        for base in (MEMORY_CGROUPS, CPU_CGROUPS)
        for root in [base]
        for d in (base.glob("node-*") if base.exists() else [])
    }


class PidSampler:
    """Notes, every ``every_s`` while it runs, the pids of the processes whose
    ``FLWR_HOME`` or command line is in ``folder``: the run's own processes, so that host
    objects named after a pid (``node-<pid>`` cgroups) can be told from a neighbour's."""

    def __init__(self, folder: Path, every_s: float = 0.2) -> None:
        import threading

        from tests.conftest import processes_under

        self.pids: set[int] = set()
        self._stop = threading.Event()

        def loop() -> None:
            while not self._stop.is_set():
                self.pids |= {p.pid for p in processes_under(folder)}
                self._stop.wait(every_s)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> set[int]:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.pids


def run_pids(out: Path) -> set[int]:
    """Agent pids that the runs under ``out`` wrote in their nodes' ready files."""
    pids = set()
    for f in out.glob("**/nodes/*/ready"):
        try:
            pids.add(int(json.loads(f.read_text())["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return pids


def own_cgroups(cgroups: set[str], pids: set[int]) -> set[str]:
    """The ``node-<pid>`` cgroups among ``cgroups`` whose pid is one of ``pids``."""
    return {c for c in cgroups if c.rsplit("node-", 1)[-1] in {str(p) for p in pids}}


def own_netns(names: set[str], out: Path) -> set[str]:
    """The namespaces among ``names`` that carry the tag of a run under ``out``
    (``fleet.json``: ``ct-<tag>...``; none if no run wrote its tag)."""
    tags = set()
    for f in out.glob("**/fleet.json"):
        try:
            tags.add(json.loads(f.read_text())["run_tag"])
        except (OSError, ValueError, KeyError):
            pass
    return {n for n in names if any(n.startswith(f"ct-{t}") for t in tags)}


def listening(pids: set[int]) -> set[tuple[int, int]]:
    """(pid, port) of TCP sockets in LISTEN state owned by ``pids``."""
    out = set()
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids and c.laddr:
            out.add((c.pid, c.laddr.port))
    return out


def own_listening() -> set[tuple[int, int]]:
    """Listening sockets of this (test) process."""
    return listening({os.getpid()})
