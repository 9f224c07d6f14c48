"""Run a serverless-function experiment (``workload.functions``) on the local backend.

Steps, each recorded:

1. **Identify**: the execution mode of every function from its source (Gaia's
   identifier, :mod:`nodes.functions.identifier`) unless the YAML overrides it.
2. **Calibrate**: each function runs a few warm requests in a fresh process on this
   host (measured wall and CPU time, payload sizes) and this host's single-thread matmul
   throughput is measured; placement estimates and the emulated GPU use them.
3. **Place** with the chosen policy (:mod:`testbed.functions.placement`).
4. **Deploy**: one function runtime process per used node
   (:mod:`nodes.functions.server`), each behind its emulated link from the request
   origin (a :class:`~testbed.emulation.proxy.ShapingProxy` with the link's spec); each
   function's first backend starts (a real, measured cold start).
5. **Load**: open-loop arrivals (Poisson, bursty or a trace) sent over HTTP through the
   links; every response is recorded as it comes (``e2e_ms`` metrics, with backend,
   timing label and node in the tags).
6. **Runtime**: every ``eval_interval_s`` (scaled) Gaia's Dynamic Function Runtime
   re-evaluates each ``cpu_preferred`` / ``gpu_preferred`` function on its p95 (the
   server-side latency for ``gaia``, as Gaia's activator metric; the end-to-end latency
   for ``gaia-link``) and switches its backend on the node; GPU slots are accounted per
   node.

Latency of a request: ``e2e_ms = (client wall - server wall) + server_ms``: the network
part is real (measured through the emulated link), the server part is the node's device
time (stretched or modelled: see :mod:`nodes.functions.server`; the label is kept).
"""

from __future__ import annotations

import http.client
import json
import queue
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nodes.functions.identifier import MODES, identify_file
from nodes.functions.worker import import_function, request_maker, worker_env
from nodes.functions.workloads import module_path
from testbed.functions.arrivals import make_arrivals
from testbed.functions.config import FunctionSpec, FunctionsSpec, RuntimeSpec
from testbed.functions.placement import Cost, Job, Placement, Site, place
from testbed.functions.runtime import DynamicRuntime, RuntimeThresholds
from testbed.procs import ProcGroup
from testbed.spec.models import Experiment, LinkSpec
from testbed.workloads.base import RunContext

START_TIMEOUT_S = 60.0


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


def calibrate(path: Path, params: dict, n: int = 5) -> dict[str, float]:
    """Measure a function on this host in a fresh process (see ``worker --calibrate``)."""
    cmd = [sys.executable, "-m", "nodes.functions.worker", "--module", str(path)]
    cmd += ["--calibrate", str(n), "--params", json.dumps(params)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=worker_env())
    if out.returncode != 0:
        raise RuntimeError(f"calibrating {path} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def origin_links(exp: Experiment, origin: str) -> dict[str, tuple[str, Any, LinkSpec]]:
    """``{node: (tier, profile, link from the origin)}`` for every node of the fleet."""
    return {
        name: (spec.tier, exp.profile_of(spec), exp.links.for_node(name, spec, origin))
        for spec in exp.fleet.nodes
        for name in spec.names()
    }


@dataclass
class NodeProc:
    name: str
    port: int  # the runtime itself (control plane)
    gpu: str | None
    proxy: Any  # ShapingProxy | None
    invoke_port: int  # where requests go: the link's proxy (or the runtime if links are off)


def _exchange(
    conn: http.client.HTTPConnection, method: str, path: str, body: bytes
) -> tuple[dict, float]:
    """One JSON request on ``conn``; returns the reply and its wall time (s)."""
    t = time.monotonic()
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    wall = time.monotonic() - t
    if resp.status != 200:
        raise RuntimeError(f"{method} {path} -> HTTP {resp.status}: {data[:200]!r}")
    return json.loads(data or b"{}"), wall


def _http(port: int, method: str, path: str, body: dict | None = None, timeout=120.0) -> dict:
    """A control-plane call on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        return _exchange(conn, method, path, json.dumps(body or {}).encode())[0]
    finally:
        conn.close()


def start_node(
    procs: ProcGroup,
    name: str,
    profile: Any,
    link: LinkSpec,
    host_gflops: float,
    gpu: str,
    run_dir: Path,
    mode: str,
    seed: int,
) -> NodeProc:
    """Start a node's function runtime and, unless links are off, its emulated link."""
    from testbed.emulation.proxy import ShapingProxy

    port_file = run_dir / "nodes" / f"{name}.port.json"
    log = run_dir / "nodes" / f"{name}.functions.log"
    cmd = [sys.executable, "-m", "nodes.functions.server", "--node", name]
    cmd += ["--profile-json", profile.model_dump_json(), "--host-gflops", str(host_gflops)]
    cmd += ["--gpu", gpu, "--port-file", str(port_file)]
    proc = procs.start(name, cmd, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"function runtime of node {name} did not start; see {log}")
        time.sleep(0.05)
    info = json.loads(port_file.read_text())
    proxy, invoke_port = None, info["port"]
    if mode != "none":
        proxy = ShapingProxy(
            f"{name}-functions", "127.0.0.1", info["port"], link.params(), seed=seed
        )
        invoke_port = proxy.start()
        if link.schedule:
            proxy.run_schedule(link.link_schedule(), time.monotonic())
    return NodeProc(name, info["port"], info["gpu"], proxy, invoke_port)


class Client:
    """Open-loop HTTP client: one keep-alive connection per (thread, port)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def post(self, port: int, path: str, body: bytes, timeout: float) -> tuple[dict, float]:
        conns = self._local.__dict__.setdefault("conns", {})
        for attempt in (0, 1):  # a kept-alive connection the server closed: retry once
            conn = conns.get(port) or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            conns[port] = conn
            try:
                return _exchange(conn, "POST", path, body)
            except (http.client.HTTPException, ConnectionError, OSError):
                conn.close()
                conns.pop(port, None)
                if attempt:
                    raise
        raise AssertionError("unreachable")


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def run_functions(ctx: RunContext) -> dict[str, Any]:
    """Run ``exp.workload.functions``; returns the run summary."""
    exp, seed, out_dir = ctx.experiment, ctx.seed, ctx.run_dir
    report, progress = ctx.metric, ctx.progress
    spec: FunctionsSpec = exp.workload.functions
    fns = spec.functions
    sites_info = origin_links(exp, spec.origin)

    def metric(name: str, value: float, fn: str, step: int | None = None, **tags: Any) -> None:
        report({"name": name, "value": value, "node": fn, "step": step, "tags": tags})

    # 1. identify (the module exists: the spec checked it)
    paths, modes, reasons = {}, {}, {}
    for fn in fns:
        paths[fn.name] = module_path(fn.module).resolve()
        decision = identify_file(paths[fn.name])
        modes[fn.name] = fn.mode or decision.mode
        reasons[fn.name] = (["mode set in the YAML"] if fn.mode else []) + list(decision.reasons)
        metric(
            "identified_mode",
            MODES.index(decision.mode),
            fn.name,
            mode=decision.mode,
            used=modes[fn.name],
            reasons=decision.reasons,
        )

    # 2. calibrate
    cal = {}
    for k, fn in enumerate(fns):
        progress(f"calibrating {fn.name}", k / len(fns))
        cal[fn.name] = calibrate(paths[fn.name], dict(fn.request))
    host_gflops = float(np.median([c["host_gflops"] for c in cal.values()]))

    # 3. arrivals, then place (the policies weigh each function's rate)
    arrivals = {
        fn.name: make_arrivals(
            fn.arrivals.kind,
            rate_rps=fn.arrivals.rate_rps,
            duration_s=spec.duration_s,
            seed=seed * 1000 + k,
            trace_path=fn.arrivals.trace,
            burst_factor=fn.arrivals.burst_factor,
            time_scale=fn.arrivals.time_scale,
        )
        for k, fn in enumerate(fns)
    }
    sites = [
        Site(name, tier, prof, link.latency_ms, link.bandwidth_mbps, prof.usable_gpu_slots)
        for name, (tier, prof, link) in sites_info.items()
    ]
    jobs = []
    for fn in fns:
        c = cal[fn.name]
        cost = Cost(c["wall_s"], c["cpu_s"], c["request_bytes"], c["response_bytes"])
        rate = len(arrivals[fn.name]) / spec.duration_s
        jobs.append(Job(fn.name, modes[fn.name], fn.slo_ms, cost, rate, fn.node))
    placements: dict[str, Placement] = place(spec.policy, jobs, sites, host_gflops)
    slots_free = {name: prof.usable_gpu_slots for name, (_t, prof, _l) in sites_info.items()}
    for pl in placements.values():
        slots_free[pl.node] -= pl.backend == "gpu"

    procs = ProcGroup()
    nodes: dict[str, NodeProc] = {}
    pool = ThreadPoolExecutor(max_workers=48, thread_name_prefix="fn-client")
    stop = threading.Event()
    try:
        # 4. deploy
        used = sorted({pl.node for pl in placements.values()})
        for k, name in enumerate(used):
            progress(f"starting node {name}", k / len(used))
            _tier, prof, link = sites_info[name]
            nodes[name] = start_node(
                procs, name, prof, link, host_gflops, spec.gpu, out_dir, exp.links.mode, seed
            )
        makers = {fn.name: request_maker(import_function(paths[fn.name])) for fn in fns}

        def deploy(fn: FunctionSpec) -> dict:
            pl = placements[fn.name]
            body = {
                "module": str(paths[fn.name]),
                "backend": pl.backend,
                "warmup": makers[fn.name](dict(fn.request), 0),
            }
            return _http(nodes[pl.node].port, "POST", f"/deploy/{fn.name}", body,
                         START_TIMEOUT_S * 3)  # fmt: skip

        with ThreadPoolExecutor(max_workers=4) as dep:
            cold = dict(zip([fn.name for fn in fns], dep.map(deploy, fns), strict=True))
        for fn in fns:
            pl, rec = placements[fn.name], cold[fn.name]
            metric("cold_start_s", rec["cold_start_s"], fn.name, backend=rec["backend"],
                   site=pl.node, phase="deploy")  # fmt: skip
            metric("on_gpu", float(pl.backend == "gpu"), fn.name, site=pl.node,
                   reason="placement: " + pl.reason)  # fmt: skip

        # 5. load: a scheduler thread submits each arrival to the client pool
        runtimes = {
            fn.name: DynamicRuntime(modes[fn.name], thresholds_for(fn, spec.runtime), 0.0)
            for fn in fns
            if placements[fn.name].dynamic
        }
        events = sorted(
            (float(t), k, i) for k, fn in enumerate(fns) for i, t in enumerate(arrivals[fn.name])
        )
        results: queue.Queue = queue.Queue()
        client = Client()
        timeout_s = max(60.0, 20 * max(f.slo_ms for f in fns) / 1000)

        def send(k: int, i: int, t_sched: float) -> None:
            fn = fns[k]
            node = nodes[placements[fn.name].node]
            body = json.dumps(makers[fn.name](dict(fn.request), i + 1)).encode()
            try:
                res, wall = client.post(node.invoke_port, f"/invoke/{fn.name}", body, timeout_s)
                results.put((k, i, t_sched, res, wall))
            except Exception as exc:  # recorded, never lost
                results.put((k, i, t_sched, f"{type(exc).__name__}: {exc}", None))

        t0 = time.monotonic()

        def schedule() -> None:
            for t, k, i in events:
                delay = t0 + t - time.monotonic()
                if delay > 0 and stop.wait(delay):
                    return
                pool.submit(send, k, i, t)

        threading.Thread(target=schedule, name="fn-load", daemon=True).start()

        lat: dict[str, list[float]] = {fn.name: [] for fn in fns}
        timings: dict[str, set[tuple[str, str]]] = {fn.name: set() for fn in fns}
        counts = {"ok": 0, "error": 0}

        def on_response(k: int, i: int, t_sched: float, res: dict | str, wall: float | None):
            fn = fns[k]
            if wall is None:  # res is the error
                counts["error"] += 1
                metric("request_error", 1.0, fn.name, i, error=res, t_s=t_sched)
                return
            counts["ok"] += 1
            network_ms = wall * 1e3 - res["server_wall_ms"]
            e2e = network_ms + res["server_ms"]
            lat[fn.name].append(e2e)
            timings[fn.name].add((res["backend"], res["timing"]))
            metric("e2e_ms", e2e, fn.name, i, t_s=t_sched, backend=res["backend"],
                   timing=res["timing"], server_ms=res["server_ms"], network_ms=network_ms,
                   site=placements[fn.name].node, error=res["error"])  # fmt: skip
            rt = runtimes.get(fn.name)
            if rt is not None and res["backend"].startswith(rt.backend):  # current revision
                seen = e2e if placements[fn.name].observe == "e2e" else res["server_ms"]
                rt.observe(time.monotonic() - t0, seen)

        # 6. runtime: every eval interval, Gaia's decisions; a switch runs in a thread
        pending: set[str] = set()
        switched: queue.Queue = queue.Queue()

        def switch(name: str, node: str, backend: str) -> None:
            try:
                rec = _http(nodes[node].port, "POST", f"/switch/{name}", {"backend": backend},
                            START_TIMEOUT_S * 3)  # fmt: skip
                switched.put((name, node, backend, rec, None))
            except Exception as exc:
                switched.put((name, node, backend, None, f"{type(exc).__name__}: {exc}"))

        def on_switched(name: str, node: str, backend: str, rec: dict | None, err: str | None):
            pending.discard(name)
            if backend == "cpu":
                slots_free[node] += 1  # the GPU backend is gone
            if err:
                metric("switch_error", 1.0, name, site=node, backend=backend, error=err)
            else:
                metric("cold_start_s", rec["cold_start_s"], name, site=node,
                       backend=rec["backend"], phase="switch")  # fmt: skip

        def evaluate(now: float) -> None:
            for name, rt in runtimes.items():
                if name in pending:
                    continue
                node = placements[name].node
                free = slots_free[node] > 0 and nodes[node].gpu is not None
                d = rt.evaluate(now, gpu_available=free)
                if d is None:
                    continue
                metric("mode_decision", float(d.applied), name, old=d.old, new=d.new,
                       reason=d.reason, p95_ms=d.p95_ms, rate_rps=d.rate_rps, t_s=now)  # fmt: skip
                if not d.applied:
                    continue
                metric("on_gpu", float(rt.backend == "gpu"), name, site=node, reason=d.reason)
                slots_free[node] -= rt.backend == "gpu"
                pending.add(name)
                threading.Thread(target=switch, args=(name, node, rt.backend), daemon=True).start()

        eval_every = spec.runtime.eval_interval_s * spec.runtime.time_scale
        next_eval = eval_every
        give_up_s = spec.duration_s + timeout_s + 60.0  # every request has answered by then
        while counts["ok"] + counts["error"] < len(events):
            try:
                on_response(*results.get(timeout=0.1))
            except queue.Empty:
                if time.monotonic() - t0 > give_up_s:
                    break
            while not switched.empty():
                on_switched(*switched.get())
            now = time.monotonic() - t0
            if now >= next_eval:
                next_eval += eval_every
                evaluate(now)
                progress("load", min(1.0, now / spec.duration_s))
        deadline = time.monotonic() + START_TIMEOUT_S * 3
        while pending and time.monotonic() < deadline:  # let started switches finish
            try:
                on_switched(*switched.get(timeout=0.5))
            except queue.Empty:
                pass
        wall_load = time.monotonic() - t0
        stats = {name: _http(n.port, "GET", "/stats") for name, n in nodes.items()}
    finally:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        for n in nodes.values():
            if n.proxy is not None:
                n.proxy.stop()
        procs.stop_all(timeout_s=15)

    # summary
    per_fn = {}
    for fn in fns:
        pl = placements[fn.name]
        st = stats[pl.node]["functions"][fn.name]
        v = lat[fn.name]
        rt = runtimes.get(fn.name)
        misses = int(sum(x > fn.slo_ms for x in v))
        per_fn[fn.name] = {
            "node": pl.node,
            "tier": sites_info[pl.node][0],
            "mode": modes[fn.name],
            "mode_reasons": reasons[fn.name],
            "start_backend": pl.backend,
            "end_backend": st["backend"],
            "dynamic": pl.dynamic,
            "placement": pl.reason,
            "estimate_ms": pl.estimate_ms,
            "requests": len(v),
            "errors": st["errors"],
            "p50_ms": percentile(v, 50),
            "p95_ms": percentile(v, 95),
            "slo_ms": fn.slo_ms,
            "slo_violations": misses,
            "slo_violation_pct": 100.0 * misses / max(1, len(v)),
            "gpu_seconds": st["gpu_seconds"],
            "timing": sorted(f"{b}: {t}" for b, t in timings[fn.name]),
            "switches": sum(d.applied for d in rt.decisions) if rt else 0,
            "cold_starts": st["cold_starts"],
            "host_cost_ms": {
                "wall": cal[fn.name]["wall_s"] * 1e3,
                "cpu": cal[fn.name]["cpu_s"] * 1e3,
            },
        }
    gpu_used = {b for seen in timings.values() for b, _t in seen if b.startswith("gpu-")}
    summary = {
        "policy": spec.policy,
        "functions": per_fn,
        "host_gflops": host_gflops,
        "gpu_backend": sorted(gpu_used) or None,
        "gpu_timing": "emulated (modelled from profile)"
        if "gpu-emulated" in gpu_used
        else ("measured (CUDA)" if gpu_used else None),
        "requests_ok": counts["ok"],
        "requests_failed": counts["error"],
        "requests_unanswered": len(events) - counts["ok"] - counts["error"],
        "load_wall_s": wall_load,
        "gpu_seconds": sum(f["gpu_seconds"] for f in per_fn.values()),
    }
    (out_dir / "functions.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary
