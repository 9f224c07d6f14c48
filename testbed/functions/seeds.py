"""Figures of a functions sweep over seeds: per run, then mean ± sample std per policy.

A functions sweep (e.g. experiments/gaia.yaml with ``repetitions: 3``) runs every
policy once per seed; the seed draws the arrivals, so runs of different policies with
the same seed see the same requests. This module turns the runs' summaries and the
runtime's decisions into figures per (policy, function, seed) and aggregates them: the
mean and the sample standard deviation (n - 1) over seeds, with the per-seed values
kept beside them in seed order (:mod:`testbed.stats`). Nothing here reads the store;
:mod:`.report` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from testbed.stats import fmt_mean_std

ORDER = ("static-cpu", "static-gpu", "gaia", "link-aware", "gaia-link")
GPU_MODES = ("gpu", "gpu_preferred")

# per-function metrics: (column head, decimals)
FN_METRICS: dict[str, tuple[str, int]] = {
    "attain_pct": ("SLO attainment %", 1),
    "p50_ms": ("p50 ms", 1),
    "p95_ms": ("p95 ms", 1),
    "promotions": ("promotions", 1),
    "demotions": ("demotions", 1),
    "switches": ("mode switches", 1),
    "gpu_seconds": ("GPU-s", 1),
}


@dataclass(frozen=True)
class Decision:
    """One mode decision of the dynamic runtime (applied, or blocked)."""

    t_s: float
    function: str
    old: str
    new: str
    applied: bool
    p95_ms: float | None
    rate_rps: float | None
    reason: str

    @property
    def promotion(self) -> bool:
        """An applied move from a CPU backend to a GPU backend (Gaia's case 2)."""
        return self.applied and self.old not in GPU_MODES and self.new in GPU_MODES

    @property
    def demotion(self) -> bool:
        """An applied move from a GPU backend to a CPU backend (cases 3.1, 4.x)."""
        return self.applied and self.old in GPU_MODES and self.new not in GPU_MODES


def decision_of(function: str, value: float | None, tags: dict[str, Any]) -> Decision:
    """A ``mode_decision`` metric row (value 1.0: applied) as a :class:`Decision`."""
    p95, rate = tags.get("p95_ms"), tags.get("rate_rps")
    return Decision(
        t_s=float(tags["t_s"]),
        function=function,
        old=str(tags["old"]),
        new=str(tags["new"]),
        applied=value == 1.0,
        p95_ms=None if p95 is None else float(p95),
        rate_rps=None if rate is None else float(rate),
        reason=str(tags["reason"]),
    )


@dataclass(frozen=True)
class RunFigures:
    """One completed run: its policy, seed, summary and the runtime's decisions."""

    policy: str
    seed: int
    run_id: str
    summary: dict[str, Any]
    decisions: tuple[Decision, ...] = ()
    wall_s: float | None = None

    @property
    def functions(self) -> list[str]:
        return list(self.summary["functions"])

    def fn(self, name: str, metric: str) -> float | None:
        """``metric`` (a key of :data:`FN_METRICS`) of function ``name`` in this run."""
        f = self.summary["functions"][name]
        if metric == "attain_pct":
            return None if not f["requests"] else 100.0 - float(f["slo_violation_pct"])
        if metric in ("promotions", "demotions"):
            attr = "promotion" if metric == "promotions" else "demotion"
            return float(sum(getattr(d, attr) for d in self.decisions if d.function == name))
        v = f[metric]
        return None if v is None else float(v)

    def total(self, metric: str) -> float | None:
        """``metric`` over all functions: attainment over all requests, else the sum."""
        fs = self.summary["functions"].values()
        if metric == "attain_pct":
            n = sum(f["requests"] for f in fs)
            return None if not n else 100.0 * (n - sum(f["slo_violations"] for f in fs)) / n
        if metric in ("p50_ms", "p95_ms"):
            raise ValueError(f"{metric}: no total over functions")
        vals = [self.fn(name, metric) for name in self.functions]
        return sum(v for v in vals if v is not None)


def fmt_seeds(values: Sequence[float | None], nd: int = 1) -> str:
    """The per-seed values in seed order, ``a / b / c`` ("-" for a missing one)."""
    return " / ".join("-" if v is None else f"{v:.{nd}f}" for v in values)


def by_policy(runs: Sequence[RunFigures]) -> dict[str, list[RunFigures]]:
    """Runs grouped by policy (in :data:`ORDER`), each group in seed order.

    Raises ValueError when a policy has two runs of one seed (a store holding a
    re-run: which one counts must be decided, not guessed)."""
    groups: dict[str, list[RunFigures]] = {}
    for r in sorted(runs, key=lambda r: (_policy_key(r.policy), r.seed)):
        group = groups.setdefault(r.policy, [])
        if group and group[-1].seed == r.seed:
            raise ValueError(f"policy {r.policy}: two runs of seed {r.seed}")
        group.append(r)
    return groups


def _policy_key(policy: str) -> tuple[int, str]:
    return (ORDER.index(policy) if policy in ORDER else len(ORDER), policy)


def _same_or_each(values: Sequence[str]) -> str:
    """The value when all seeds agree, else each in seed order."""
    return values[0] if len(set(values)) == 1 else " / ".join(values)


def policy_table(runs: Sequence[RunFigures]) -> tuple[list[str], list[list[str]]]:
    """One row per policy: all functions together, mean ± std over seeds."""
    metrics = ("attain_pct", "gpu_seconds", "promotions", "demotions", "switches")
    head = ["policy", "seeds", "requests ok / failed"]
    head += [f"{FN_METRICS[m][0]} (mean ± std)" for m in metrics]
    rows = []
    for policy, group in by_policy(runs).items():
        ok = _same_or_each([str(r.summary["requests_ok"]) for r in group])
        bad = _same_or_each([str(_failed(r)) for r in group])
        row = [policy, ", ".join(str(r.seed) for r in group), f"{ok} / {bad}"]
        row += [fmt_mean_std([r.total(m) for r in group], FN_METRICS[m][1]) for m in metrics]
        rows.append(row)
    return head, rows


def _failed(r: RunFigures) -> int:
    s = r.summary
    return int(s.get("requests_failed", 0)) + int(s.get("requests_unanswered", 0))


def function_table(runs: Sequence[RunFigures]) -> tuple[list[str], list[list[str]]]:
    """One row per (policy, function): placement and mean ± std over seeds."""
    head = ["policy", "function", "node", "mode", "backend start -> end", "SLO ms"]
    head += [f"{h} (mean ± std)" for h, _nd in FN_METRICS.values()]
    head += ["device time (any seed)"]
    rows = []
    for policy, group in by_policy(runs).items():
        for name in group[0].functions:
            fs = [r.summary["functions"][name] for r in group]
            row = [
                policy,
                name,
                _same_or_each([f"{f['node']} ({f['tier']})" for f in fs]),
                _same_or_each([f["mode"] for f in fs]),
                _same_or_each([f"{f['start_backend']} -> {f['end_backend']}" for f in fs]),
                f"{fs[0]['slo_ms']:.0f}",
            ]
            row += [fmt_mean_std([r.fn(name, m) for r in group], nd) for m, (_h, nd) in _items()]
            row.append("; ".join(sorted({t for f in fs for t in f.get("timing", [])})))
            rows.append(row)
    return head, rows


def _items() -> list[tuple[str, tuple[str, int]]]:
    return list(FN_METRICS.items())


def seed_table(runs: Sequence[RunFigures]) -> tuple[list[str], list[list[str]]]:
    """Per policy, all functions together, then one row per function: every metric's
    per-seed values, in seed order (no p50 / p95 over all functions)."""
    head = ["policy", "function", "seeds"] + [f"{h} per seed" for h, _nd in FN_METRICS.values()]
    rows = []
    for policy, group in by_policy(runs).items():
        seeds = " / ".join(str(r.seed) for r in group)
        for name in [None, *group[0].functions]:
            row = [policy, name or "(all)", seeds]
            row += [fmt_seeds([_value(r, name, m) for r in group], nd) for m, (_h, nd) in _items()]
            rows.append(row)
    return head, rows


def _value(r: RunFigures, name: str | None, metric: str) -> float | None:
    """``metric`` of function ``name``, or over all functions (``None``) where it adds up."""
    if name is not None:
        return r.fn(name, metric)
    return None if metric in ("p50_ms", "p95_ms") else r.total(metric)


def reduction_table(runs: Sequence[RunFigures]) -> tuple[list[str], list[list[str]]]:
    """p50 / p95 reduction vs ``static-cpu`` per accelerable function, paired by seed.

    Each seed's run is compared with static-cpu's run of the same seed (same arrivals);
    the table gives mean ± std over the seeds both policies ran, then the values."""
    groups = by_policy(runs)
    head = ["policy", "function", "seeds", "p50 reduction %", "p95 reduction %"]
    rows: list[list[str]] = []
    base = {r.seed: r for r in groups.get("static-cpu", [])}
    for policy, group in groups.items():
        if policy == "static-cpu":
            continue
        paired = [(r, base[r.seed]) for r in group if r.seed in base]
        if not paired:
            continue
        for name in group[0].functions:
            if group[0].summary["functions"][name]["mode"] == "cpu":
                continue
            cells = []
            for m in ("p50_ms", "p95_ms"):
                vals = [_reduction(r.fn(name, m), b.fn(name, m)) for r, b in paired]
                cells.append(f"{fmt_mean_std(vals)} ({fmt_seeds(vals)})")
            rows.append([policy, name, " / ".join(str(r.seed) for r, _b in paired), *cells])
    return head, rows


def _reduction(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else 100.0 * (1.0 - value / base)
