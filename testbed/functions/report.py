"""Report of a functions sweep (e.g. experiments/gaia.yaml): every policy, several seeds.

Writes ``report.md`` + ``report.html``: per policy (all functions) and per policy and
function, mean ± sample std over seeds of SLO attainment, p50/p95 end-to-end latency,
promotions, demotions, mode switches and GPU-seconds (:mod:`.seeds`); the same figures
per seed; the latency reduction of every accelerable function against ``static-cpu``
(paired by seed); the runs; every decision of the runtime; and two plots: latency over
time coloured by backend (the mode timeline, lowest seed) and p95 per function and
policy (mean ± std bars, each seed a dot).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from testbed.functions.seeds import (
    RunFigures,
    by_policy,
    decision_of,
    function_table,
    policy_table,
    reduction_table,
    seed_table,
)
from testbed.report_pages import Section, write_pages
from testbed.rows import RunRow
from testbed.stats import fmt_mean_std, mean_std
from testbed.store import RunStore


def load(store: RunStore, sweep_id: str) -> list[RunFigures]:
    """The sweep's completed functions runs with their decisions (by policy, then seed)."""
    runs = []
    for r in store.runs(sweep_id):
        s = r.summary_dict
        if r.status == "completed" and isinstance(s.get("functions"), dict):
            runs.append(figures_of(store, r))
    return [r for group in by_policy(runs).values() for r in group]


def figures_of(store: RunStore, r: RunRow) -> RunFigures:
    """One completed run's figures: summary, seed, wall time and the runtime's decisions."""
    decisions = sorted(
        (
            decision_of(str(m.node), m.value, m.tags)
            for m in store.tagged_metrics(r.run_id)
            if m.name == "mode_decision"
        ),
        key=lambda d: d.t_s,
    )
    s = r.summary_dict
    wall = None if r.finished_at is None else r.finished_at - r.created_at
    return RunFigures(s["policy"], int(r.seed or 0), r.run_id, s, tuple(decisions), wall)


def _f(v: float | None, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def run_table(store: RunStore, runs: list[RunFigures]) -> tuple[list[str], list[list[str]]]:
    """One row per run: policy, seed, id, start (UTC), wall time, host GFLOPS, requests."""
    head = ["policy", "seed", "run", "started UTC", "wall s", "host GFLOPS", "requests ok"]
    head += ["failed", "unanswered"]
    rows = []
    for r in runs:
        started = dt.datetime.fromtimestamp(store.run(r.run_id).created_at, dt.UTC)
        s = r.summary
        rows.append(
            [
                r.policy,
                str(r.seed),
                r.run_id,
                started.strftime("%Y-%m-%d %H:%M"),
                _f(r.wall_s, 0),
                _f(s.get("host_gflops")),
                str(s["requests_ok"]),
                str(s.get("requests_failed", 0)),
                str(s.get("requests_unanswered", 0)),
            ]
        )
    return head, rows


def decisions(runs: list[RunFigures]) -> tuple[list[str], list[list[str]]]:
    """Every mode decision of the runtime, per policy and seed in time order (blocked too)."""
    head = ["policy", "seed", "t s", "function", "mode", "applied", "p95 ms", "rate rps"]
    head += ["reason"]
    return head, [
        [
            r.policy,
            str(r.seed),
            _f(d.t_s),
            d.function,
            f"{d.old} -> {d.new}",
            "yes" if d.applied else "no",
            _f(d.p95_ms),
            _f(d.rate_rps, 2),
            d.reason,
        ]
        for r in runs
        for d in r.decisions
    ]


def plots(store: RunStore, runs: list[RunFigures], out: Path) -> list[str]:
    """``timeline.png`` (each policy's lowest seed) and ``p95.png`` (mean ± std, seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = by_policy(runs)
    first = [group[0] for group in groups.values()]
    fig, axes = plt.subplots(len(first), 1, figsize=(9, 2.4 * len(first)), sharex=True)
    axes = [axes] if len(first) == 1 else list(axes)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, r in zip(axes, first, strict=True):
        rows = [m for m in store.tagged_metrics(r.run_id) if m.name == "e2e_ms"]
        for k, name in enumerate(r.functions):
            pts = [(m.tags, m.value) for m in rows if m.node == name and m.value is not None]
            for backend, marker in (("cpu", "."), ("gpu", "^")):
                sel = [(t["t_s"], v) for t, v in pts if str(t["backend"]).startswith(backend)]
                if sel:
                    ax.scatter(
                        *zip(*sel, strict=True),
                        s=6,
                        marker=marker,
                        color=colors[k % len(colors)],
                        label=f"{name} ({backend})",
                    )
        ax.set_yscale("log")
        ax.set_ylabel("e2e ms")
        ax.set_title(
            f"{r.policy}, seed {r.seed}: latency over time (dot: CPU backend, triangle: GPU)",
            fontsize=9,
        )
        ax.legend(fontsize=6, ncol=4, loc="upper right")
    axes[-1].set_xlabel("time since load start, s")
    fig.tight_layout()
    fig.savefig(out / "timeline.png", dpi=110)
    plt.close(fig)

    names = first[0].functions
    fig, ax = plt.subplots(figsize=(8, 3.4))
    width = 0.8 / len(groups)
    for k, (policy, group) in enumerate(groups.items()):
        xs = [i + k * width for i in range(len(names))]
        per = [[p for r in group if (p := r.fn(n, "p95_ms")) is not None] for n in names]
        stats = [mean_std(vals) if vals else (0.0, None) for vals in per]
        ax.bar(
            xs,
            [m for m, _sd in stats],
            width,
            yerr=[sd or 0.0 for _m, sd in stats],  # sample std over seeds
            capsize=2,
            label=f"{policy} (n={len(group)})",
        )
        for x, vals in zip(xs, per, strict=True):
            ax.scatter([x] * len(vals), vals, s=5, color="black", zorder=3)
    ax.set_xticks([i + width * (len(groups) - 1) / 2 for i in range(len(names))], names)
    ax.set_yscale("log")
    ax.set_ylabel("p95 e2e latency, ms\nmean ± std over seeds; dots: seeds", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "p95.png", dpi=110)
    plt.close(fig)
    return ["timeline.png", "p95.png"]


def write_functions_report(store: RunStore, sweep_id: str, out: Path) -> tuple[Path, Path]:
    """Write the functions report of ``sweep_id`` into ``out``."""
    runs = load(store, sweep_id)
    if not runs:
        raise ValueError(f"sweep {sweep_id!r}: no completed functions runs in {store.path}")
    out.mkdir(parents=True, exist_ok=True)
    pngs = plots(store, runs, out)
    groups = by_policy(runs)
    timing = sorted({r.summary.get("gpu_timing") or "no GPU used" for r in runs})
    idle = [
        f"{p}: {name} {fmt_mean_std([r.fn(name, 'gpu_seconds') for r in g])} GPU-s"
        for p, g in groups.items()
        for name in g[0].functions
        if g[0].summary["functions"][name]["mode"] == "cpu"
    ]
    seeds = sorted({r.seed for r in runs})
    note = (
        f"{len(runs)} completed runs, seeds {', '.join(map(str, seeds))}; figures are the "
        "mean ± sample std (n - 1) over the seeds a policy ran, per-seed values in seed "
        "order below. Latency: end to end, measured through the emulated links; server "
        f"part = device time. GPU backends: {', '.join(timing)}. Functions with mode `cpu` "
        "(GPU-seconds): " + "; ".join(idle) + ". Promotion: an applied CPU -> GPU mode "
        "change; demotion: GPU -> CPU; mode switches: every applied change."
    )
    sections: list[Section] = [
        ("Per policy, all functions (mean ± std over seeds)", *policy_table(runs)),
        ("Per policy and function (mean ± std over seeds)", *function_table(runs)),
        ("Per seed (values in seed order)", *seed_table(runs)),
        ("Latency reduction vs static-cpu, paired by seed (accelerable functions)",
         *reduction_table(runs)),
        ("Runs", *run_table(store, runs)),
        ("Mode changes over time (the dynamic runtime's decisions)", *decisions(runs)),
    ]  # fmt: skip
    return write_pages(out, f"Functions report: {sweep_id}", note, sections, pngs)
