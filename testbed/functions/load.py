"""The load phase of a functions run: open-loop arrivals over HTTP through the nodes'
links, every response recorded as it comes, and Gaia's Dynamic Function Runtime
switching backends every evaluation interval.

Latency of a request: ``e2e_ms = (client wall - server wall) + server_ms``: the network
part is real (measured through the emulated link), the server part is the node's device
time (stretched or modelled: see :mod:`nodes.functions.server`; the label is kept).
"""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kernel.dilation import emulated, wall
from testbed.functions.config import FunctionSpec, RuntimeSpec
from testbed.functions.placement import Placement
from testbed.functions.runtime import DynamicRuntime, RuntimeThresholds

START_TIMEOUT_S = 60.0
Metric = Callable[..., None]  # metric(name, value, fn, step=None, **tags)


@dataclass(frozen=True)
class FunctionNode:
    """A node running the function runtime.

    Attributes
    ----------
    name : str
        The node's name.
    port : int
        The runtime itself (control plane: deploy, switch, stats), at ``host``.
    gpu : str or None
        The node's GPU backend (None: no GPU).
    invoke_port : int
        Where requests go: the node's link from the origin (the runtime without links).
    host : str
        Where the runtime serves, as the runner reaches it (swarm: its engine's address).
    """

    name: str
    port: int
    gpu: str | None
    invoke_port: int
    host: str = "127.0.0.1"


def exchange(
    conn: http.client.HTTPConnection, method: str, path: str, body: bytes
) -> tuple[dict[str, Any], float]:
    """One JSON request on ``conn``; returns the reply and its wall time (s)."""
    t = time.monotonic()
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    took = time.monotonic() - t
    if resp.status != 200:
        raise RuntimeError(f"{method} {path} -> HTTP {resp.status}: {data[:200]!r}")
    reply: dict[str, Any] = json.loads(data or b"{}")
    return reply, took


def http_call(
    port: int,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    timeout: float = 120.0,
    host: str = "127.0.0.1",
) -> dict[str, Any]:
    """A control-plane call on a fresh connection to ``host:port``."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        return exchange(conn, method, path, json.dumps(body or {}).encode())[0]
    finally:
        conn.close()


class Client:
    """Open-loop HTTP client: one keep-alive connection per (thread, port)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def post(
        self, port: int, path: str, body: bytes, timeout: float
    ) -> tuple[dict[str, Any], float]:
        conns: dict[int, http.client.HTTPConnection] = self._local.__dict__.setdefault("conns", {})
        for attempt in (0, 1):  # a kept-alive connection the server closed: retry once
            conn = conns.get(port) or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            conns[port] = conn
            try:
                return exchange(conn, "POST", path, body)
            except (http.client.HTTPException, ConnectionError, OSError):
                conn.close()
                conns.pop(port, None)
                if attempt:
                    raise
        raise AssertionError("unreachable")


def thresholds_for(fn: FunctionSpec, rt: RuntimeSpec) -> RuntimeThresholds:
    """Gaia's thresholds for one function: durations x time_scale, latencies from its SLO."""
    base = RuntimeThresholds(
        eval_interval_s=rt.eval_interval_s,
        window_s=rt.window_s,
        long_window_s=rt.long_window_s,
        rate_window_s=rt.rate_window_s,
        low_rate_window_s=rt.low_rate_window_s,
        cold_start_wait_s=rt.cold_start_wait_s,
        upper_bound_ms=fn.slo_ms,
        low_rate_upper_bound_ms=rt.low_rate_upper_bound_ms or 2.0 * fn.slo_ms,
        gap_ms=rt.gap_ms if rt.gap_ms is not None else 0.2 * fn.slo_ms,
        low_rate_rps=rt.low_rate_rps,
        too_low_rps=rt.too_low_rps,
        lock_gpu_ms=rt.lock_gpu_ms or 100.0 * fn.slo_ms,
    )
    return base.scaled(rt.time_scale)


@dataclass(frozen=True)
class LoadPlan:
    """What the load phase sends, and where.

    Attributes
    ----------
    functions : tuple[FunctionSpec, ...]
        The functions, in spec order.
    arrivals : Mapping[str, Sequence[float]]
        Function -> send times (s from load start).
    placements : Mapping[str, Placement]
        Function -> where it runs and how.
    modes : Mapping[str, str]
        Function -> execution mode (Gaia's identifier or the YAML).
    requests : Mapping[str, Callable[[dict, int], Any]]
        Function -> builds request ``i``'s body from the YAML's request parameters.
    runtime : RuntimeSpec
        Gaia's runtime settings.
    duration_s : float
        Load duration, s.
    """

    functions: tuple[FunctionSpec, ...]
    arrivals: Mapping[str, Any]
    placements: Mapping[str, Placement]
    modes: Mapping[str, str]
    requests: Mapping[str, Callable[[dict[str, Any], int], Any]]
    runtime: RuntimeSpec
    duration_s: float

    @property
    def timeout_s(self) -> float:
        """Per-request timeout: 20 x the largest SLO, at least 60 s."""
        return max(60.0, 20 * max(f.slo_ms for f in self.functions) / 1000)


class LoadRun:
    """Send the arrivals, record every response, let the runtime switch backends.

    Parameters
    ----------
    plan : LoadPlan
        What to send and where.
    nodes : Mapping[str, FunctionNode]
        The started nodes by name.
    slots_free : dict[str, int]
        GPU slots still free per node (after placement).
    metric, progress
        Where records and progress go.
    tick : Callable[[], None]
        Called every loop iteration (the chaos engine's timers and live injections).
    redeploy : Callable[[str, str], dict] or None
        Deploys function ``name`` on backend ``backend`` of its node again (a node that
        restarted after an outage comes back with no functions: its first 404 for the
        function triggers this; the cold start is recorded with ``phase: redeploy``).
    """

    def __init__(
        self,
        plan: LoadPlan,
        nodes: Mapping[str, FunctionNode],
        slots_free: dict[str, int],
        metric: Metric,
        progress: Callable[[str, float], None],
        tick: Callable[[], None],
        redeploy: Callable[[str, str], dict[str, Any]] | None = None,
    ) -> None:
        self.plan, self.nodes, self.slots_free = plan, nodes, slots_free
        self.metric, self.progress, self.tick = metric, progress, tick
        self.redeploy = redeploy
        self.redeploying: set[str] = set()
        self.redeployed: queue.Queue[tuple[str, str, Any, str | None]] = queue.Queue()
        fns = plan.functions
        self.runtimes = {
            fn.name: DynamicRuntime(plan.modes[fn.name], thresholds_for(fn, plan.runtime), 0.0)
            for fn in fns
            if plan.placements[fn.name].dynamic
        }
        self.events = sorted(
            (float(t), k, i)
            for k, fn in enumerate(fns)
            for i, t in enumerate(plan.arrivals[fn.name])
        )
        self.results: queue.Queue[tuple[int, int, float, Any, float | None]] = queue.Queue()
        self.switched: queue.Queue[tuple[str, str, str, Any, str | None]] = queue.Queue()
        self.pending: set[str] = set()
        self.answered = 0
        self.client = Client()
        self.pool = ThreadPoolExecutor(max_workers=48, thread_name_prefix="fn-client")
        self.stopped = threading.Event()
        self.t0 = 0.0

    # -- sending ----------------------------------------------------------------------
    def _send(self, k: int, i: int, t_sched: float) -> None:
        fn = self.plan.functions[k]
        node = self.nodes[self.plan.placements[fn.name].node]
        body = json.dumps(self.plan.requests[fn.name](dict(fn.request), i + 1)).encode()
        try:
            res, took = self.client.post(
                node.invoke_port, f"/invoke/{fn.name}", body, wall(self.plan.timeout_s)
            )
            self.results.put((k, i, t_sched, res, took))
        except Exception as exc:  # recorded, never lost
            self.results.put((k, i, t_sched, f"{type(exc).__name__}: {exc}", None))

    def _schedule(self) -> None:
        for t, k, i in self.events:  # (t: emulated s; sent at TDF x t on the wall)
            delay = self.t0 + wall(t) - time.monotonic()
            if delay > 0 and self.stopped.wait(delay):
                return
            self.pool.submit(self._send, k, i, t)

    # -- responses ----------------------------------------------------------------------
    def _on_response(self, k: int, i: int, t_sched: float, res: Any, took: float | None) -> None:
        fn = self.plan.functions[k]
        self.answered += 1
        if took is None:  # res is the error
            self.metric("request_error", 1.0, fn.name, i, error=res, t_s=t_sched)
            if "HTTP 404" in str(res) and "no function" in str(res):
                self._recover(fn.name)  # its node restarted empty
            return
        # the network's share measured on the wall clock, in emulated ms; the server's
        # on its virtual clock, emulated already
        network_ms = emulated(took * 1e3 - res["server_wall_ms"])
        e2e = network_ms + res["server_ms"]
        pl = self.plan.placements[fn.name]
        self.metric("e2e_ms", e2e, fn.name, i, t_s=t_sched, backend=res["backend"],
                    timing=res["timing"], server_ms=res["server_ms"], network_ms=network_ms,
                    site=pl.node, error=res["error"])  # fmt: skip
        rt = self.runtimes.get(fn.name)
        if rt is not None and res["backend"].startswith(rt.backend):  # current revision
            seen = e2e if pl.observe == "e2e" else res["server_ms"]
            rt.observe(emulated(time.monotonic() - self.t0), seen)

    # -- a restarted node's functions -------------------------------------------------------
    def _recover(self, name: str) -> None:
        """Deploy ``name`` again on its node (once at a time), on its current backend."""
        if self.redeploy is None or name in self.redeploying:
            return
        self.redeploying.add(name)
        rt = self.runtimes.get(name)
        backend = rt.backend if rt is not None else self.plan.placements[name].backend
        threading.Thread(target=self._redeploy, args=(name, backend), daemon=True).start()

    def _redeploy(self, name: str, backend: str) -> None:
        assert self.redeploy is not None
        try:
            self.redeployed.put((name, backend, self.redeploy(name, backend), None))
        except Exception as exc:
            self.redeployed.put((name, backend, None, f"{type(exc).__name__}: {exc}"))

    def _on_redeployed(self, name: str, backend: str, rec: Any, err: str | None) -> None:
        self.redeploying.discard(name)
        site = self.plan.placements[name].node
        if err:
            self.metric("redeploy_error", 1.0, name, site=site, backend=backend, error=err)
        else:
            self.metric("cold_start_s", rec["cold_start_s"], name, site=site,
                        backend=rec["backend"], phase="redeploy")  # fmt: skip

    # -- the runtime's switches -----------------------------------------------------------
    def _switch(self, name: str, node: str, backend: str) -> None:
        try:
            n = self.nodes[node]
            rec = http_call(n.port, "POST", f"/switch/{name}", {"backend": backend},
                            START_TIMEOUT_S * 3, host=n.host)  # fmt: skip
            self.switched.put((name, node, backend, rec, None))
        except Exception as exc:
            self.switched.put((name, node, backend, None, f"{type(exc).__name__}: {exc}"))

    def _on_switched(self, name: str, node: str, backend: str, rec: Any, err: str | None) -> None:
        self.pending.discard(name)
        if backend == "cpu":
            self.slots_free[node] += 1  # the GPU backend is gone
        if err:
            self.metric("switch_error", 1.0, name, site=node, backend=backend, error=err)
        else:
            self.metric("cold_start_s", rec["cold_start_s"], name, site=node,
                        backend=rec["backend"], phase="switch")  # fmt: skip

    def _evaluate(self, now: float) -> None:
        """Gaia's decision for every dynamic function not already switching."""
        for name, rt in self.runtimes.items():
            if name in self.pending:
                continue
            node = self.plan.placements[name].node
            free = self.slots_free[node] > 0 and self.nodes[node].gpu is not None
            d = rt.evaluate(now, gpu_available=free)
            if d is None:
                continue
            self.metric("mode_decision", float(d.applied), name, old=d.old, new=d.new,
                        reason=d.reason, p95_ms=d.p95_ms, rate_rps=d.rate_rps, t_s=now)  # fmt: skip
            if d.applied:
                self._apply(name, node, rt, d.reason)

    def _apply(self, name: str, node: str, rt: DynamicRuntime, reason: str) -> None:
        self.metric("on_gpu", float(rt.backend == "gpu"), name, site=node, reason=reason)
        self.slots_free[node] -= rt.backend == "gpu"
        self.pending.add(name)
        threading.Thread(target=self._switch, args=(name, node, rt.backend), daemon=True).start()

    # -- the loop -----------------------------------------------------------------------
    def _step(self, give_up_s: float) -> bool:
        """Handle one response (or wait 0.1 s); False once it is time to give up."""
        try:
            self._on_response(*self.results.get(timeout=0.1))
        except queue.Empty:
            if emulated(time.monotonic() - self.t0) > give_up_s:
                return False
        while not self.switched.empty():
            self._on_switched(*self.switched.get())
        while not self.redeployed.empty():
            self._on_redeployed(*self.redeployed.get())
        self.tick()
        return True

    def run(self) -> float:
        """Run the load until every request has answered; return its wall time (s). The
        runtime's evaluations and the give-up time are in emulated seconds."""
        self.t0 = time.monotonic()
        threading.Thread(target=self._schedule, name="fn-load", daemon=True).start()
        every = self.plan.runtime.eval_interval_s * self.plan.runtime.time_scale
        next_eval = every
        give_up_s = self.plan.duration_s + self.plan.timeout_s + 60.0  # all answered by then
        while self.answered < len(self.events) and self._step(give_up_s):
            now = emulated(time.monotonic() - self.t0)
            if now >= next_eval:
                next_eval += every
                self._evaluate(now)
                self.progress("load", min(1.0, now / self.plan.duration_s))
        self._drain_switches()
        return time.monotonic() - self.t0

    def _drain_switches(self) -> None:
        """Let switches already started finish (bounded)."""
        deadline = time.monotonic() + START_TIMEOUT_S * 3
        while self.pending and time.monotonic() < deadline:
            try:
                self._on_switched(*self.switched.get(timeout=0.5))
            except queue.Empty:
                pass

    def close(self) -> None:
        """Stop sending; abandon queued requests."""
        self.stopped.set()
        self.pool.shutdown(wait=False, cancel_futures=True)
