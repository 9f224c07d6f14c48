"""Placement across the continuum: which node runs which function, on which backend.

A policy sees every node (tier, device profile, the link from the request origin, GPU
slots) and every function (execution mode, SLO, a cost measured on this host at the
start of the run) and returns a :class:`Placement` per function. Policies are
registered by name:

- ``static-cpu``: every function on a CPU backend, on the node with the lowest
  estimated end-to-end latency (link + CPU time). No runtime switching.
- ``static-gpu``: every function on a GPU backend (the idle one too), on the GPU node
  with the lowest estimate that has a free slot. No runtime switching.
- ``gaia``: Gaia as published (faithful port). Gaia chooses no node: it sets the
  function's execution mode on its Knative service (``gpu``/``gpu_preferred`` start
  with a GPU limit, ``cpu``/``cpu_preferred`` without one) and lets the Kubernetes
  scheduler place the pod. That scheduler is modelled here by its defaults: *filter*
  the nodes that fit (a GPU start needs a free GPU slot), *score* them least-allocated
  (free CPU cores after the function's request of one core, as a fraction of the
  node's cores), ties in fleet order (Kubernetes breaks them at random; fleet order
  keeps runs reproducible). Links and device speed are not weighed. One departure,
  because the runtime here switches a function's backend on its node (Knative would
  schedule the new revision anew): a ``cpu_preferred`` function is only placed on a node
  that has a GPU, so that its promotion can happen. The runtime judges the
  server-side latency (Gaia's activator metric).
- ``link-aware`` (ours, not Gaia's; ``gaia-link`` is its old name, still accepted):
  Gaia's modes and runtime, but the node minimises the estimated
  end-to-end latency *including the link* from the origin (propagation both ways and
  the payload's transfer time); a ``cpu_preferred`` function goes where its CPU meets
  the SLO, else where a free GPU would (that GPU slot is then planned for it, so two
  functions are not placed for the same slot). Its runtime judges the SLO on the end-to-end
  latency the user sees.

Estimates (all modelled, from the profile and the measured host cost)::

    link_ms    = 2 * latency_ms + (request + response bytes) * 8 / bandwidth
    cpu_ms     = wait + cpu / cpu_speed_factor
    gpu_ms     = wait + cpu / gpu_speedup + gpu_overhead_ms
    estimate   = link_ms + service / (1 - rate * service)      (M/M/1 mean response)

and the SLO check of ``link-aware`` uses the M/M/1 p95 (``ln 20`` x the mean).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kernel.registry import Registry, callable_hook
from testbed.spec.catalog import DeviceProfile


@dataclass(frozen=True)
class Cost:
    """A function's cost on this host, measured at the start of the run."""

    wall_s: float
    cpu_s: float
    request_bytes: int
    response_bytes: int

    @property
    def wait_s(self) -> float:
        return max(0.0, self.wall_s - self.cpu_s)


@dataclass
class Site:
    """A node as placement sees it."""

    name: str
    tier: str
    profile: DeviceProfile
    latency_ms: float  # one way, origin -> node
    bandwidth_mbps: float | None
    gpu_slots_free: int = 0
    cores_requested: int = 0  # CPU cores requested by the functions placed here (gaia)

    def link_ms(self, cost: Cost) -> float:
        transfer = 0.0
        if self.bandwidth_mbps:
            transfer = (cost.request_bytes + cost.response_bytes) * 8 / (self.bandwidth_mbps * 1e3)
        return 2 * self.latency_ms + transfer

    def gpu_speedup(self, host_gflops: float) -> float | None:
        p = self.profile
        if not p.has_gpu or p.gpu_fp32_tflops is None:
            return None
        return p.gpu_fp32_tflops * 1e3 * p.gpu_efficiency / host_gflops

    def service_ms(self, cost: Cost, backend: str, host_gflops: float) -> float | None:
        if backend == "cpu":
            return (cost.wait_s + cost.cpu_s / self.profile.cpu_speed_factor) * 1e3
        speedup = self.gpu_speedup(host_gflops)
        if speedup is None:
            return None
        return (cost.wait_s + cost.cpu_s / speedup) * 1e3 + self.profile.gpu_overhead_ms

    def estimate_ms(
        self, cost: Cost, backend: str, host_gflops: float, rate_rps: float = 0.0, q: float = 1.0
    ) -> float | None:
        """Link + response time at ``rate_rps`` (M/M/1: service / (1 - load)).

        ``q`` scales the queueing response to a percentile (M/M/1: p95 = ln 20 x mean).
        A backend the load would saturate is ``inf``.
        """
        s = self.service_ms(cost, backend, host_gflops)
        if s is None:
            return None
        load = rate_rps * s / 1e3
        return self.link_ms(cost) + (q * s / (1.0 - load) if load < 1.0 else float("inf"))


@dataclass(frozen=True)
class Job:
    """A function to place."""

    name: str
    mode: str
    slo_ms: float
    cost: Cost
    rate_rps: float = 0.0
    pinned: str | None = None


@dataclass(frozen=True)
class Placement:
    """Where a function runs, how it starts, and whether the runtime may move it."""

    node: str
    backend: str  # cpu | gpu
    dynamic: bool
    estimate_ms: float | None
    reason: str
    estimates: dict[str, dict[str, float | None]] = field(default_factory=dict)
    observe: str = "server"  # the latency the runtime judges: server (Gaia) | e2e (ours)


P95_FACTOR = 2.996  # ln(20): p95 / mean of an exponential response time

Policy = Callable[[list[Job], list[Site], float], dict[str, Placement]]


#: name (or ``package.module:function``) -> placement policy.
POLICIES: Registry[Policy] = Registry(
    "policy", validate=callable_hook("(jobs, sites, host_gflops) -> {function: Placement}")
)


def policy(name: str) -> Callable[[Policy], Policy]:
    """Register a placement policy under ``name``."""
    return POLICIES.register(name)


def place(
    policy_name: str, jobs: list[Job], sites: list[Site], host_gflops: float
) -> dict[str, Placement]:
    """Run the policy ``policy_name``; returns ``{function: Placement}``."""
    try:
        fn = POLICIES[policy_name]
    except ValueError as exc:
        raise ValueError(f"workload.functions.policy: {exc}") from None
    return fn(jobs, sites, host_gflops)


def _estimates(job: Job, sites: list[Site], g: float) -> dict[str, dict[str, float | None]]:
    return {
        s.name: {b: s.estimate_ms(job.cost, b, g, job.rate_rps) for b in ("cpu", "gpu")}
        for s in sites
    }


def _candidates(job: Job, sites: list[Site]) -> list[Site]:
    return [s for s in sites if s.name == job.pinned] if job.pinned else sites


def _best(
    job: Job, sites: list[Site], backend: str, g: float, need_slot: bool
) -> tuple[Site, float] | None:
    scored: list[tuple[float, int, Site]] = []
    for i, s in enumerate(_candidates(job, sites)):
        if backend == "cpu" or (s.gpu_speedup(g) and (s.gpu_slots_free > 0 or not need_slot)):
            est = s.estimate_ms(job.cost, backend, g, job.rate_rps)
            if est is not None:
                scored.append((est, i, s))
    if not scored:
        return None
    best, _i, site = min(scored)
    return site, best


def _best_cpu(job: Job, sites: list[Site], g: float) -> tuple[Site, float]:
    """The candidate with the lowest link + CPU estimate (every node has a CPU)."""
    best = _best(job, sites, "cpu", g, False)
    if best is None:
        raise ValueError(f"function {job.name!r}: no node to place it on (pinned: {job.pinned})")
    return best


def _cpu_ms(site: Site, job: Job, g: float, q: float = 1.0) -> float:
    """Link + CPU estimate of ``job`` on ``site`` (never None: every node has a CPU)."""
    est = site.estimate_ms(job.cost, "cpu", g, job.rate_rps, q)
    assert est is not None
    return est


def _take(site: Site) -> None:
    site.gpu_slots_free -= 1


@policy("static-cpu")
def static_cpu(jobs: list[Job], sites: list[Site], g: float) -> dict[str, Placement]:
    out = {}
    for job in jobs:
        site, est = _best_cpu(job, sites, g)
        why = f"lowest link + CPU estimate ({est:.1f} ms)"
        out[job.name] = Placement(site.name, "cpu", False, est, why, _estimates(job, sites, g))
    return out


@policy("static-gpu")
def static_gpu(jobs: list[Job], sites: list[Site], g: float) -> dict[str, Placement]:
    out = {}
    for job in jobs:
        best = _best(job, sites, "gpu", g, True)
        ests = _estimates(job, sites, g)
        if best is None:
            site, est = _best_cpu(job, sites, g)
            why = "no GPU slot left: CPU"
            out[job.name] = Placement(site.name, "cpu", False, est, why, ests)
            continue
        site, est = best
        _take(site)
        why = f"lowest link + GPU estimate with a free slot ({est:.1f} ms)"
        out[job.name] = Placement(site.name, "gpu", False, est, why, ests)
    return out


def _initial_backend(mode: str) -> str:
    return "gpu" if mode in ("gpu", "gpu_preferred") else "cpu"


CORE_REQUEST = 1  # CPU cores a function's pod requests in the scheduler model of ``gaia``


def _fits(site: Site, job: Job, backend: str, g: float) -> bool:
    """The scheduler's filter: a GPU start needs a free slot; a ``cpu_preferred``
    function needs a node with a GPU (its promotion stays on the node)."""
    if backend == "gpu":
        return bool(site.gpu_speedup(g)) and site.gpu_slots_free > 0
    if job.mode == "cpu_preferred":
        return bool(site.gpu_speedup(g))
    return True


def _least_allocated(site: Site) -> float:
    """Kubernetes' default score: free CPU after the request, as a fraction of the node's."""
    cores = site.profile.cpu_cores
    return (cores - site.cores_requested - CORE_REQUEST) / cores


def _k8s_pick(job: Job, sites: list[Site], backend: str, g: float) -> Site | None:
    """The node the Kubernetes scheduler model picks (highest score, first in fleet order)."""
    fit = [s for s in _candidates(job, sites) if _fits(s, job, backend, g)]
    if not fit:
        return None
    return max(fit, key=_least_allocated)  # max keeps the first of equal scores


@policy("gaia")
def gaia(jobs: list[Job], sites: list[Site], g: float) -> dict[str, Placement]:
    """Gaia as published: the mode sets the first backend, the scheduler model the node."""
    out = {}
    for job in jobs:
        backend = _initial_backend(job.mode)
        site = _k8s_pick(job, sites, backend, g)
        why = f"mode {job.mode}: starts on {backend.upper()}"
        if site is None and backend == "gpu":  # Kubernetes would leave the pod Pending
            backend, why = "cpu", f"mode {job.mode}: no GPU slot fits (Pending in Kubernetes): CPU"
            site = _k8s_pick(job, sites, backend, g)
        if site is None:  # pinned to a node without a GPU (or to no node: ValueError)
            site = _best_cpu(job, sites, g)[0]
        if backend == "gpu":
            _take(site)
        site.cores_requested += CORE_REQUEST
        why += "; node by the Kubernetes scheduler model (least allocated); links not weighed"
        est = site.estimate_ms(job.cost, backend, g, job.rate_rps)
        dyn = job.mode in ("cpu_preferred", "gpu_preferred")
        out[job.name] = Placement(site.name, backend, dyn, est, why, _estimates(job, sites, g))
    return out


@policy("gaia-link")  # its old name: specs written before the rename stay valid
@policy("link-aware")
def link_aware(jobs: list[Job], sites: list[Site], g: float) -> dict[str, Placement]:
    out = {}
    for job in jobs:
        dyn = job.mode in ("cpu_preferred", "gpu_preferred")
        if job.mode == "cpu_preferred":
            site, backend, est, why = _link_cpu_preferred(job, sites, g)
        else:
            site, backend, est, why = _link_nearest(job, sites, g)
        ests = _estimates(job, sites, g)
        out[job.name] = Placement(site.name, backend, dyn, est, why, ests, observe="e2e")
    return out


def _link_cpu_preferred(job: Job, sites: list[Site], g: float) -> tuple[Site, str, float, str]:
    """link-aware for ``cpu_preferred``: the CPU that meets the SLO, else the nearest free
    GPU (its slot planned for the promotion); starts on the CPU."""
    scored = []
    for i, s in enumerate(_candidates(job, sites)):
        cpu = _cpu_ms(s, job, g)
        gpu = s.estimate_ms(job.cost, "gpu", g, job.rate_rps)
        ok = _cpu_ms(s, job, g, P95_FACTOR) <= job.slo_ms
        score = cpu if ok or gpu is None or not s.gpu_slots_free else gpu
        scored.append((score, i, s))
    score, _i, site = min(scored)
    est = _cpu_ms(site, job, g)
    if score != est:  # placed for its GPU: plan the slot for the promotion
        _take(site)
        why = (
            f"cpu_preferred: the CPU's p95 estimate misses the SLO; nearest free GPU "
            f"(link + GPU {score:.1f} ms), starts on the CPU"
        )
    elif _cpu_ms(site, job, g, P95_FACTOR) <= job.slo_ms:
        why = f"cpu_preferred: lowest link + CPU that meets the SLO ({est:.1f} ms)"
    else:
        why = f"cpu_preferred: no free GPU helps; lowest link + CPU ({est:.1f} ms)"
    return site, "cpu", est, why


def _link_nearest(job: Job, sites: list[Site], g: float) -> tuple[Site, str, float, str]:
    """link-aware for the other modes: Gaia's initial backend on the node with the lowest
    link + backend estimate (a GPU needs a free slot, else the function starts on CPU)."""
    backend = _initial_backend(job.mode)
    best = _best(job, sites, backend, g, True)
    if best is None:  # no GPU slot: start on CPU
        backend = "cpu"
        best = _best_cpu(job, sites, g)
    site, est = best
    if backend == "gpu":
        _take(site)
    why = f"mode {job.mode}: lowest link + {backend.upper()} estimate ({est:.1f} ms)"
    return site, backend, est, why
