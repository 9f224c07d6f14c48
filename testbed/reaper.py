"""Leave nothing behind when a runner dies hard: a watchdog per run, and the reaping.

A runner that ends normally, by an error or by Ctrl-C stops its fleet itself
(``Backend.stop``). One killed with SIGKILL cannot: its node agents notice their parent
is gone and stop (``nodes.agent.watch_parent``), but host-wide objects stay: the nodes'
memory / cpu cgroups, the run's network namespaces (``links.mode: netem``), and any
process that has no such watch (``flwr run --stream``). So every run on the local backend
gets a small watchdog process in its own session (``python -m testbed.reaper``), which
waits for the runner's pid to go away and then reaps what the run left:

- every process whose ``FLWR_HOME`` or command line points into the run's folder
  (SIGTERM, then SIGKILL after a grace period);
- the network namespaces named after the run's tag (``fleet.json`` in the run folder);
- the cgroups of every node agent it saw (``continuum-testbed/node-<pid>``);
- the run's store row, still ``running``, becomes ``interrupted`` with a
  ``runner_lost`` event.

A runner that finishes stops its watchdog (:meth:`Watchdog.stop`). ``testbed resume``
reaps too (:func:`reap_run`), for runs whose watchdog was killed as well.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

FLEET_FILE = "fleet.json"
POLL_S = 0.5  # how often the watchdog checks the runner (s)
SCAN_S = 2.0  # how often it notes the run's node processes (s)
GRACE_S = 3.0  # SIGTERM -> SIGKILL (s)


def processes_in(run_dir: Path) -> list[psutil.Process]:
    """Live processes (not this one) whose ``FLWR_HOME`` or command line is in ``run_dir``."""
    folder = str(run_dir.resolve())
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.pid == os.getpid():
            continue
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            home = p.environ().get("FLWR_HOME", "")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if folder in home or folder in cmd:
            found.append(p)
    return found


def write_fleet_file(run_dir: Path, run_tag: str) -> None:
    """Record the tag that names the run's host-wide objects (netem namespaces)."""
    (run_dir / FLEET_FILE).write_text(json.dumps({"run_tag": run_tag}))


def run_namespaces(run_dir: Path) -> list[str]:
    """Network namespaces that exist now and carry the run's tag (``ct-<tag>...``)."""
    try:
        tag = json.loads((run_dir / FLEET_FILE).read_text())["run_tag"]
    except (OSError, ValueError, KeyError):
        return []
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    names = [line.split()[0] for line in out.stdout.splitlines() if line.strip()]
    return [n for n in names if n.startswith(f"ct-{tag}")]


def _stop(procs: list[psutil.Process], grace_s: float) -> int:
    """SIGTERM ``procs``, SIGKILL what is left after ``grace_s``; return how many."""
    from testbed.procs import terminate_then_kill

    terminate_then_kill(procs, grace_s)
    return len(procs)


def reap_run(
    run_dir: Path, agent_pids: set[int] | None = None, grace_s: float = GRACE_S
) -> dict[str, Any]:
    """Stop the run's processes, delete its namespaces and node cgroups.

    Parameters
    ----------
    run_dir : pathlib.Path
        The run's artifact folder.
    agent_pids : set of int, optional
        Pids of node processes seen while the run lived (their cgroups are removed);
        the pids found now and in the nodes' ready files are added.
    grace_s : float
        Seconds between SIGTERM and SIGKILL.

    Returns
    -------
    dict
        What was reaped: ``processes`` (count), ``netns`` (names), ``cgroups`` (count).
    """
    from testbed.backends.local_node import remove_node_cgroups

    pids = set(agent_pids or ())
    pids |= set(_ready_pids(run_dir))
    procs = processes_in(run_dir)
    pids |= {p.pid for p in procs}
    stopped = _stop(procs, grace_s) if procs else 0
    while procs := processes_in(run_dir):  # children that started while we stopped
        pids |= {p.pid for p in procs}
        stopped += _stop(procs, 0.5)
    namespaces = run_namespaces(run_dir)
    for ns in namespaces:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
    cgroups = 0
    for pid in pids:
        cgroups += _remove_cgroups(pid, remove_node_cgroups)
    return {"processes": stopped, "netns": namespaces, "cgroups": cgroups}


def _remove_cgroups(pid: int, remove: Any) -> int:
    """Remove node ``pid``'s cgroups; 1 if one of them existed, else 0."""
    from nodes.agent import cgroup_dir
    from testbed.backends.local_node import cpu_cgroup_v1

    existed = cgroup_dir(pid).exists() or cpu_cgroup_v1(pid).exists()
    remove(pid)
    return int(existed)


def _ready_pids(run_dir: Path) -> list[int]:
    """Agent pids from the warm nodes' ready files."""
    out = []
    for f in (run_dir / "nodes").glob("*/ready"):
        try:
            out.append(int(json.loads(f.read_text())["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return out


def watch(runner_pid: int, run_dir: Path, run_id: str) -> dict[str, Any] | None:
    """Wait for ``runner_pid`` to end; then reap the run and mark it interrupted.

    Returns what was reaped, or None when the watchdog was stopped (SIGTERM: the runner
    finished and cleaned up itself).
    """
    stopped = {"flag": False}

    def on_term(_signum: int, _frame: object) -> None:
        stopped["flag"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the terminal is the runner's
    seen: set[int] = set()
    last_scan = 0.0
    while not stopped["flag"] and psutil.pid_exists(runner_pid) and not _zombie(runner_pid):
        if time.monotonic() - last_scan > SCAN_S:
            seen |= {p.pid for p in processes_in(run_dir)}
            last_scan = time.monotonic()
        time.sleep(POLL_S)
    if stopped["flag"]:
        return None
    reaped = reap_run(run_dir, seen)
    _mark_interrupted(run_dir, run_id, runner_pid, reaped)
    return reaped


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _mark_interrupted(run_dir: Path, run_id: str, runner_pid: int, reaped: dict[str, Any]) -> None:
    """A run still ``running`` under the dead runner becomes ``interrupted``."""
    from testbed.store import RunStore

    store = RunStore(run_dir.parent)
    try:
        run = store.run(run_id)
        if run.status == "running" and run.pid == runner_pid:
            store.add_event(run_id, "runner_lost", pid=runner_pid, **reaped)
            store.finish_run(run_id, "interrupted", {"reason": "runner process killed"})
    finally:
        store.close()


class Watchdog:
    """The watchdog process of one run (see the module docstring).

    Parameters
    ----------
    run_dir : pathlib.Path
        The run's artifact folder (its parent holds the store).
    run_id : str
        The run's id.
    """

    def __init__(self, run_dir: Path, run_id: str) -> None:
        cmd = [sys.executable, "-m", "testbed.reaper", str(os.getpid()), str(run_dir), run_id]
        log = open(run_dir / "watchdog.log", "ab")  # noqa: SIM115 (handed to the child)
        with log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def stop(self) -> None:
        """The runner cleaned up itself: end the watchdog (it reaps nothing)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main(argv: list[str]) -> int:
    """``python -m testbed.reaper RUNNER_PID RUN_DIR RUN_ID``."""
    reaped = watch(int(argv[0]), Path(argv[1]), argv[2])
    if reaped is not None:
        print(f"runner {argv[0]} gone; reaped {json.dumps(reaped)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
