"""The summary of a functions run, read back from the store.

Request counts, latency percentiles, SLO violations, timing labels and switches come
from the run's metrics (``e2e_ms``, ``request_error``, ``mode_decision``): the summary
is a view of the tables, not a second record. What only the node runtimes know (their
backend at the end, errors, GPU-seconds, cold starts; ``/stats``) and the run's own
decisions (modes, placements, calibration) are added beside it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from kernel.dilation import emulated, tdf
from testbed.rows import TaggedMetricRow
from testbed.store import RunStore

if TYPE_CHECKING:
    from testbed.functions.experiment import Prepared


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile of ``values`` (None when empty)."""
    return float(np.percentile(values, q)) if values else None


class Observed:
    """What the store holds of a functions run, per function."""

    def __init__(self, rows: list[TaggedMetricRow]) -> None:
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.timings: dict[str, set[tuple[str, str]]] = defaultdict(set)
        self.switches: dict[str, int] = defaultdict(int)
        self.errors = 0
        for r in rows:
            self._add(r)

    def _add(self, r: TaggedMetricRow) -> None:
        fn = str(r.node)
        if r.name == "e2e_ms" and r.value is not None:
            self.latency[fn].append(r.value)
            self.timings[fn].add((str(r.tags["backend"]), str(r.tags["timing"])))
        elif r.name == "request_error":
            self.errors += 1
        elif r.name == "mode_decision" and r.value == 1.0:
            self.switches[fn] += 1

    @property
    def ok(self) -> int:
        return sum(len(v) for v in self.latency.values())

    def gpu_backends(self) -> list[str]:
        return sorted(
            {b for seen in self.timings.values() for b, _t in seen if b.startswith("gpu-")}
        )


def gpu_timing(backends: list[str]) -> str | None:
    """How the GPU latencies were obtained (label of the run's figures)."""
    if "gpu-emulated" in backends:
        return "emulated (modelled from profile)"
    return "measured (CUDA)" if backends else None


def function_summary(
    name: str, prep: Prepared, seen: Observed, stats: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """One function's row of the summary."""
    fn = next(f for f in prep.spec.functions if f.name == name)
    pl = prep.placements[name]
    st = stats.get(pl.node, {}).get("functions", {}).get(name, {})
    v = seen.latency.get(name, [])
    misses = int(sum(x > fn.slo_ms for x in v))
    cal = prep.cal[name]
    return {
        "node": pl.node,
        "tier": prep.sites[pl.node][0],
        "mode": prep.modes[name],
        "mode_reasons": prep.reasons[name],
        "start_backend": pl.backend,
        "end_backend": st.get("backend"),
        "dynamic": pl.dynamic,
        "placement": pl.reason,
        "estimate_ms": pl.estimate_ms,
        "requests": len(v),
        "errors": st.get("errors"),
        "p50_ms": percentile(v, 50),
        "p95_ms": percentile(v, 95),
        "slo_ms": fn.slo_ms,
        "slo_violations": misses,
        "slo_violation_pct": 100.0 * misses / max(1, len(v)),
        "gpu_seconds": st.get("gpu_seconds", 0.0),
        "timing": sorted(f"{b}: {t}" for b, t in seen.timings.get(name, set())),
        "switches": seen.switches.get(name, 0),
        "cold_starts": st.get("cold_starts"),
        "host_cost_ms": {"wall": cal["wall_s"] * 1e3, "cpu": cal["cpu_s"] * 1e3},
    }


def summarize(
    store: RunStore,
    run_id: str,
    prep: Prepared,
    stats: dict[str, dict[str, Any]],
    load_wall_s: float,
    total_requests: int,
) -> dict[str, Any]:
    """The run summary: per function and overall, from the store plus ``stats``."""
    seen = Observed(store.tagged_metrics(run_id))
    per_fn = {fn.name: function_summary(fn.name, prep, seen, stats) for fn in prep.spec.functions}
    backends = seen.gpu_backends()
    return {
        "policy": prep.spec.policy,
        "functions": per_fn,
        "host_gflops": prep.host_gflops,
        "gpu_backend": backends or None,
        "gpu_timing": gpu_timing(backends),
        "requests_ok": seen.ok,
        "requests_failed": seen.errors,
        "requests_unanswered": total_requests - seen.ok - seen.errors,
        "load_wall_s": load_wall_s,
        **({"load_emulated_s": emulated(load_wall_s)} if tdf() != 1.0 else {}),
        "gpu_seconds": sum(f["gpu_seconds"] or 0.0 for f in per_fn.values()),
    }
