"""The warm executor (nodes/fl/warm_executor.py) without a fleet: FAB caching and its
polling loop against a SuperNode that is not there (yet). The whole task protocol is
exercised end to end by every fleet test (each SuperNode runs one)."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nodes.fl import client_app
from nodes.fl.warm_executor import WarmExecutor

APP = Path(__file__).resolve().parents[2] / "nodes" / "fl" / "app"
STOP_WITHIN_S = 2.0  # named tolerance: serve() notices stop() between polls (0.5 s back-off)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def fab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """The testbed's FAB, built with Flower's own ``flwr build``; FLWR_HOME in tmp."""
    from flwr.supercore.fab import Fab
    from flwr.supercore.run import Run, RunStatus

    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    shutil.copytree(APP, tmp_path / "app")
    flwr = Path(sys.executable).with_name("flwr")
    subprocess.run([str(flwr), "build"], cwd=tmp_path / "app", check=True, capture_output=True)
    content = next((tmp_path / "app").glob("*.fab")).read_bytes()
    digest = hashlib.sha256(content).hexdigest()
    run = Run(
        run_id=1,
        fab_id="continuum-testbed/continuum-fl",
        fab_version="0.1.0",
        fab_hash=digest,
        override_config={},
        pending_at="",
        starting_at="",
        running_at="",
        finished_at="",
        status=RunStatus("", "", ""),
        flwr_aid="",
        federation_id="",
        primary_task_id=None,
        bytes_sent=0,
        bytes_recv=0,
        clientapp_runtime=0.0,
    )
    return run, Fab(digest, content, {}), tmp_path / "home"


def test_fab_is_installed_once_and_its_client_app_kept(fab) -> None:  # noqa: ANN001
    run, fab_, home = fab
    ex = WarmExecutor(f"127.0.0.1:{_free_port()}")
    app = ex._load(run, fab_)
    installed = list((home / "apps").iterdir())
    assert len(installed) == 1 and installed[0].name.endswith(fab_.hash_str[:8])
    assert app is client_app.app  # the testbed's ClientApp, imported once per process
    t0 = time.perf_counter()
    assert ex._load(run, fab_) is app
    assert time.perf_counter() - t0 < 0.01  # cached: no install, no import
    assert list((home / "apps").iterdir()) == installed


def test_serve_waits_for_an_absent_supernode_and_stops_on_request() -> None:
    seen: list[tuple[int, float, bool]] = []
    ex = WarmExecutor(
        f"127.0.0.1:{_free_port()}", on_task=lambda i, d, ok: seen.append((i, d, ok))
    )
    th = threading.Thread(target=ex.serve, daemon=True)
    th.start()
    time.sleep(1.5)  # several failed polls: it keeps waiting instead of dying
    assert th.is_alive()
    t0 = time.perf_counter()
    ex.stop()
    th.join(STOP_WITHIN_S)
    assert not th.is_alive() and time.perf_counter() - t0 < STOP_WITHIN_S
    assert ex.tasks_run == 0 and seen == []


def test_a_wake_up_or_a_stop_ends_the_wait_between_polls() -> None:
    """fast mode: the executor waits on the SuperNode's pipe, not a fixed poll interval."""
    r, w = os.pipe()
    ex = WarmExecutor("127.0.0.1:1", poll_interval_s=30.0, wake_fd=r)
    try:
        os.write(w, b"!!")  # two tasks announced: one wait ends, both bytes read
        t0 = time.perf_counter()
        ex._idle()
        assert time.perf_counter() - t0 < 1.0
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 10)
        threading.Timer(0.2, ex.stop).start()
        t0 = time.perf_counter()
        ex._idle()  # nothing announced: ends on stop(), not after 30 s
        assert 0.1 < time.perf_counter() - t0 < STOP_WITHIN_S
    finally:
        os.close(r)
        os.close(w)
