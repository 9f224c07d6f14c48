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
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nodes.functions.identifier import identify_file
from nodes.functions.worker import import_function
from nodes.functions.workloads import module_path
from testbed.functions.arrivals import make_arrivals
from testbed.functions.config import FunctionSpec, FunctionsSpec, RuntimeSpec
from testbed.functions.placement import Cost, Job, Placement, Site, place
from testbed.functions.runtime import DynamicRuntime, RuntimeThresholds
from testbed.spec.models import Experiment, LinkSpec

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
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"calibrating {path} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def origin_links(exp: Experiment, origin: str) -> dict[str, tuple[str, Any, LinkSpec]]:
    """``{node: (tier, profile, link from the origin)}`` for every node of the fleet."""
    out = {}
    for spec in exp.fleet.nodes:
        for name in spec.names():
            link = (
                exp.links.nodes.get(name)
                or exp.links.nodes.get(spec.id)
                or exp.links.for_pair(origin, spec.tier)
            )
            out[name] = (spec.tier, exp.profile_of(spec), link)
    return out


@dataclass
class NodeProc:
    name: str
    proc: subprocess.Popen
    port: int
    gpu: str | None
    proxy: Any  # ShapingProxy | None
    invoke_port: int


def _http(port: int, method: str, path: str, body: dict | None = None, timeout=120.0) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body or {}).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = json.loads(resp.read() or b"{}")
        if resp.status != 200:
            raise RuntimeError(f"{method} {path} -> {resp.status}: {payload.get('error')}")
        return payload
    finally:
        conn.close()


def start_node(
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
    port_file.parent.mkdir(parents=True, exist_ok=True)
    log = open(run_dir / "nodes" / f"{name}.functions.log", "w")  # noqa: SIM115
    cmd = [sys.executable, "-m", "nodes.functions.server", "--node", name]
    cmd += ["--profile-json", profile.model_dump_json(), "--host-gflops", str(host_gflops)]
    cmd += ["--gpu", gpu, "--port-file", str(port_file)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"function runtime of node {name} did not start; see {log.name}")
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
    return NodeProc(name, proc, info["port"], info["gpu"], proxy, invoke_port)


def stop_node(n: NodeProc) -> None:
    if n.proxy is not None:
        n.proxy.stop()
    if n.proc.poll() is None:
        n.proc.terminate()
        try:
            n.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            n.proc.kill()
            n.proc.wait()


class Client:
    """Open-loop HTTP client: one keep-alive connection per (thread, port)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def post(self, port: int, path: str, body: bytes, timeout: float) -> tuple[dict, float]:
        conns = self._local.__dict__.setdefault("conns", {})
        for attempt in (0, 1):
            conn = conns.get(port) or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            conns[port] = conn
            t = time.monotonic()
            try:
                conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                wall = time.monotonic() - t
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
                return json.loads(data), wall
            except (http.client.HTTPException, ConnectionError, OSError):
                conn.close()
                conns.pop(port, None)
                if attempt:
                    raise
        raise AssertionError("unreachable")


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def run_functions(
    exp: Experiment,
    seed: int,
    out_dir: Path,
    report: Callable[[dict], None],
    progress: Callable[[str, float], None],
) -> dict[str, Any]:
    """Run ``exp.workload.functions``; returns the run summary."""
    spec: FunctionsSpec = exp.workload.functions
    fns = spec.functions
    sites_info = origin_links(exp, spec.origin)

    # 1. identify
    paths, modes, reasons = {}, {}, {}
    for i, fn in enumerate(fns):
        p = module_path(fn.module)
        if not p.is_file():
            raise ValueError(
                f"workload.functions.functions.{i}.module: {fn.module!r} is neither a built-in "
                f"function (matmul, cnn, textgen, idle) nor an existing file"
            )
        paths[fn.name] = p.resolve()
        decision = identify_file(p)
        modes[fn.name] = fn.mode or decision.mode
        reasons[fn.name] = (["mode set in the YAML"] if fn.mode else []) + list(decision.reasons)
        report(
            {
                "name": "identified_mode",
                "value": ["cpu", "cpu_preferred", "gpu_preferred", "gpu"].index(decision.mode),
                "node": fn.name,
                "tags": {
                    "mode": decision.mode,
                    "used": modes[fn.name],
                    "reasons": decision.reasons,
                },
            }
        )

    # 2. calibrate
    costs, cal = {}, {}
    for k, fn in enumerate(fns):
        progress(f"calibrating {fn.name}", k / len(fns))
        cal[fn.name] = calibrate(paths[fn.name], dict(fn.request))
        c = cal[fn.name]
        costs[fn.name] = Cost(c["wall_s"], c["cpu_s"], c["request_bytes"], c["response_bytes"])
    host_gflops = float(np.median([c["host_gflops"] for c in cal.values()]))

    # 3. place
    sites = [
        Site(
            name,
            tier,
            prof,
            link.latency_ms,
            link.bandwidth_mbps,
            prof.gpu_slots if prof.has_gpu else 0,
        )
        for name, (tier, prof, link) in sites_info.items()
    ]
    arrivals = {}
    for k, fn in enumerate(fns):
        a = fn.arrivals
        arrivals[fn.name] = make_arrivals(
            a.kind,
            rate_rps=a.rate_rps,
            duration_s=spec.duration_s,
            seed=seed * 1000 + k,
            trace_path=a.trace,
            burst_factor=a.burst_factor,
            time_scale=a.time_scale,
        )
    jobs = [
        Job(
            fn.name,
            modes[fn.name],
            fn.slo_ms,
            costs[fn.name],
            len(arrivals[fn.name]) / spec.duration_s,
            fn.node,
        )
        for fn in fns
    ]
    placements: dict[str, Placement] = place(spec.policy, jobs, sites, host_gflops)
    slots_used: dict[str, int] = {s.name: 0 for s in sites}
    for pl in placements.values():
        slots_used[pl.node] += pl.backend == "gpu"
    slots_total = {s.name: (s.profile.gpu_slots if s.profile.has_gpu else 0) for s in sites}

    nodes: dict[str, NodeProc] = {}
    pool = ThreadPoolExecutor(max_workers=48, thread_name_prefix="fn-client")
    try:
        # 4. deploy
        used = sorted({pl.node for pl in placements.values()})
        for k, name in enumerate(used):
            progress(f"starting node {name}", k / len(used))
            tier, prof, link = sites_info[name]
            nodes[name] = start_node(
                name, prof, link, host_gflops, spec.gpu, out_dir, exp.links.mode, seed
            )
        modules = {fn.name: import_function(paths[fn.name]) for fn in fns}
        makers = {n: getattr(m, "make_request", lambda p, i: dict(p)) for n, m in modules.items()}
        cold = {}
        with ThreadPoolExecutor(max_workers=4) as dep:
            futs = {
                fn.name: dep.submit(
                    _http,
                    nodes[placements[fn.name].node].port,
                    "POST",
                    f"/deploy/{fn.name}",
                    {
                        "module": str(paths[fn.name]),
                        "backend": placements[fn.name].backend,
                        "warmup": makers[fn.name](dict(fn.request), 0),
                    },
                    START_TIMEOUT_S * 3,
                )
                for fn in fns
            }
            for name, fut in futs.items():
                cold[name] = fut.result()
        for fn in fns:
            pl = placements[fn.name]
            report(
                {
                    "name": "cold_start_s",
                    "value": cold[fn.name]["cold_start_s"],
                    "node": fn.name,
                    "tags": {
                        "backend": cold[fn.name]["backend"],
                        "site": pl.node,
                        "phase": "deploy",
                    },
                }
            )
            report(
                {
                    "name": "on_gpu",
                    "value": float(pl.backend == "gpu"),
                    "node": fn.name,
                    "tags": {"site": pl.node, "reason": "placement: " + pl.reason},
                }
            )

        # 5 + 6. load and runtime
        runtimes = {
            fn.name: DynamicRuntime(modes[fn.name], thresholds_for(fn, spec.runtime), 0.0)
            for fn in fns
            if placements[fn.name].dynamic
        }
        events: list[tuple[float, int, int]] = []
        for k, fn in enumerate(fns):
            events += [(float(t), k, i) for i, t in enumerate(arrivals[fn.name])]
        events.sort()
        results: queue.Queue = queue.Queue()
        client = Client()
        stop = threading.Event()
        timeout_s = max(60.0, 20 * max(f.slo_ms for f in fns) / 1000)

        def send(k: int, i: int, t_sched: float) -> None:
            fn = fns[k]
            node = nodes[placements[fn.name].node]
            body = json.dumps(makers[fn.name](dict(fn.request), i + 1)).encode()
            try:
                res, wall = client.post(node.invoke_port, f"/invoke/{fn.name}", body, timeout_s)
                results.put(("ok", k, i, t_sched, res, wall))
            except Exception as exc:  # recorded, never lost
                results.put(("error", k, i, t_sched, f"{type(exc).__name__}: {exc}", None))

        t0 = time.monotonic()

        def schedule() -> None:
            for t, k, i in events:
                delay = t0 + t - time.monotonic()
                if delay > 0 and stop.wait(delay):
                    return
                pool.submit(send, k, i, t)

        sched = threading.Thread(target=schedule, name="fn-load", daemon=True)
        sched.start()
        pending_switch: dict[str, threading.Thread] = {}
        switch_done: queue.Queue = queue.Queue()
        lat: dict[str, list[float]] = {fn.name: [] for fn in fns}
        backends_seen: set[str] = set()
        timings: dict[str, set[str]] = {fn.name: set() for fn in fns}
        counts = {"ok": 0, "error": 0}
        total = len(events)
        th_eval = spec.runtime.eval_interval_s * spec.runtime.time_scale
        next_eval = th_eval

        def do_switch(name: str, node: str, backend: str) -> None:
            try:
                rec = _http(
                    nodes[node].port,
                    "POST",
                    f"/switch/{name}",
                    {"backend": backend},
                    START_TIMEOUT_S * 3,
                )
                switch_done.put((name, node, backend, rec, None))
            except Exception as exc:
                switch_done.put((name, node, backend, None, f"{type(exc).__name__}: {exc}"))

        give_up_s = spec.duration_s + timeout_s + 60.0  # every request has answered by then
        while counts["ok"] + counts["error"] < total:
            try:
                item = results.get(timeout=0.1)
            except queue.Empty:
                item = None
            now = time.monotonic() - t0
            if item is None and now > give_up_s:
                break
            if item is not None:
                status, k, i, t_sched, res, wall = item
                fn = fns[k]
                counts[status] += 1
                if status == "error":
                    report(
                        {
                            "name": "request_error",
                            "value": 1.0,
                            "node": fn.name,
                            "step": i,
                            "tags": {"error": res, "t_s": t_sched},
                        }
                    )
                else:
                    network_ms = wall * 1e3 - res["server_wall_ms"]
                    e2e = network_ms + res["server_ms"]
                    lat[fn.name].append(e2e)
                    backends_seen.add(res["backend"])
                    timings[fn.name].add(f"{res['backend']}: {res['timing']}")
                    report(
                        {
                            "name": "e2e_ms",
                            "value": e2e,
                            "node": fn.name,
                            "step": i,
                            "tags": {
                                "t_s": t_sched,
                                "backend": res["backend"],
                                "timing": res["timing"],
                                "server_ms": res["server_ms"],
                                "network_ms": network_ms,
                                "site": placements[fn.name].node,
                                "error": res["error"],
                            },
                        }
                    )
                    rt = runtimes.get(fn.name)
                    if rt is not None and res["backend"].startswith(rt.backend):
                        seen = e2e if placements[fn.name].observe == "e2e" else res["server_ms"]
                        rt.observe(now, seen)
            while not switch_done.empty():
                name, node, backend, rec, err = switch_done.get()
                pending_switch.pop(name, None)
                if backend == "cpu":
                    slots_used[node] -= 1
                tags = {"site": node, "backend": backend}
                if err:
                    report(
                        {
                            "name": "switch_error",
                            "value": 1.0,
                            "node": name,
                            "tags": {**tags, "error": err},
                        }
                    )
                else:
                    report(
                        {
                            "name": "cold_start_s",
                            "value": rec["cold_start_s"],
                            "node": name,
                            "tags": {**tags, "backend": rec["backend"], "phase": "switch"},
                        }
                    )
            if now >= next_eval:
                next_eval += th_eval
                for name, rt in runtimes.items():
                    if name in pending_switch:
                        continue
                    node = placements[name].node
                    free = slots_used[node] < slots_total[node] and nodes[node].gpu is not None
                    d = rt.evaluate(now, gpu_available=free)
                    if d is None:
                        continue
                    report(
                        {
                            "name": "mode_decision",
                            "value": float(d.applied),
                            "node": name,
                            "tags": {
                                "old": d.old,
                                "new": d.new,
                                "reason": d.reason,
                                "p95_ms": d.p95_ms,
                                "rate_rps": d.rate_rps,
                                "t_s": now,
                            },
                        }
                    )
                    if not d.applied:
                        continue
                    target = rt.backend
                    report(
                        {
                            "name": "on_gpu",
                            "value": float(target == "gpu"),
                            "node": name,
                            "tags": {"site": node, "reason": d.reason},
                        }
                    )
                    if target == "gpu":
                        slots_used[node] += 1
                    th = threading.Thread(target=do_switch, args=(name, node, target), daemon=True)
                    pending_switch[name] = th
                    th.start()
                progress("load", min(1.0, now / spec.duration_s))
        for th in pending_switch.values():
            th.join(timeout=START_TIMEOUT_S * 3)
        wall_load = time.monotonic() - t0
        stats = {name: _http(n.port, "GET", "/stats") for name, n in nodes.items()}
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        for n in nodes.values():
            stop_node(n)

    # summary
    per_fn = {}
    for fn in fns:
        pl = placements[fn.name]
        st = stats[pl.node]["functions"][fn.name]
        v = lat[fn.name]
        rt = runtimes.get(fn.name)
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
            "slo_violations": int(sum(x > fn.slo_ms for x in v)),
            "slo_violation_pct": 100.0 * sum(x > fn.slo_ms for x in v) / max(1, len(v)),
            "gpu_seconds": st["gpu_seconds"],
            "timing": sorted(timings[fn.name]),
            "switches": sum(d.applied for d in rt.decisions) if rt else 0,
            "cold_starts": st["cold_starts"],
            "host_cost_ms": {
                "wall": cal[fn.name]["wall_s"] * 1e3,
                "cpu": cal[fn.name]["cpu_s"] * 1e3,
            },
        }
    gpu_used = {b for b in backends_seen if b.startswith("gpu-")}
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
        "requests_unanswered": total - counts["ok"] - counts["error"],
        "load_wall_s": wall_load,
        "gpu_seconds": sum(f["gpu_seconds"] for f in per_fn.values()),
    }
    (out_dir / "functions.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary
