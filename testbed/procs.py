"""Child processes that leave nothing behind: own process group, tree-wide stop."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import TypeAlias

import psutil

#: A child process started by :class:`ProcGroup` (output to a log file, bytes).
Popen: TypeAlias = subprocess.Popen[bytes]


#: Where :func:`free_port` picks listening ports when the kernel's ephemeral range
#: leaves room below it (the range's own lower bound is used as the end). It starts above
#: Ray's default ports (client server 10001, workers 10002-19999): ``ray start --port=P``
#: refuses a P in its worker range, and a Ray worker may bind any port there.
LISTEN_PORTS = (20000, 32768)
_given: set[int] = set()  # ports this process handed out (never twice)


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux default)."""
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A TCP port free now on this host, for a server to listen on later.

    Picked at random **below the kernel's ephemeral range**, never twice in this
    process: a port the kernel picks for ``bind(0)`` comes from the range it also gives
    to every outgoing connection, and on a busy host (48 node containers on the host
    network dialling their SuperLink) such a connection took a node's port between the
    pick and the node's bind (``[Errno 98] address already in use``: the node's start
    failed). Falls back to the kernel's pick when no port there is free.
    """
    pick = random.SystemRandom().randrange  # (not the seeded global: sweeps' children)
    lo, end = LISTEN_PORTS[0], min(LISTEN_PORTS[1], ephemeral_range()[0])
    for _ in range(200 if end - lo > 1000 else 0):
        port = pick(lo, end)
        if port in _given:
            continue
        try:
            with socket.socket() as s:
                s.bind(("0.0.0.0", port))  # (free on every address: also 127.0.0.1's)
        except OSError:
            continue
        _given.add(port)
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _socket(netns: str | None) -> socket.socket:
    if netns is None:
        return socket.socket()
    from testbed.emulation.netem import in_netns

    with in_netns(netns):  # the socket stays in that namespace
        return socket.socket()


def wait_port(
    port: int,
    timeout_s: float = 30.0,
    proc: Popen | None = None,
    netns: str | None = None,
    host: str = "127.0.0.1",
) -> None:
    """Wait until something listens on ``host:port`` (inside ``netns`` if given);
    raise if ``proc`` dies first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"process exited with code {proc.returncode} before port {port} opened"
            )
        with _socket(netns) as s:
            s.settimeout(0.2)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout_s:.0f} s")


def log_tail(path: Path, lines: int = 6, width: int = 300) -> str:
    """The last ``lines`` non-empty lines of the log at ``path`` (each cut to ``width``
    characters), for an error that says why a process ended; says so if there is none."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return f"no log at {path}"
    last = [ln[:width] for ln in text.splitlines() if ln.strip()][-lines:]
    if not last:
        return f"{path} is empty"
    return f"the end of {path}:\n  " + "\n  ".join(last)


def terminate_then_kill(procs: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM ``procs`` (SIGKILL at once when ``grace_s`` is 0), SIGKILL those still
    alive after ``grace_s``, and wait for them."""
    for q in procs:
        try:
            q.terminate() if grace_s > 0 else q.kill()
        except psutil.NoSuchProcess:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=grace_s)
    for q in alive:
        try:
            q.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=2)


def children_map() -> dict[int, list[int]]:
    """Parent pid -> its children's pids, from one pass over the process table.

    ``psutil``'s ``children(recursive=True)`` reads the whole process table on every
    call: a controller sampling 60 nodes' trees that way four times a second spent
    ~0.45 of this machine's 2 cores on it. Callers that look at many trees at once
    take one map and pass it to :meth:`ProcGroup.tree`.
    """
    kids: dict[int, list[int]] = {}
    for q in psutil.process_iter(["ppid"]):
        kids.setdefault(q.info["ppid"], []).append(q.pid)
    return kids


def descendant_pids(pid: int, kids: dict[int, list[int]]) -> list[int]:
    """The pids below ``pid`` in a :func:`children_map` (children, grandchildren, ...)."""
    out: list[int] = []
    todo = list(kids.get(pid, ()))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(kids.get(child, ()))
    return out


def _descendants(pid: int, kids: dict[int, list[int]]) -> list[psutil.Process]:
    """The live descendants of ``pid`` in a :func:`children_map`."""
    out: list[psutil.Process] = []
    for child in descendant_pids(pid, kids):
        try:
            out.append(psutil.Process(child))
        except psutil.NoSuchProcess:
            pass
    return out


class ProcGroup:
    """Start processes in their own session; stop them and all their descendants."""

    def __init__(self) -> None:
        self.procs: dict[str, Popen] = {}
        self._known: dict[str, set[int]] = {}

    def start(
        self,
        name: str,
        cmd: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> Popen:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            p = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
            )
        return self.adopt(name, p)

    def adopt(self, name: str, p: Popen) -> Popen:
        """Track ``p`` as ``name``: a process started elsewhere in its own session (a node
        forked by the local backend's zygote, :mod:`testbed.backends.zygote`)."""
        self.procs[name] = p
        self._known[name] = {p.pid}
        return p

    def tree(self, name: str, kids: dict[int, list[int]] | None = None) -> list[psutil.Process]:
        """The live process tree of ``name`` (remembered, so orphans are found too);
        ``kids``: a :func:`children_map` to walk instead of reading the process table."""
        p = self.procs[name]
        try:
            root = psutil.Process(p.pid)
        except psutil.NoSuchProcess:
            return []
        out = [root, *_descendants(p.pid, children_map() if kids is None else kids)]
        self._known[name] |= {q.pid for q in out}
        return out

    def rss_mb(self, name: str, kids: dict[int, list[int]] | None = None) -> float:
        """Resident memory of ``name``'s whole process tree, MB (``kids``: see :meth:`tree`)."""
        total = 0
        for q in self.tree(name, kids):
            try:
                total += q.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total / 2**20

    def stop(self, name: str, timeout_s: float = 5.0) -> None:
        """SIGTERM the process group and every known descendant; SIGKILL stragglers.

        ``timeout_s=0`` kills at once with SIGKILL (a crash).
        """
        p = self.procs.get(name)
        if p is None:
            return
        self.tree(name)
        pids = set(self._known.get(name, set()))
        try:
            os.killpg(p.pid, signal.SIGTERM if timeout_s > 0 else signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        live: list[psutil.Process] = []
        for pid in pids:
            try:
                live.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        terminate_then_kill(live, timeout_s)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass

    def stop_all(self, timeout_s: float = 5.0) -> None:
        """SIGTERM every group at once, wait once, then SIGKILL what is left."""
        names = list(reversed(list(self.procs)))
        for name in names:
            self.tree(name)
            try:
                os.killpg(self.procs[name].pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        live: list[psutil.Process] = []
        for pid in self.all_pids():
            try:
                live.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(live, timeout=timeout_s)
        for name in names:  # SIGKILL stragglers and reap
            self.stop(name, timeout_s=0)

    def all_pids(self) -> set[int]:
        """Every PID this group ever saw (for leak checks)."""
        return set().union(*self._known.values()) if self._known else set()
