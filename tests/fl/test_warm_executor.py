"""The warm executor (nodes/fl/warm_executor.py) without a fleet: FAB caching and its
polling loop against a SuperNode that is not there (yet). The whole task protocol is
exercised end to end by every fleet test (each SuperNode runs one)."""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nodes.fl import client_app
from nodes.fl.warm_executor import WarmExecutor

APP = Path(__file__).resolve().parents[2] / "nodes" / "fl" / "app"
# named tolerance, a liveness bound: serve() and _idle() end on stop() at once; what they
# must not do is wait out a back-off or a poll interval (60 s and 30 s below)
STOP_WITHIN_S = 10.0
SETTLE_S = 0.5  # named tolerance: long enough for an executor that polls again at once to do so


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


def test_fab_is_installed_once_and_its_client_app_kept(
    fab,  # noqa: ANN001
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flwr.cli import install
    from flwr.clientapp import utils

    calls: list[str] = []  # Flower's install and ClientApp loader, counted (spies)
    real_install, real_loader = install.install_from_fab, utils.get_load_client_app_fn

    def install_from_fab(*a: object, **k: object) -> object:
        calls.append("install")
        return real_install(*a, **k)

    def get_load_client_app_fn(*a: object, **k: object) -> object:
        load = real_loader(*a, **k)

        def counted(*a2: object, **k2: object) -> object:
            calls.append("load")
            return load(*a2, **k2)

        return counted

    monkeypatch.setattr(install, "install_from_fab", install_from_fab)
    monkeypatch.setattr(utils, "get_load_client_app_fn", get_load_client_app_fn)
    run, fab_, home = fab
    ex = WarmExecutor(f"127.0.0.1:{_free_port()}")
    app = ex._load(run, fab_)
    assert calls == ["install", "load"]
    installed = list((home / "apps").iterdir())
    assert len(installed) == 1 and installed[0].name.endswith(fab_.hash_str[:8])
    assert app is client_app.app  # the testbed's ClientApp, imported once per process
    assert ex._load(run, fab_) is app
    assert calls == ["install", "load"]  # cached: no install, no load again
    assert list((home / "apps").iterdir()) == installed


def test_serve_waits_for_an_absent_supernode_and_stops_on_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flwr.supercore.retry import http_retry

    # Flower's back-off between failed polls: a few short ones, then 60 s, which stop()
    # must cut short (STOP_WITHIN_S tells the two apart however slow the machine)
    monkeypatch.setattr(
        http_retry, "exponential", lambda **_k: itertools.chain([0.05] * 3, itertools.repeat(60.0))
    )
    seen: list[tuple[int, float, bool]] = []
    ex = WarmExecutor(f"127.0.0.1:{_free_port()}", on_task=lambda i, d, ok: seen.append((i, d, ok)))
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
        assert time.perf_counter() - t0 < STOP_WITHIN_S  # the wake-up, not the 30 s poll
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


def _until(cond: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Wait until ``cond()`` (a loaded machine starts threads slowly), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)


class _Runtime:
    """The SuperNode's Runtime API as the executor sees it: ``AcquireTask`` hands out
    one task per announced message, and records when it was asked."""

    def __init__(self) -> None:
        self.polls: list[float] = []
        self.tasks = 1  # one task created before the executor starts serving

    def AcquireTask(self, _req: object) -> object:  # noqa: N802 (Flower's method name)
        from flwr.proto.runtime_pb2 import AcquireTaskResponse

        self.polls.append(time.perf_counter())
        res = AcquireTaskResponse()
        if self.tasks:
            self.tasks -= 1
            res.token = "t"
            res.task.task_id = len(self.polls)
        return res

    def close(self) -> None:
        pass


def test_with_a_wake_up_pipe_a_task_is_acquired_only_once_announced() -> None:
    """fast mode: Flower creates a task before its SuperNode has pulled the message's
    objects, so the executor polls only when the SuperNode says a task is ready (and
    at start), never straight after a task (it would take the next one too early)."""
    r, w = os.pipe()
    runtime = _Runtime()
    ran: list[int] = []
    ex = WarmExecutor("127.0.0.1:1", poll_interval_s=30.0, wake_fd=r)
    ex._client = lambda *_a, **_k: runtime  # type: ignore[method-assign,assignment,return-value]
    ex.run_task = lambda _token: ran.append(1) or True  # type: ignore[method-assign,func-returns-value]
    th = threading.Thread(target=ex.serve, daemon=True)
    try:
        th.start()
        _until(lambda: len(ran) == 1)
        time.sleep(SETTLE_S)
        assert len(ran) == 1 and len(runtime.polls) == 1  # the task, then a wait
        runtime.tasks = 1
        t_wake = time.perf_counter()
        os.write(w, b"!")  # the SuperNode stored the next message's objects
        _until(lambda: len(ran) == 2)
        time.sleep(SETTLE_S)
        assert len(runtime.polls) == 2 and runtime.polls[1] >= t_wake
    finally:
        ex.stop()
        th.join(STOP_WITHIN_S)
        os.close(r)
        os.close(w)
    assert not th.is_alive()


def test_without_a_pipe_the_executor_polls_again_after_a_task() -> None:
    runtime = _Runtime()
    ex = WarmExecutor("127.0.0.1:1", poll_interval_s=30.0)
    ex._client = lambda *_a, **_k: runtime  # type: ignore[method-assign,assignment,return-value]
    ex.run_task = lambda _token: True  # type: ignore[method-assign]
    th = threading.Thread(target=ex.serve, daemon=True)
    th.start()
    _until(lambda: len(runtime.polls) == 2)
    time.sleep(SETTLE_S)
    ex.stop()
    th.join(STOP_WITHIN_S)
    assert len(runtime.polls) == 2 and ex.tasks_run == 1  # the task, an empty poll, a wait


def _serves(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def supernode_runtime():  # noqa: ANN201
    """A real ``flower-supernode`` (``--isolation process``) whose SuperLink is absent:
    its Runtime API serves, and it knows no task token."""
    port = _free_port()
    exe = Path(sys.executable).with_name("flower-supernode")
    cmd = [str(exe), "--insecure", "--superlink", f"127.0.0.1:{_free_port()}"]
    cmd += ["--isolation", "process", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _until(lambda: _serves(port), timeout_s=30.0)
        assert _serves(port), "flower-supernode's Runtime API did not open"
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def test_a_refused_task_token_never_signals_the_nodes_agent(
    supernode_runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flower's ClientApp process SIGINTs itself when the SuperNode refuses its task
    token (its HTTP retry on a 401, its task heartbeat); the warm executor runs in the
    node's agent, whose SIGINT stops the SuperNode: a 200-node round lost 25 nodes so.
    Its clients give up on the 401 and its heartbeat only stops, with no signal."""
    import signal

    import httpx
    from flwr.proto.runtime_pb2 import PullTaskInputRequest
    from flwr.supercore.heartbeat import make_task_heartbeat_fn_http
    from flwr.supercore.interceptors import (
        RuntimeTokenHttpInterceptor,
        RuntimeVersionHttpInterceptor,
    )
    from flwr.supercore.retry import http_retry, make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient

    from nodes.fl.warm_executor import task_heartbeat_fn

    # Flower's retry sleeps FORCE_EXIT_TIMEOUT_SECONDS + 1 after signalling: 1 s here
    monkeypatch.setattr(http_retry, "FORCE_EXIT_TIMEOUT_SECONDS", 0)
    signals: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda sig, _frame: signals.append(sig))
    try:
        ex = WarmExecutor(supernode_runtime)
        interceptors = [
            RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
            RuntimeTokenHttpInterceptor("a-token-the-supernode-never-issued"),
        ]
        client = ex._client(interceptors)
        heartbeat = task_heartbeat_fn(client)
        assert heartbeat() is True and heartbeat() is True  # stops; no retry, no signal
        with pytest.raises(httpx.HTTPStatusError) as err:
            client.PullTaskInput(PullTaskInputRequest())
        assert err.value.response.status_code == 401
        time.sleep(SETTLE_S)
        assert signals == []
        # Flower's own client and heartbeat, same SuperNode and token: the signal this
        # guards against (its retry sleeps after signalling: run it aside)
        flower = RuntimeHttpClient.from_server_address(
            server_address=supernode_runtime,
            insecure=True,
            root_certificates=None,
            interceptors=interceptors,
            retry_invoker=make_simple_http_retry_invoker(),
        )
        beat = make_task_heartbeat_fn_http(flower)

        def beat_once() -> None:
            try:
                beat()
            except httpx.HTTPStatusError:  # (its retry gives up after signalling)
                pass

        aside = threading.Thread(target=beat_once, daemon=True)
        aside.start()
        _until(lambda: bool(signals))
        assert signals == [signal.SIGINT]
        # let its retry meet the 401 again and give up while the SuperNode still
        # serves: left behind, it retries a closed port for the rest of the session
        aside.join(timeout=30.0)
        assert not aside.is_alive()
    finally:
        signal.signal(signal.SIGINT, previous)
