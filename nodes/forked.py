"""A process made by ``os.fork`` that looks like a :class:`subprocess.Popen` to its owner.

A node that forks a part of itself (the agent forking its SuperNode, the fork server
forking a node) shares the imported Python stack (torch, flwr) copy-on-write with its
parent instead of importing it again in a fresh interpreter: start-up in milliseconds
instead of seconds, and the pages counted once in the proportional set size (PSS).
Callers keep using the ``Popen`` interface they had (``pid``, ``poll``, ``wait``,
``send_signal``, ``terminate``, ``kill``, ``returncode``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence

POLL_S = 0.02  # wait() checks the child this often, s


class ForkedChild(subprocess.Popen[bytes]):
    """Handle of a child made by :func:`fork_call` (a real child: ``waitpid`` reaps it).

    Parameters
    ----------
    pid : int
        The child's process id.
    args : sequence of str
        What the child runs, for logs (``Popen.args``).
    """

    def __init__(self, pid: int, args: Sequence[str]) -> None:  # no Popen.__init__: no exec
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        self.stdin = self.stdout = self.stderr = None
        self._child_created = False  # (Popen.__del__ then leaves the process alone)
        self._reaping = threading.Lock()  # poll() from several threads reaps once

    def _reap(self) -> int | None:
        """The child's exit code once it ended (negative: killed by that signal)."""
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere
            return -signal.SIGKILL
        return os.waitstatus_to_exitcode(status) if pid else None

    def poll(self) -> int | None:
        """Exit code, or None while the child runs."""
        with self._reaping:
            if self.returncode is None:
                self.returncode = self._reap()
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to end (``subprocess.TimeoutExpired`` after ``timeout`` s)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(POLL_S)
        return code

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` unless the child already ended."""
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


def run_in_child(fn: Callable[[], int | None]) -> None:
    """Body of a forked child: run ``fn`` and leave with its exit code, never returning
    into the parent's code (``SystemExit`` gives the code; an exception prints and 1)."""
    code: int = 1
    try:
        result = fn()
        code = int(result) if isinstance(result, int) else 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)  # (what Python prints for a message exit)
    except BaseException:  # noqa: BLE001  (a child must never unwind into its parent)
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def fork_call(fn: Callable[[], int | None], args: Sequence[str]) -> ForkedChild:
    """Run ``fn`` in a forked child of this process (signals back to their defaults).

    Fork before starting threads: only the calling thread exists in the child.

    Parameters
    ----------
    fn : callable
        What the child runs; its return value (or ``SystemExit`` code) is the exit code.
    args : sequence of str
        The command the child stands for, for logs.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh python
        run_in_child(fn)
    return ForkedChild(pid, args)
