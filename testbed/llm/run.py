"""Run ``workload.llm_pipeline`` on the run's backend.

Steps, each recorded:

1. **Profile**: every unit of the model (embedding, each block, head) runs the request
   shape (prefill of the prompt + one-token decodes) in this process,
   ``profile_repeats`` times; the median is the unit's time on this host. A node's time
   is that over its profile's ``cpu_speed_factor`` (capped at the run's time-dilation
   factor TDF: a device faster than TDF x this host runs at TDF x host speed, as the
   stage server does; without dilation the cap is 1).
2. **Partition** each replica's chain: BSDP (``hyperion``, with the links' bandwidth
   and latency), GPipe's compute-balanced cut (``gpipe``) or HEFT's upward-rank
   placement (``heft``); the cut (or placement) and its *modelled* bottleneck and
   latency are an ``llm_partition`` event.
3. **Deploy**: one stage server per used node (:mod:`nodes.llm.stage_server`), holding
   the units of every replica it is in, behind its link (``start_services``).
4. **Load**: open-loop arrivals (the functions workload's generators); each request is
   routed by the policy's scheduler (ARTS, HEFT) and generated through its hops, or
   (``gpipe``) queued for a micro-batched mini-batch (:mod:`testbed.llm.gpipe`); a
   failed request (a hop down) is retried once (a fresh pick, or queued again). Every
   request is a metric row; faults run from the spec's schedule (``at_time_s``).
5. **Stats**: each node's busy time over the load's wall time (``llm_utilisation``).

Clocks (:mod:`kernel.dilation`): arrivals are drawn over ``duration_s`` emulated seconds
and released at ``TDF`` x their time on the wall clock; timeouts are emulated seconds
(``TDF`` x longer on the wall); every recorded time (``llm_e2e_ms``, ``llm_ttft_ms``, a
stage's ``queue_ms``, GPipe's wait for a batch) is converted to emulated time where it
is measured (:mod:`testbed.llm.pipeline`, :mod:`nodes.llm.stage_server`), and a stage's
device time is emulated already (:func:`nodes.device_control.stretch`); none of these
names is in :data:`kernel.dilation.CLOCK_METRICS`, so the store writes them as given.
The throughput is requests per emulated second.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kernel.dilation import emulated, tdf, wall
from nodes.llm.model import ModelConfig, Stage
from nodes.llm.wire import Client
from testbed.backends.base import Backend
from testbed.functions.arrivals import make_arrivals
from testbed.functions.load import http_call
from testbed.llm.config import POLICIES, LlmPipelineSpec, LlmRequestSpec
from testbed.llm.gpipe import GpipeServer, Pending
from testbed.llm.partition import Chain, balanced_cut, bsdp, cut_placement, heft_placement
from testbed.llm.pipeline import BatchItem, StepFailed, generate_remote
from testbed.llm.schedule import Replica, Route, Scheduler, make_scheduler
from testbed.procs import free_port
from testbed.workloads.base import RunContext, record_link_counters

__all__ = ["profile_units", "run_llm_pipeline"]

START_TIMEOUT_S = 120.0  # emulated s (dilated on the wall clock, as the fleet's connect wait)


def profile_units(cfg: ModelConfig, prompt: int, new: int, repeats: int) -> list[float]:
    """Median time of each unit for one request of ``prompt`` + ``new`` tokens, s."""
    torch.set_num_threads(1)
    stages = [Stage(cfg, u, u + 1) for u in range(cfg.n_units)]
    rng = np.random.default_rng(cfg.seed)
    times: list[list[float]] = [[] for _ in stages]
    for rep in range(repeats):
        x: torch.Tensor = torch.tensor(rng.integers(0, cfg.vocab, prompt), dtype=torch.long)
        pos = 0
        for step in range(new):
            for u, st in enumerate(stages):
                t0 = time.perf_counter()
                x = st.run(f"p{rep}", x, pos)
                times[u].append(time.perf_counter() - t0)
            pos += prompt if step == 0 else 1
        for st in stages:
            st.drop(f"p{rep}")
    return [statistics.median(t) * new for t in times]


def request_bytes(cfg: ModelConfig, prompt: int, new: int) -> list[int]:
    """Bytes entering each unit over one request (token ids, then hidden states)."""
    tokens = prompt + new - 1
    return [8 * tokens] + [4 * cfg.d_model * tokens] * (cfg.n_units - 1)


def chain_of(ctx: RunContext, names: list[str], unit_s: list[float], cfg: ModelConfig,
             req: LlmRequestSpec) -> Chain:  # fmt: skip
    """The partitioner's view of one replica (profiles, links, memory caps), in emulated
    time: a node of speed ``s`` computes at ``min(s, TDF)`` x this host (the stretch's
    cap), links at their spec's bandwidth and latency."""
    from nodes.llm.model import unit_bytes

    planned = {n.name: n for n in ctx.plan.nodes}
    nodes = [planned[n] for n in names]
    cap = tdf()
    speeds = [min(cap, n.profile.cpu_speed_factor) for n in nodes]
    bw = [n.uplink.bandwidth_mbps for n in nodes]
    return Chain(
        nodes=tuple(names),
        unit_s=tuple(tuple(t / s for t in unit_s) for s in speeds),
        in_bytes=tuple(request_bytes(cfg, req.prompt_tokens, req.new_tokens)),
        param_bytes=tuple(unit_bytes(cfg)),
        mem_bytes=tuple(n.profile.memory_mb << 20 for n in nodes),
        latency_s=tuple(n.uplink.latency_ms / 1e3 for n in nodes),
        bandwidth_bps=tuple(b * 1e6 if b else float("inf") for b in bw),
        messages=req.new_tokens,
    )


def partition(spec: LlmPipelineSpec, chains: list[Chain]) -> list[Replica]:
    """Each chain's replica, cut or placed by the policy's partitioner (ValueError,
    naming the replica, if its partitioner finds nothing that fits)."""
    how = POLICIES[spec.policy][0]
    out = []
    for i, ch in enumerate(chains):
        try:
            if how == "heft":
                out.append(Replica(ch, (), heft_placement(ch)))
                continue
            cut = bsdp(ch) if how == "bsdp" else balanced_cut(ch)
        except ValueError as e:
            raise ValueError(f"workload.llm_pipeline.replicas.{i}: {how}: {e}") from e
        out.append(Replica(ch, cut, cut_placement(cut)))
    return out


def deploy(
    ctx: RunContext, backend: Backend, cfg: ModelConfig, replicas: list[Replica]
) -> dict[str, int]:
    """Start a stage server on every used node; node -> port reaching it (its link)."""
    ranges: dict[str, list[tuple[int, int]]] = {}
    for rep in replicas:
        for node, a, b in rep.route:
            if (a, b) not in ranges.setdefault(node, []):
                ranges[node].append((a, b))
    planned = {n.name: n for n in ctx.plan.nodes}
    commands, ports = {}, {}
    for name, rs in sorted(ranges.items()):
        ports[name] = free_port()
        prof = planned[name].profile
        commands[name] = [sys.executable, "-m", "nodes.llm.stage_server", "--node", name,
                          "--port", str(ports[name]), "--model-json", json.dumps(cfg.as_dict()),
                          "--ranges", json.dumps(rs), "--speed", str(prof.cpu_speed_factor),
                          "--memory-mb", str(prof.memory_mb)]  # fmt: skip
    reach: dict[str, int] = backend.start_services(commands, ports, wall(START_TIMEOUT_S))
    return reach


@dataclass
class Load:
    """Step 4: arrivals routed by a scheduler and served through the stage nodes."""

    ctx: RunContext
    spec: LlmPipelineSpec
    sched: Scheduler
    reach: dict[str, int]
    tick: Any

    def __post_init__(self) -> None:
        self.client = Client(timeout_s=wall(60.0))  # 60 emulated s
        self.rng = np.random.default_rng(self.ctx.seed)
        self.lock = threading.Lock()
        self.done = 0
        self.lost = 0  # requests whose both attempts failed
        self.gpipe: GpipeServer | None = None
        if POLICIES[self.spec.policy][1] == "gpipe":
            g = self.spec.gpipe
            self.gpipe = GpipeServer(self.sched.replicas, self.reach, g.batch_size,
                                     g.micro_batches, self.gpipe_served,
                                     self.gpipe_failed)  # fmt: skip

    def gpipe_served(self, p: Pending, route: Route, gen: Any) -> None:
        self.record(p.k, p.kind, route, gen, p.attempt)

    def gpipe_failed(self, p: Pending, route: Route, e: StepFailed, lost: bool) -> None:
        self.metric("llm_failed", 1.0, p.k, route, kind=p.kind, attempt=p.attempt,
                    error=str(e)[:300])  # fmt: skip
        if lost:
            with self.lock:
                self.lost += 1

    def shape(self) -> tuple[str, int, int]:
        r = self.spec.requests
        if self.rng.random() < r.long_fraction:
            return "long", r.long_prompt_tokens, r.long_new_tokens
        return "short", r.prompt_tokens, r.new_tokens

    def serve(self, k: int, kind: str, prompt: list[int], new: int) -> None:
        for attempt in (0, 1):
            rep, route = self.sched.pick()
            ports = tuple((self.reach[n], a, b) for n, a, b in route)
            try:
                gen = generate_remote(self.client, ports, f"q{k}.{attempt}", prompt, new)
            except StepFailed as e:
                self.sched.done(rep, route, None)
                self.metric(
                    "llm_failed", 1.0, k, route, kind=kind, attempt=attempt, error=str(e)[:300]
                )
                if attempt:
                    with self.lock:
                        self.lost += 1
                continue
            self.sched.done(rep, route, gen.e2e_s)
            self.record(k, kind, route, gen, attempt)
            return

    def record(self, k: int, kind: str, route: Route, gen: Any, attempt: int) -> None:
        tags = {"kind": kind, "attempt": attempt, "tokens": len(gen.tokens)}
        self.metric("llm_e2e_ms", gen.e2e_s * 1e3, k, route, **tags)
        self.metric("llm_ttft_ms", gen.ttft_s * 1e3, k, route, **tags)
        per_node: dict[str, list[float]] = {}
        for h in gen.hops:
            per_node.setdefault(h["node"], [0.0, 0.0])
            per_node[h["node"]][0] += h["device_ms"]
            per_node[h["node"]][1] += h["queue_ms"]
        for node, (dev, queue) in per_node.items():
            self.ctx.metric({"name": "llm_stage_ms", "value": dev, "node": node, "step": k,
                             "tags": {"queue_ms": queue, "kind": kind}})  # fmt: skip
        with self.lock:
            self.done += 1

    def metric(self, name: str, value: float, k: int, route: Route, **tags: Any) -> None:
        tags = {**tags, "policy": self.spec.policy, "route": [list(h) for h in route]}
        self.ctx.metric({"name": name, "value": value, "step": k, "tags": tags})

    def run(self) -> float:
        """Release the arrivals (emulated s, at ``TDF`` x that on the wall clock) and
        serve them; the load's wall time, s (arrivals and the drain after them)."""
        spec = self.spec
        arrivals = make_arrivals(spec.arrivals.kind, rate_rps=spec.arrivals.rate_rps,
                                 duration_s=spec.duration_s, seed=self.ctx.seed,
                                 trace_path=spec.arrivals.trace,
                                 burst_factor=spec.arrivals.burst_factor,
                                 time_scale=spec.arrivals.time_scale)  # fmt: skip
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=32) as pool:
            for k, at in enumerate(arrivals):
                while (wait := t0 + wall(float(at)) - time.monotonic()) > 0:
                    self.tick()
                    time.sleep(min(wait, 0.05))
                kind, p, new = self.shape()
                prompt = [int(t) for t in self.rng.integers(0, spec.model.vocab, p)]
                if self.gpipe is not None:
                    item = BatchItem(f"q{k}.0", prompt, new)
                    self.gpipe.submit(Pending(k, kind, item, time.monotonic()))
                else:
                    pool.submit(self.serve, k, kind, prompt, new)
                self.ctx.progress("requests", (k + 1) / max(1, len(arrivals)))
            if self.gpipe is not None:
                self.gpipe.close()
        return time.monotonic() - t0


def record_partition(ctx: RunContext, spec: LlmPipelineSpec, replicas: list[Replica],
                     unit_s: list[float]) -> None:  # fmt: skip
    for i, rep in enumerate(replicas):
        ctx.store.add_event(ctx.run_id, "llm_partition", replica=i, policy=spec.policy,
                            partitioner=POLICIES[spec.policy][0],
                            nodes=list(rep.chain.nodes), cut=[list(c) for c in rep.cut],
                            route=[list(h) for h in rep.route],
                            modelled_bottleneck_ms=rep.bottleneck_s * 1e3,
                            modelled_latency_ms=rep.latency_s * 1e3,
                            host_unit_ms=[t * 1e3 for t in unit_s])  # fmt: skip


def utilisation(ctx: RunContext, reach: dict[str, int], wall_s: float) -> None:
    """Step 5: each node's busy share of the load's wall time (down nodes: none; busy
    and load times both wall, so the share is the same in emulated time)."""
    for node, port in reach.items():
        try:
            stats = http_call(port, "GET", "/stats", timeout=wall(10.0))
        except (OSError, RuntimeError, ValueError):
            continue
        ctx.metric({"name": "llm_utilisation", "value": stats["busy_s"] / max(wall_s, 1e-9),
                    "node": node, "tags": {"steps": stats["steps"]}})  # fmt: skip


def run_llm_pipeline(ctx: RunContext) -> dict[str, Any]:
    """Run ``workload.llm_pipeline``; return the run summary."""
    spec = ctx.experiment.workload.llm_pipeline  # type: ignore[attr-defined]
    assert isinstance(spec, LlmPipelineSpec)
    cfg, req = spec.model.config(), spec.requests
    ctx.progress("profiling units", 0.0)
    unit_s = profile_units(cfg, req.prompt_tokens, req.new_tokens, spec.profile_repeats)
    chains = [chain_of(ctx, list(c), unit_s, cfg, req) for c in spec.replicas]
    replicas = partition(spec, chains)
    record_partition(ctx, spec, replicas, unit_s)
    online = POLICIES[spec.policy][1]
    sched = make_scheduler("round_robin" if online == "gpipe" else online, replicas)
    backend = ctx.make_backend()
    try:
        reach = deploy(ctx, backend, cfg, replicas)
        backend.start_schedules()
        chaos = ctx.chaos_engine(backend)
        chaos.start()
        load = Load(ctx, spec, sched, reach, chaos.tick)
        load_wall_s = load.run()
        utilisation(ctx, reach, load_wall_s)
        if load.gpipe is not None:
            sizes = load.gpipe.batches
            ctx.store.add_event(ctx.run_id, "llm_gpipe_batches", batches=len(sizes),
                                mean_size=sum(sizes) / max(1, len(sizes)),
                                largest=max(sizes, default=0))  # fmt: skip
    finally:
        counters = backend.link_counters()
        backend.stop()
        record_link_counters(ctx.store, ctx.run_id, counters)
    return summarize(ctx, spec, load_wall_s, load.done, load.lost)


def summarize(
    ctx: RunContext, spec: LlmPipelineSpec, load_wall_s: float, done: int, lost: int
) -> dict[str, Any]:
    """p50/p95 latency per request kind (emulated ms), throughput (requests per emulated
    second), failures (from the store)."""
    rows = ctx.store.tagged_metrics(ctx.run_id)
    load_s = emulated(load_wall_s)
    out: dict[str, Any] = {"policy": spec.policy, "load_wall_s": load_wall_s,
                           "load_emulated_s": load_s, "completed": done,
                           "throughput_rps": done / max(load_s, 1e-9)}  # fmt: skip
    for kind in ("short", "long"):
        e2e = [
            r.value or 0.0 for r in rows if r.name == "llm_e2e_ms" and r.tags.get("kind") == kind
        ]
        if e2e:
            out[f"{kind}_p50_ms"] = float(np.percentile(e2e, 50))
            out[f"{kind}_p95_ms"] = float(np.percentile(e2e, 95))
            out[f"{kind}_n"] = len(e2e)
    out["failed_attempts"] = sum(1 for r in rows if r.name == "llm_failed")
    out["requests_lost"] = lost  # both attempts failed
    # failed: no request was served at all (the pipeline never worked)
    out["status"] = "completed" if done else "failed"
    (ctx.run_dir / "llm_pipeline.json").write_text(json.dumps(out, indent=2))
    return out
