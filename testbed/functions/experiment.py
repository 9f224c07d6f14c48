"""Run a serverless-function experiment (``workload.functions``) on the run's backend.

Steps, each recorded:

1. **Identify**: the execution mode of every function from its source (Gaia's
   identifier, :mod:`nodes.functions.identifier`) unless the YAML overrides it.
2. **Calibrate**: each function runs a few warm requests in a fresh process on this
   host (measured wall and CPU time, payload sizes) and this host's single-thread matmul
   throughput is measured; placement estimates and the emulated GPU use them.
3. **Place** with the chosen policy (:mod:`testbed.functions.placement`).
4. **Deploy**: the backend starts one function runtime (:mod:`nodes.functions.server`)
   per used node, each behind the node's link from the request origin
   (``LocalBackend.start_services``): the same node handles, links, link schedules and
   fault kinds as an FL run; each function's first backend starts (a real, measured
   cold start).
5. **Load** (:mod:`testbed.functions.load`): open-loop arrivals (Poisson, bursty or a
   trace) sent over HTTP through the links; every response is recorded as it comes
   (``e2e_ms`` metrics, with backend, timing label and node in the tags). The chaos
   engine runs the fault schedule (``at_time_s``) and live injections meanwhile.
6. **Runtime**: every ``eval_interval_s`` (scaled) Gaia's Dynamic Function Runtime
   re-evaluates each ``cpu_preferred`` / ``gpu_preferred`` function and switches its
   backend on the node; GPU slots are accounted per node.

The run summary (:mod:`testbed.functions.summary`) is read back from the store.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nodes.functions.identifier import MODES, identify_file
from nodes.functions.worker import import_function, request_maker, worker_env
from nodes.functions.workloads import module_path
from testbed.backends.base import Backend
from testbed.functions.arrivals import make_arrivals
from testbed.functions.config import FunctionSpec, FunctionsSpec
from testbed.functions.load import (
    START_TIMEOUT_S,
    FunctionNode,
    LoadPlan,
    LoadRun,
    Metric,
    http_call,
    thresholds_for,
)
from testbed.functions.placement import Cost, Job, Placement, Site, place
from testbed.functions.summary import summarize
from testbed.procs import free_port
from testbed.spec.models import Experiment, LinkSpec
from testbed.workloads.base import RunContext, record_link_counters

__all__ = ["calibrate", "origin_links", "run_functions", "thresholds_for"]


def calibrate(path: Path, params: dict[str, Any], n: int = 5) -> dict[str, float]:
    """Measure a function on this host in a fresh process (see ``worker --calibrate``)."""
    cmd = [sys.executable, "-m", "nodes.functions.worker", "--module", str(path)]
    cmd += ["--calibrate", str(n), "--params", json.dumps(params)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=worker_env())
    if out.returncode != 0:
        raise RuntimeError(f"calibrating {path} failed:\n{out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def origin_links(exp: Experiment, origin: str) -> dict[str, tuple[str, Any, LinkSpec]]:
    """``{node: (tier, profile, link from the origin)}`` for every node of the fleet."""
    assert exp.fleet is not None
    return {
        name: (spec.tier, exp.profile_of(spec), exp.links.for_node(name, spec, origin))
        for spec in exp.fleet.nodes
        for name in spec.names()
    }


def function_sites(ctx: RunContext) -> dict[str, tuple[str, Any, LinkSpec]]:
    """``{node: (tier, profile, its link)}`` of the nodes the functions run on (all
    unless ``workload.functions.nodes``); GPU slots that other workloads of the run hold
    (``gpu_slots``) are taken out of the node's profile."""
    held: dict[str, int] = {}
    for section in ctx.experiment.workload.sections:
        if section != "functions":
            for node, k in getattr(
                ctx.experiment.workload.model_for(section), "gpu_slots", {}
            ).items():
                held[node] = held.get(node, 0) + k
    return {
        n.name: (
            n.tier,
            n.profile.model_copy(update={"gpu_slots": n.profile.gpu_slots - held.get(n.name, 0)}),
            n.uplink,
        )
        for n in ctx.plan.nodes
        if "functions" in n.workloads
    }


@dataclass
class Prepared:
    """A functions run before its nodes start: modes, measured costs, arrivals, places."""

    spec: FunctionsSpec
    sites: dict[str, tuple[str, Any, LinkSpec]]
    paths: dict[str, Path]
    modes: dict[str, str]
    reasons: dict[str, list[str]]
    cal: dict[str, dict[str, float]]
    host_gflops: float
    arrivals: dict[str, Any]
    placements: dict[str, Placement]

    def slots_free(self) -> dict[str, int]:
        """GPU slots per node left after placement."""
        free = {name: int(prof.usable_gpu_slots) for name, (_t, prof, _l) in self.sites.items()}
        for pl in self.placements.values():
            free[pl.node] -= pl.backend == "gpu"
        return free


def identify(
    fns: list[FunctionSpec], metric: Metric
) -> tuple[dict[str, Path], dict[str, str], dict[str, list[str]]]:
    """Step 1: each function's module path, execution mode and the reasons for it."""
    paths, modes, reasons = {}, {}, {}
    for fn in fns:  # (the module exists: the spec checked it)
        paths[fn.name] = module_path(fn.module).resolve()
        decision = identify_file(paths[fn.name])
        modes[fn.name] = fn.mode or decision.mode
        reasons[fn.name] = (["mode set in the YAML"] if fn.mode else []) + list(decision.reasons)
        metric("identified_mode", MODES.index(decision.mode), fn.name, mode=decision.mode,
               used=modes[fn.name], reasons=decision.reasons)  # fmt: skip
    return paths, modes, reasons


def calibrate_all(
    fns: list[FunctionSpec], paths: dict[str, Path], ctx: RunContext
) -> tuple[dict[str, dict[str, float]], float]:
    """Step 2: each function's measured cost, and this host's GFLOP/s (median)."""
    cal = {}
    for k, fn in enumerate(fns):
        ctx.progress(f"calibrating {fn.name}", k / len(fns))
        cal[fn.name] = calibrate(paths[fn.name], dict(fn.request))
    return cal, float(np.median([c["host_gflops"] for c in cal.values()]))


def arrivals_of(spec: FunctionsSpec, seed: int) -> dict[str, Any]:
    """Each function's send times (s from load start), seeded per function."""
    return {
        fn.name: make_arrivals(
            fn.arrivals.kind,
            rate_rps=fn.arrivals.rate_rps,
            duration_s=spec.duration_s,
            seed=seed * 1000 + k,
            trace_path=fn.arrivals.trace,
            burst_factor=fn.arrivals.burst_factor,
            time_scale=fn.arrivals.time_scale,
            steps=fn.arrivals.phases,
        )
        for k, fn in enumerate(spec.functions)
    }


def placements_of(
    spec: FunctionsSpec,
    sites_info: dict[str, tuple[str, Any, LinkSpec]],
    modes: dict[str, str],
    cal: dict[str, dict[str, float]],
    arrivals: dict[str, Any],
    host_gflops: float,
) -> dict[str, Placement]:
    """Step 3: place with the spec's policy (policies weigh each function's rate)."""
    sites = [
        Site(name, tier, prof, link.latency_ms, link.bandwidth_mbps, prof.usable_gpu_slots)
        for name, (tier, prof, link) in sites_info.items()
    ]
    jobs = []
    for fn in spec.functions:
        c = cal[fn.name]
        cost = Cost(c["wall_s"], c["cpu_s"], int(c["request_bytes"]), int(c["response_bytes"]))
        rate = len(arrivals[fn.name]) / spec.duration_s
        jobs.append(Job(fn.name, modes[fn.name], fn.slo_ms, cost, rate, fn.node))
    placed: dict[str, Placement] = place(spec.policy, jobs, sites, host_gflops)
    return placed


def prepare(ctx: RunContext) -> Prepared:
    """Steps 1-3: identify, calibrate, place."""
    spec = ctx.experiment.workload.functions
    assert spec is not None
    fns = list(spec.functions)

    def metric(name: str, value: float, fn: str, step: int | None = None, **tags: Any) -> None:
        ctx.metric({"name": name, "value": value, "node": fn, "step": step, "tags": tags})

    sites = function_sites(ctx)
    paths, modes, reasons = identify(fns, metric)
    cal, gflops = calibrate_all(fns, paths, ctx)
    arrivals = arrivals_of(spec, ctx.seed)
    placements = placements_of(spec, sites, modes, cal, arrivals, gflops)
    return Prepared(spec, sites, paths, modes, reasons, cal, gflops, arrivals, placements)


def start_nodes(backend: Backend, prep: Prepared, ctx: RunContext) -> dict[str, FunctionNode]:
    """Step 4a: the backend starts a function runtime on every used node, behind its link."""
    used = sorted({pl.node for pl in prep.placements.values()})
    commands, ports, files = {}, {}, {}
    for k, name in enumerate(used):
        ctx.progress(f"starting node {name}", k / len(used))
        prof = prep.sites[name][1]
        ports[name], files[name] = free_port(), ctx.run_dir / "nodes" / f"{name}.port.json"
        files[name].parent.mkdir(parents=True, exist_ok=True)
        files[name].unlink(missing_ok=True)
        commands[name] = [sys.executable, "-m", "nodes.functions.server", "--node", name,
                          "--profile-json", prof.model_dump_json(),
                          "--host-gflops", str(prep.host_gflops), "--gpu", prep.spec.gpu,
                          "--port-file", str(files[name]), "--port", str(ports[name])]  # fmt: skip
    reach = backend.start_services(commands, ports, START_TIMEOUT_S)
    return {
        name: FunctionNode(name, ports[name], read_port_file(files[name])["gpu"], reach[name],
                           backend.service_host(name))  # fmt: skip
        for name in used
    }


def read_port_file(path: Path, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
    """What a function runtime wrote once it served (port, pid, GPU backend)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} was not written (see the node's log under logs/)")
        time.sleep(0.05)
    info: dict[str, Any] = json.loads(path.read_text())
    return info


def deploy_one(
    prep: Prepared, nodes: dict[str, FunctionNode], name: str, backend: str | None = None
) -> dict[str, Any]:
    """Deploy function ``name`` on its node, on ``backend`` (default: its placement's)."""
    fn = next(f for f in prep.spec.functions if f.name == name)
    pl = prep.placements[name]
    warmup = request_maker(import_function(prep.paths[name]))(dict(fn.request), 0)
    body = {"module": str(prep.paths[name]), "backend": backend or pl.backend, "warmup": warmup}
    n = nodes[pl.node]
    return http_call(n.port, "POST", f"/deploy/{name}", body, START_TIMEOUT_S * 3, host=n.host)


def deploy(prep: Prepared, nodes: dict[str, FunctionNode], metric: Metric) -> None:
    """Step 4b: deploy every function on its node (its first backend's cold start)."""
    fns = list(prep.spec.functions)

    def one(fn: FunctionSpec) -> dict[str, Any]:
        return deploy_one(prep, nodes, fn.name)

    with ThreadPoolExecutor(max_workers=4) as pool:
        cold = dict(zip([fn.name for fn in fns], pool.map(one, fns), strict=True))
    for fn in fns:
        pl, rec = prep.placements[fn.name], cold[fn.name]
        metric("cold_start_s", rec["cold_start_s"], fn.name, backend=rec["backend"],
               site=pl.node, phase="deploy")  # fmt: skip
        metric("on_gpu", float(pl.backend == "gpu"), fn.name, site=pl.node,
               reason="placement: " + pl.reason)  # fmt: skip


def node_stats(nodes: dict[str, FunctionNode]) -> dict[str, dict[str, Any]]:
    """Each node runtime's own counters (``/stats``); empty for a node that is down."""
    out: dict[str, dict[str, Any]] = {}
    for name, n in nodes.items():
        try:
            out[name] = http_call(n.port, "GET", "/stats", timeout=30.0, host=n.host)
        except (OSError, RuntimeError):
            out[name] = {"functions": {}}
    return out


def load_plan(prep: Prepared) -> LoadPlan:
    """What step 5 sends: arrivals, places, modes and request builders."""
    fns = tuple(prep.spec.functions)
    makers = {fn.name: request_maker(import_function(prep.paths[fn.name])) for fn in fns}
    return LoadPlan(fns, prep.arrivals, prep.placements, prep.modes, makers,
                    prep.spec.runtime, prep.spec.duration_s)  # fmt: skip


def run_functions(ctx: RunContext) -> dict[str, Any]:
    """Run ``workload.functions`` of ``ctx``'s experiment; return the run summary (also
    written to ``functions.json``)."""

    def metric(name: str, value: float, fn: str, step: int | None = None, **tags: Any) -> None:
        ctx.metric({"name": name, "value": value, "node": fn, "step": step, "tags": tags})

    prep = prepare(ctx)
    backend = ctx.make_backend()
    load: LoadRun | None = None
    try:
        nodes = start_nodes(backend, prep, ctx)
        backend.start_schedules()
        deploy(prep, nodes, metric)
        chaos = ctx.chaos_engine(backend)
        chaos.start()  # the fleet is ready when its functions are: at_time_s counts from here
        load = LoadRun(load_plan(prep), nodes, prep.slots_free(), metric, ctx.progress,
                       chaos.tick, functools.partial(deploy_one, prep, nodes))  # fmt: skip
        wall_load = load.run()
        stats = node_stats(nodes)
    finally:
        if load is not None:
            load.close()
        counters, read_at = backend.link_counters(), time.time()
        backend.stop()
        record_link_counters(ctx.store, ctx.run_id, counters, read_at)
    total = sum(len(a) for a in prep.arrivals.values())
    summary = summarize(ctx.store, ctx.run_id, prep, stats, wall_load, total)
    (ctx.run_dir / "functions.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary
