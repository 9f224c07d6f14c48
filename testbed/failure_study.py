"""The failure study: the sweep report of an FL workload (tables, mean +- std over seeds,
and plots, as markdown and HTML).

For FL sweeps with failure conditions (experiments/failure_study.yaml) it computes,
per run: global accuracy (server's held-out test set), federated accuracy (mean over
the silos that answered), optimism = federated - global, the failed silo's own test
accuracy (oracle view, measured by the server on that silo's local split), the accuracy
on "its" classes (those it holds the largest share of) before and after the failure,
and its leave-one-out contribution and Shapley value. All figures are measured. One
run's figures are read by :mod:`testbed.failure_study_runs`.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from testbed.failure_study_checks import determinism, other_misses
from testbed.failure_study_runs import (
    RunFigures,
    _skew_key,
    _timing,
    _timing_key,
    fail_rounds_of,
    load_sweep,
)
from testbed.report_pages import Section, write_pages
from testbed.stats import fmt_mean_std, mean_std
from testbed.store import RunStore

__all__ = ["RunFigures", "load_sweep", "summarize", "write_failure_study"]


def _ms(values: Sequence[float | None]) -> str:
    """``mean ± std`` of the values that exist ("-" when none; one value: ``± 0.000``)."""
    return fmt_mean_std(values, 3, one="zero", count_missing=False)


def _ms_seeds(values: Sequence[float]) -> str:
    """``mean ± std (v1, v2, ...)``: the paired values in seed order after their summary."""
    return f"{_ms(values)} ({', '.join(f'{v:+.3f}' for v in values)})"


def summarize(figs: list[RunFigures]) -> tuple[list[str], list[list[str]]]:
    """One table row per (skew, condition): mean ± std over seeds."""
    fail_rounds = fail_rounds_of(figs)
    groups: dict[tuple[str, str], list[RunFigures]] = defaultdict(list)
    for f in sorted(figs, key=lambda f: f.seed):  # seed order: the per-seed values
        groups[(f.skew, _timing(f, fail_rounds))].append(f)
    # the same seed's baseline (same partition and initial model): deltas are paired
    base = {(f.skew, f.seed): f for f in figs if f.fail_round is None}
    head = [
        "skew",
        "condition",
        "seeds",
        "final global acc",
        "Δ vs baseline, paired by seed (per seed)",
        "final federated acc",
        "optimism (final)",
        "failed silo acc (final)",
        "its Δ vs baseline, paired (per seed)",
        "its classes: before → final",
        "its LOO contribution",
        "its Shapley value",
    ]
    rows = []
    for (skew, timing), fs in sorted(
        groups.items(), key=lambda kv: (_skew_key(kv[0][0]), _timing_key(kv[0][1]))
    ):
        R = [f.rounds for f in fs]
        final = [f.global_acc[r] for f, r in zip(fs, R, strict=True)]
        fed = [f.federated_acc.get(r) for f, r in zip(fs, R, strict=True)]
        opt = [f.optimism().get(r) for f, r in zip(fs, R, strict=True)]
        node = next((f.failed_node for f in fs if f.failed_node), None) or "silo-2"
        silo = [_final_silo(f, node) for f in fs]
        paired = [(f, base[(skew, f.seed)]) for f in fs if (skew, f.seed) in base]
        delta = [f.global_acc[f.rounds] - b.global_acc[b.rounds] for f, b in paired]
        own = [_final_silo(f, node) for f, _ in paired]
        own_base = [_final_silo(b, node) for _, b in paired]
        silo_delta = [
            a - b for a, b in zip(own, own_base, strict=True) if a is not None and b is not None
        ]
        before = [f.classes_acc(f.own_classes(node), max((f.fail_round or 2) - 1, 1)) for f in fs]
        after = [f.classes_acc(f.own_classes(node), r) for f, r in zip(fs, R, strict=True)]
        contrib = _mean_per_run(fs, "contribution", node)
        shap = _mean_per_run(fs, "shapley", node)
        rows.append(
            [
                skew,
                timing,
                str(len(fs)),
                _ms(final),
                _ms_seeds(delta) if delta else "-",
                _ms(fed),
                _ms(opt),
                _ms(silo),
                _ms_seeds(silo_delta) if silo_delta else "-",
                f"{_ms(before)} → {_ms(after)}",
                _ms(contrib),
                _ms(shap),
            ]
        )
    return head, rows


def _mean_per_run(fs: list[RunFigures], metric: str, node: str) -> list[float]:
    """Per run: the mean over rounds of ``node``'s per-round ``metric`` (contribution or
    shapley); runs without it are left out."""
    per_node: list[dict[str, dict[int, float]]] = [getattr(f, metric) for f in fs]
    return [statistics.mean(m[node].values()) for m in per_node if m.get(node)]


def _final_silo(f: RunFigures, node: str) -> float | None:
    return f.silo_acc.get(node, {}).get(f.rounds)


def _mean(values: Sequence[float | None], empty: float) -> float:
    vals = [v for v in values if v is not None]
    return statistics.mean(vals) if vals else empty


def _std(values: Sequence[float | None]) -> float:
    vals = [v for v in values if v is not None]
    return (mean_std(vals)[1] or 0.0) if vals else 0.0


def _mean_curve(fs: list[RunFigures], attr: str) -> tuple[list[int], list[float]]:
    """Rounds every run has, and the mean of ``attr`` over the runs at each."""
    rounds = sorted(set.intersection(*(set(getattr(f, attr)) for f in fs)))
    return rounds, [statistics.mean(getattr(f, attr)[r] for f in fs) for r in rounds]


def _save(fig: Any, out: Path, name: str) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def plot_accuracy(figs: list[RunFigures], out: Path) -> str:
    """Accuracy vs round per condition and skew, the failure round marked."""
    import matplotlib.pyplot as plt

    skews = sorted({f.skew for f in figs}, key=_skew_key)
    fail_rounds = fail_rounds_of(figs)
    fig, axes = plt.subplots(
        1, len(skews), figsize=(4 * len(skews), 3.4), sharey=True, squeeze=False
    )
    for ax, skew in zip(axes[0], skews, strict=True):
        conds: dict[str, list[RunFigures]] = defaultdict(list)
        for f in figs:
            if f.skew == skew:
                conds[_timing(f, fail_rounds)].append(f)
        for label, fs in sorted(conds.items(), key=lambda kv: _timing_key(kv[0])):
            x, y = _mean_curve(fs, "global_acc")
            (line,) = ax.plot(x, y, label=label, lw=2 if label == "baseline" else 1)
            if fs[0].fail_round:
                ax.axvline(fs[0].fail_round - 0.5, color=line.get_color(), ls=":", lw=0.8)
        ax.set_title(skew)
        ax.set_xlabel("round")
    axes[0][0].set_ylabel("global test accuracy (measured)")
    for ax in axes[0]:
        ax.legend(fontsize=5, loc="lower right")
    return _save(fig, out, "accuracy_vs_round.png")


def plot_optimism(figs: list[RunFigures], out: Path) -> str:
    """Optimism (final round) vs skew, baseline vs with failure."""
    import matplotlib.pyplot as plt

    skews = sorted({f.skew for f in figs}, key=_skew_key)
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for cond in ("none", "permanent", "transient"):
        ys = [
            _mean(
                [f.optimism().get(f.rounds) for f in figs if f.skew == s and f.condition == cond],
                float("nan"),
            )
            for s in skews
        ]
        ax.plot(skews, ys, "o-", label="baseline" if cond == "none" else f"{cond} failure")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_ylabel("optimism = federated - global acc")
    ax.set_xlabel("label skew")
    ax.legend(fontsize=7)
    return _save(fig, out, "optimism_vs_skew.png")


def plot_bars(
    figs: list[RunFigures],
    out: Path,
    fname: str,
    getter: Callable[[RunFigures], float | None],
    ylabel: str,
) -> str:
    """Bars of ``getter`` per failure timing and skew, mean ± std over seeds."""
    import matplotlib.pyplot as plt

    skews = sorted({f.skew for f in figs}, key=_skew_key)
    fail_rounds = fail_rounds_of(figs)
    fig, ax = plt.subplots(figsize=(6, 3.4))
    labels = sorted({_timing(f, fail_rounds) for f in figs}, key=_timing_key)
    width = 0.8 / max(len(skews), 1)
    for i, skew in enumerate(skews):
        groups = [
            [getter(f) for f in figs if f.skew == skew and _timing(f, fail_rounds) == lab]
            for lab in labels
        ]
        ax.bar(
            [j + i * width for j in range(len(labels))],
            [_mean(g, 0.0) for g in groups],
            width,
            yerr=[_std(g) for g in groups],  # std over seeds
            capsize=2,
            error_kw={"lw": 0.7},
            label=skew,
        )
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))])
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(f"{ylabel}\nmean ± std over seeds", fontsize=8)
    ax.legend(fontsize=6)
    return _save(fig, out, fname)


def plots(figs: list[RunFigures], out: Path) -> list[str]:
    """Write the report's PNGs; return their file names."""
    import matplotlib

    matplotlib.use("Agg")
    return [
        plot_accuracy(figs, out),
        plot_optimism(figs, out),
        plot_bars(
            figs,
            out,
            "final_acc_vs_timing.png",
            lambda f: f.global_acc[f.rounds],
            "final global accuracy",
        ),
        plot_bars(
            figs,
            out,
            "failed_silo_acc.png",
            lambda f: _final_silo(f, f.failed_node or "silo-2"),
            "failed silo's own test accuracy (final)",
        ),
    ]


def write_failure_study(store: RunStore, sweep_id: str, out: Path) -> tuple[Path, Path]:
    """Write the failure study of an FL sweep (``report.md``, ``report.html``, PNGs) into
    ``out``; ValueError when the sweep has no completed run."""
    figs = load_sweep(store, sweep_id)
    if not figs:
        raise ValueError(f"sweep {sweep_id!r}: no completed runs in {store.path}")
    out.mkdir(parents=True, exist_ok=True)
    head, rows = summarize(figs)
    intro = (
        f"{len(figs)} completed runs; all figures measured on this testbed (mean ± std over seeds)."
    )
    d_head, d_rows = determinism(figs)
    sections: list[Section] = [(None, head, rows)]
    if d_rows:
        title = "Determinism: runs that left out the same replies (same skew, same seed)"
        sections.append((title, d_head, d_rows))
    o_head, o_rows = other_misses(figs)
    if o_rows:
        title = "Runs in which a silo other than the failed one left replies out"
        sections.append((title, o_head, o_rows))
    return write_pages(out, f"Sweep report: {sweep_id}", intro, sections, plots(figs, out))
