"""A warm executor for a SuperNode in ``--isolation process`` mode.

Bare Flower's SuperExec starts a fresh ``flwr-clientapp`` process for every message
(train and evaluate, every round), and each start re-imports torch and reloads the data
(NOTES.md: ~3 s alone, 13-17 s when four start at once on 2 cores). Flower's
``--isolation process`` lets an external process acquire tasks from the SuperNode's
Runtime API instead. This module is that process, kept warm: it acquires each
ClientApp task and runs it in-process with Flower's own task protocol
(``pull_task_input`` / ``push_message`` / ``push_task_output`` from
``flwr.supernode.runtime.run_clientapp``), caching the installed FAB and the loaded
ClientApp by FAB hash. The message protocol between SuperLink and SuperNode is
untouched.

Flower's ClientApp process ends itself (SIGINT to its own pid) when the SuperNode no
longer knows its task token: a 401 in Flower's HTTP retry, or a task heartbeat the
SuperNode refuses. Here that process is the node's agent, whose SIGINT stops the
SuperNode too, so the executor's clients give up on a 401 instead and its task
heartbeat only stops: the task is reported failed (or its report fails, logged) and
the node stays in the fleet. Measured 2026-11-29: in a 200-node round the heartbeat of
a task that had just reported its output got a 401 and 25 nodes left the fleet.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flwr.clientapp.client_app import ClientApp
    from flwr.supercore.fab import Fab
    from flwr.supercore.run import Run
    from flwr.supercore.runtime import RuntimeHttpClient

log = logging.getLogger("testbed.warm_executor")


class WarmExecutor:
    """Acquire and run ClientApp tasks in this process.

    Parameters
    ----------
    runtime_api_address : str
        ``host:port`` of the SuperNode's Runtime API (its ``--port``).
    poll_interval_s : float
        Sleep between empty ``AcquireTask`` polls, seconds.
    on_task : callable, optional
        Called with ``(task_id, duration_s, ok)`` after each task.
    wake_fd : int, optional
        Read end of a pipe the SuperNode writes to when a task is ready, i.e. stored
        with all its objects (:func:`nodes.fl.timing.notify_task_ready`): the executor
        then polls at once, and otherwise only every ``poll_interval_s`` (a fallback).
        With a pipe it also waits for a wake-up after each task instead of polling
        straight away: Flower creates a task before its SuperNode has pulled the
        message's objects, and an executor that acquired it that early would pull the
        missing objects from its SuperNode again and again (``fast`` mode's short
        back-off) until they were there.
    """

    def __init__(
        self,
        runtime_api_address: str,
        poll_interval_s: float = 0.2,
        on_task: Callable[[int, float, bool], None] | None = None,
        wake_fd: int | None = None,
    ) -> None:
        self.address = runtime_api_address
        self.poll_interval_s = poll_interval_s
        self.on_task = on_task
        self.wake_fd = wake_fd
        self._stop_r, self._stop_w = os.pipe()  # stop() ends a wait on wake_fd at once
        self.stop_event = threading.Event()
        self._apps: dict[str, ClientApp] = {}
        self.tasks_run = 0

    def _client(self, interceptors: list[Any], stoppable: bool = False) -> RuntimeHttpClient:
        """A Runtime API client with Flower's retries; a ``stoppable`` one (the polling
        client) gives up and stops waiting between retries once :meth:`stop` is called."""
        from flwr.supercore.retry import make_simple_http_retry_invoker
        from flwr.supercore.runtime import RuntimeHttpClient

        invoker = make_simple_http_retry_invoker()
        giveup = invoker.should_giveup

        def should_giveup(exc: Exception) -> bool:
            if _unauthorized(exc):  # (Flower's would SIGINT this process: the agent)
                return True
            return (stoppable and self.stop_event.is_set()) or bool(giveup and giveup(exc))

        invoker.should_giveup = should_giveup
        if stoppable:

            def wait_function(seconds: float) -> None:  # Flower's back-off, interruptible
                self.stop_event.wait(seconds)

            invoker.wait_function = wait_function
        return RuntimeHttpClient.from_server_address(
            server_address=self.address,
            insecure=True,
            root_certificates=None,
            interceptors=interceptors,
            retry_invoker=invoker,
        )

    def serve(self) -> None:
        """Poll for tasks until :meth:`stop`; each task runs to completion."""
        from flwr.proto.runtime_pb2 import AcquireTaskRequest  # noqa: I001
        from flwr.supercore.constant import TaskType
        from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor

        client = self._client(
            [RuntimeVersionHttpInterceptor(component_name="SuperExec")], stoppable=True
        )
        req = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP.value])
        try:
            while not self.stop_event.is_set():
                try:
                    res = client.AcquireTask(req)
                except Exception as err:  # SuperNode restarting: wait and retry
                    log.debug("AcquireTask failed: %s", err)
                    self.stop_event.wait(0.5)
                    continue
                if res.HasField("task") and res.token:
                    t0 = time.perf_counter()
                    ok = self.run_task(res.token)
                    self.tasks_run += 1
                    if self.on_task:
                        self.on_task(res.task.task_id, time.perf_counter() - t0, ok)
                    if self.wake_fd is None:
                        continue  # poll again at once (a wake-up pipe: wait for it)
                self._idle()
        finally:
            client.close()

    def _idle(self) -> None:
        """Wait ``poll_interval_s`` between empty polls, or until the SuperNode wakes us."""
        if self.wake_fd is None:
            self.stop_event.wait(self.poll_interval_s)
            return
        ready, _, _ = select.select([self.wake_fd, self._stop_r], [], [], self.poll_interval_s)
        if self.wake_fd in ready:
            try:
                os.read(self.wake_fd, 4096)  # every pending wake-up: one poll serves them
            except BlockingIOError:
                pass

    def stop(self) -> None:
        """Ask :meth:`serve` to return after the current task."""
        self.stop_event.set()
        try:
            os.write(self._stop_w, b"!")
        except OSError:  # (already closed)
            pass

    def _load(self, run: Run, fab: Fab) -> ClientApp:
        """Install the FAB and load its ClientApp once per FAB hash."""
        from flwr.cli.install import install_from_fab
        from flwr.clientapp.utils import get_load_client_app_fn
        from flwr.common.config import get_project_dir

        key = fab.hash_str
        if key not in self._apps:
            if not get_project_dir(run.fab_id, run.fab_version, key).exists():
                install_from_fab(fab.content, skip_prompt=True)
            load = get_load_client_app_fn(default_app_ref="", app_path=None, multi_app=True)
            self._apps[key] = load(run.fab_id, run.fab_version, key)
        return self._apps[key]

    def run_task(self, token: str) -> bool:
        """Run one ClientApp task with Flower's task protocol; True on success."""
        from flwr.app import Message
        from flwr.app.error import Error
        from flwr.common.constant import ErrorCode, SubStatus
        from flwr.supercore.heartbeat import HeartbeatSender
        from flwr.supercore.interceptors import (
            RuntimeTokenHttpInterceptor,
            RuntimeVersionHttpInterceptor,
        )
        from flwr.supernode.runtime.run_clientapp import (
            pull_task_input,
            push_message,
            push_task_output,
        )

        client = self._client(
            [
                RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
                RuntimeTokenHttpInterceptor(token),
            ]
        )
        heartbeat = HeartbeatSender(task_heartbeat_fn(client))
        heartbeat.start()
        message = context = reply = None
        status, details = SubStatus.FAILED, "ClientApp task failed"
        t = [time.perf_counter()]
        try:
            message, context, run, fab = pull_task_input(client)
            t.append(time.perf_counter())
            app = self._load(run, fab)
            t.append(time.perf_counter())
            reply = app(message=message, context=context)
            t.append(time.perf_counter())
            status, details = SubStatus.COMPLETED, ""
        except Exception as ex:  # report to Flower as its own clientapp would
            log.exception("ClientApp raised")
            details = f"{type(ex)}:<'{ex}'>"
            if message is not None:
                reply = Message(
                    Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details),
                    reply_to=message,
                )
        finally:
            try:
                if reply is not None and context is not None:
                    push_message(client, reply, context)
                heartbeat.stop()  # (before the token ends with the task's output)
                push_task_output(client, context, status, details)
                t.append(time.perf_counter())
            except Exception as ex:  # noqa: BLE001 - the SuperNode ended the task: logged
                log.error("task %s could not be reported to the SuperNode: %s", status, ex)
                status = SubStatus.FAILED
            finally:
                if heartbeat.is_running:
                    heartbeat.stop()
                client.close()
            phases = ("pull", "load", "run", "push")
            log.info(
                "task %s: %s",
                status,
                " ".join(f"{p}={b - a:.3f}s" for p, a, b in zip(phases, t, t[1:], strict=False)),
            )
        return status == SubStatus.COMPLETED


def _unauthorized(exc: Exception) -> bool:
    """A 401 from the SuperNode's Runtime API: it no longer knows the task's token."""
    import httpx

    return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code == 401


def task_heartbeat_fn(client: RuntimeHttpClient) -> Callable[[], bool]:
    """Flower's task heartbeat (``make_task_heartbeat_fn_http``) without its SIGINT to
    this process: once the SuperNode refuses the task's token (a 401 or ``success:
    false``) the heartbeat stops sending, logged, and the task ends by its own next call.
    """
    import httpx
    from flwr.proto.runtime_pb2 import SendTaskHeartbeatRequest

    req = SendTaskHeartbeatRequest()
    lost = threading.Event()

    def fn() -> bool:
        if lost.is_set():
            return True
        try:
            res = client.SendTaskHeartbeat(req)
        except httpx.TransportError:
            return False
        except httpx.HTTPStatusError as err:
            if err.response.status_code in (503, 504):
                return False
            if err.response.status_code != 401:
                raise
            res = None
        if res is None or not res.success:
            lost.set()
            log.warning("task heartbeat refused by the SuperNode: the task's token ended")
        return True

    return fn
