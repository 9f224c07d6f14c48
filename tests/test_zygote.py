"""The local backend's fork server forks nodes that behave like started processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.backends.zygote import Zygote, ZygoteProcess
from testbed.procs import ProcGroup
from tests.conftest import processes_under


def _zygote(tmp_path: Path) -> Zygote:
    z = Zygote(tmp_path, "test")
    z.start(dict(os.environ), tmp_path / "zygote.log", warm=False)  # plain Python
    return z


def test_forked_node_runs_its_command_and_reports_its_exit(tmp_path: Path) -> None:
    z = _zygote(tmp_path)
    try:
        env = dict(os.environ, CT_PROBE="1")
        ok = z.spawn([sys.executable, "-m", "calendar", "2026", "1"], tmp_path / "a.log", env)
        bad = z.spawn([sys.executable, "-m", "json.tool", "/no/such"], tmp_path / "b.log", env)
        assert isinstance(ok, ZygoteProcess) and isinstance(bad, ZygoteProcess)
        assert ok.wait(timeout=30) == 0 and bad.wait(timeout=30) == 2
        assert "January 2026" in (tmp_path / "a.log").read_text()  # its stdout: its log
        assert "/no/such" in (tmp_path / "b.log").read_text()  # its stderr too
        other = z.spawn(["ls"], tmp_path / "c.log", env)  # only `python -m MODULE` runs
        assert other is not None and other.wait(timeout=30) == 1
        assert "can only run `python -m MODULE" in (tmp_path / "c.log").read_text()
    finally:
        z.stop()
    assert processes_under(tmp_path) == []


def test_a_forked_node_collects_garbage_though_its_zygote_does_not(tmp_path: Path) -> None:
    """The zygote imports with the cyclic GC off and freezes its objects; a node (a
    long-running process) must collect its own cycles again."""
    z = _zygote(tmp_path)
    try:
        p = z.spawn([sys.executable, "-m", "tests.zygote_probe"], tmp_path / "p.log", {})
        assert p is not None and p.wait(timeout=30) == 0
    finally:
        z.stop()
    log = (tmp_path / "p.log").read_text()
    enabled, frozen = log.split()[1::2]
    assert enabled == "True" and int(frozen) > 0, log  # (frozen: the zygote's, shared)


def test_forked_node_has_its_own_session_and_stops_like_a_process(tmp_path: Path) -> None:
    z = _zygote(tmp_path)
    group = ProcGroup()
    try:
        cmd = [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"]
        p = z.spawn(cmd, tmp_path / "n.log", dict(os.environ))
        assert p is not None
        group.adopt("node", p)
        time.sleep(0.5)
        assert p.poll() is None and os.getpgid(p.pid) == p.pid  # its own process group
        assert [q.pid for q in group.tree("node")] == [p.pid]
        assert p.pid in {q.pid for q in processes_under(tmp_path)}  # the run finds it
        group.stop("node")
        assert p.returncode == -signal.SIGTERM
        with pytest.raises(subprocess.TimeoutExpired):
            z.spawn(cmd, tmp_path / "m.log", dict(os.environ)).wait(timeout=0.2)  # type: ignore[union-attr]
    finally:
        group.stop_all()
        z.stop()
    assert processes_under(tmp_path) == []
    assert z.spawn(["x"], tmp_path / "x.log", {}, timeout_s=1) is None  # stopped: start plainly


def test_a_forked_node_counts_the_runtime_it_shares_against_its_device_memory() -> None:
    """The zygote's pages are charged to the zygote's cgroup, but a device must hold
    them: a forked node's own cap is its memory less that share, and a device smaller
    than the shared runtime stops the node (as the kernel stops a plain node)."""
    from nodes.agent import _inherited_rss, _own_limit

    mb = 2**20
    assert _own_limit(1024 * mb, 300 * mb) == 724 * mb
    with pytest.raises(SystemExit, match="out of memory: the device has 64 MB"):
        _own_limit(64 * mb, 364 * mb)
    assert _inherited_rss() > 10 * mb  # this interpreter's resident set, read from /proc
