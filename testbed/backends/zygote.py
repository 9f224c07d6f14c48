"""Fork server ("zygote") of the local backend: client nodes forked, not started.

Every client node of the local backend is the same program (``python -m testbed node
supernode ...``) importing the same stack: torch, flwr and the testbed's ClientApp,
~2.9 s and ~250 MB of private memory each when started fresh (NOTES.md), 13-17 s when
four start at once on 2 cores. The zygote is one process per run that imports that
stack once and warms it up (one tiny training step per optimizer), then forks a node
whenever the backend asks: the node runs in milliseconds and shares the imported pages
with the zygote and every other node copy-on-write, so each counts only the pages it
writes in its proportional set size (PSS). As Python's documentation advises for a
process that forks without exec, the zygote runs with the cyclic garbage collector
disabled and freezes what it imported before forking (no collection: it would leave
freed holes in shared pages), and each node enables it again; imports without
collections also take ~25 % less CPU (the fleet's start waits for the zygote).

A forked node is the node the plain command would have started: same arguments, same
environment, its own process group (``killpg`` stops its tree), its log on stdout/stderr,
cwd. It stays in the zygote's session, so every forked node of a run shares one
autogroup, whose share of the CPU is one group's, like the SuperLink's or a neighbour's
(measured 2026-12-06: with a session, so an autogroup, per node at nice 19, four busy
loops beside a fleet left each node ~1 % of a core and a 40 s test ran over 10 min;
with one per node at nice 0, 200 nodes left the SuperLink ~1/200 of the CPU). It is not
a child of the backend, so the backend holds a :class:`ZygoteProcess` (the ``Popen``
interface) that learns the node's exit code from the file the zygote writes when it
reaps it. The zygote leaves when the backend's process dies (its nodes then see their
parent gone and stop, as they do when started directly); the backend stops it last.
Where the zygote is not up in time, the backend starts the node the plain way.
"""

from __future__ import annotations

import gc
import json
import os
import random
import runpy
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodes.forked import ForkedChild, fork_call

READY_TIMEOUT_S = 120.0  # how long a spawn waits for the zygote's imports, s
REAP_S = 0.1  # the zygote reaps its ended nodes this often, s
MAX_REQUEST = 1 << 20  # bytes of one spawn request
RECORD_WAIT_S = 2.0  # the longest a reaped node's exit record may lag its reaping, s
CONNECT_POLL_S = 0.02  # a spawn tries to reach the zygote this often while it imports, s


def warm_up() -> None:
    """Import and warm up a client node's stack (what every forked node then shares)."""
    import flwr.cli.install  # noqa: F401
    import flwr.clientapp.utils  # noqa: F401
    import flwr.supernode.cli.flower_supernode  # noqa: F401
    import flwr.supernode.main  # noqa: F401  (the SuperNode's Runtime API, imported lazily)
    import flwr.supernode.runtime.run_clientapp  # noqa: F401
    import flwr.supernode.start_client_internal  # noqa: F401

    import nodes.cli  # noqa: F401  (the node's own entry point)
    import nodes.fl.timing  # noqa: F401
    import nodes.fl.warm_executor  # noqa: F401
    from nodes.agent import _prewarm

    _uvicorn_implementations()
    _prewarm(None)  # torch, the ClientApp; one training step per optimizer


def _uvicorn_implementations() -> None:
    """Import what uvicorn imports only when a server starts (its event loop, HTTP,
    WebSocket and lifespan implementations): every SuperNode starts one for its Runtime
    API before it registers."""
    import uvicorn

    async def app(scope: Any, receive: Any, send: Any) -> None:  # (never served)
        return None

    uvicorn.Config(app=app, host="127.0.0.1", port=0).load()


class ZygoteProcess(ForkedChild):
    """A node forked by the zygote, seen from the backend (``Popen`` interface).

    Parameters
    ----------
    pid : int
        The node's process id.
    args : sequence of str
        The command it stands for.
    exits : pathlib.Path
        Folder where the zygote writes ``<pid>`` with the exit code once it reaped it.
    """

    def __init__(self, pid: int, args: list[str], exits: Path) -> None:
        super().__init__(pid, args)
        self.exits = exits

    def _reap(self) -> int | None:
        code = self.exits / str(self.pid)
        if code.exists():
            return int(code.read_text())
        try:
            os.kill(self.pid, 0)  # (a zombie not reaped yet still answers)
        except ProcessLookupError:  # reaped: its record follows (the zygote writes it
            deadline = time.monotonic() + RECORD_WAIT_S  # right after waitpid), unless
            while not code.exists() and time.monotonic() < deadline:  # the zygote died
                time.sleep(0.01)
            return int(code.read_text()) if code.exists() else -signal.SIGKILL
        return None


class Zygote:
    """The backend's handle of its fork server.

    Parameters
    ----------
    run_dir : pathlib.Path
        The run's artifact folder (its name is in the zygote's command line, so the
        run's watchdog and leak checks find the zygote and every node it forked).
    tag : str
        Names the zygote's (abstract) socket, unique per run.
    """

    def __init__(self, run_dir: Path, tag: str) -> None:
        self.address = f"\0continuum-testbed-zygote-{tag}-{os.getpid()}"
        self.exits = (run_dir / "zygote-exits").resolve()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str], log_path: Path, warm: bool = True) -> None:
        """Start the zygote (it imports in the background; :meth:`spawn` waits);
        ``warm=False`` skips :func:`warm_up` (a zygote of plain Python, for tests)."""
        self.exits.mkdir(parents=True, exist_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "testbed.backends.zygote", self.address[1:], str(self.exits)]
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd + ([] if warm else ["--cold"]),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env),
                start_new_session=True,
            )

    def _connect(self, timeout_s: float) -> socket.socket | None:
        """A connection to the zygote once it listens (None: it died or took too long)."""
        deadline = time.monotonic() + timeout_s
        while self.proc is not None and self.proc.poll() is None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.address)
                return s
            except (ConnectionRefusedError, FileNotFoundError):
                s.close()
            if time.monotonic() > deadline:
                break
            time.sleep(CONNECT_POLL_S)
        return None

    def spawn(
        self,
        cmd: list[str],
        log_path: Path,
        env: Mapping[str, str],
        timeout_s: float = READY_TIMEOUT_S,
    ) -> ZygoteProcess | None:
        """Fork ``cmd`` (``[python, -m, module, args...]``) as a node; None when the
        zygote cannot (not running, not up within ``timeout_s``): start it plainly."""
        conn = self._connect(timeout_s)
        if conn is None:
            return None
        log_path.parent.mkdir(parents=True, exist_ok=True)
        request = {"argv": cmd, "env": dict(env), "log": str(log_path.resolve())}
        with conn:
            conn.sendall(json.dumps(request).encode() + b"\n")
            reply = conn.makefile("rb").readline()
        if not reply:
            return None
        return ZygoteProcess(int(json.loads(reply)["pid"]), cmd, self.exits)

    def stop(self) -> None:
        """Stop the zygote (its nodes are stopped by the backend first)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:  # gone before the run's end is recorded (no process outlives its run)
                self.proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5.0)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# -- inside the zygote ------------------------------------------------------------------
def _node_main(request: dict[str, Any]) -> int | None:
    """Become the node of ``request`` (in the forked child): process group, log, env, argv."""
    os.setpgid(0, 0)  # (not setsid: the run's nodes share the zygote's autogroup)
    gc.enable()  # (disabled in the zygote, see the module's docstring)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.environ.clear()
    os.environ.update(request["env"])
    random.seed()  # (not the zygote's sequence in every node)
    argv: list[str] = request["argv"]
    if len(argv) < 3 or argv[1] != "-m":
        raise ValueError(f"zygote: can only run `python -m MODULE ...`, got {argv[:3]}")
    sys.argv = [argv[2], *argv[3:]]
    runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    return 0


def _serve_one(listener: socket.socket, exits: Path) -> int:
    """Accept one spawn request, fork its node, answer with (and return) its pid (an
    exit record left by an earlier node with the same, reused, pid is removed first)."""
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(10)
        data = conn.makefile("rb").readline(MAX_REQUEST)
        request = json.loads(data)

        def child() -> int | None:
            listener.close()
            conn.close()
            return _node_main(request)

        node = fork_call(child, request["argv"])
        (exits / str(node.pid)).unlink(missing_ok=True)  # reaped only by this thread, later
        conn.sendall(json.dumps({"pid": node.pid}).encode() + b"\n")
        return node.pid


def _reap(exits: Path, nodes: set[int]) -> None:
    """Record the exit code of every ended node (``exits/<pid>``, written atomically)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        nodes.discard(pid)
        tmp = exits / f".{pid}"
        tmp.write_text(str(os.waitstatus_to_exitcode(status)))
        tmp.rename(exits / str(pid))


def serve(name: str, exits: Path, warm: bool = True) -> int:
    """Zygote main loop: warm up, then fork nodes until the backend's process is gone."""
    parent, t0 = os.getppid(), time.monotonic()
    gc.disable()  # for good in the zygote; each node enables it again (_node_main)
    if warm:
        warm_up()
    gc.freeze()  # imported objects stay out of the nodes' collections: fewer pages copied
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(128)
    print(
        f"zygote {os.getpid()}: ready after {time.monotonic() - t0:.2f} s, "
        f"{len(sys.modules)} modules imported",
        flush=True,
    )
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop.append(signum))
    nodes: set[int] = set()
    while os.getppid() == parent and not stop:
        try:
            ready, _, _ = select.select([listener], [], [], REAP_S)
            if ready:
                nodes.add(_serve_one(listener, exits))
        except (OSError, ValueError) as e:  # a bad or abandoned request: next one
            print(f"zygote: spawn failed: {e}", flush=True)
        _reap(exits, nodes)
    for pid in nodes:  # nodes still running (normally stopped by the backend first)
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], Path(sys.argv[2]), warm="--cold" not in sys.argv[3:]))
