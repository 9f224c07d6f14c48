"""The failure study: the sweep report of an FL workload (tables, mean +- std over seeds,
and plots, as markdown and HTML).

For FL sweeps with failure conditions (experiments/failure_study.yaml) it computes,
per run: global accuracy (server's held-out test set), federated accuracy (mean over
the silos that answered), optimism = federated - global, the failed silo's own test
accuracy (oracle view, measured by the server on that silo's local split), the accuracy
on "its" classes (those it holds the largest share of) before and after the failure,
and its leave-one-out contribution. All figures are measured.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.report_pages import write_pages
from testbed.store import RunStore


@dataclass
class RunFigures:
    """What the report needs from one run."""

    run_id: str
    seed: int
    skew: str
    condition: str  # none | permanent | transient
    fail_round: int | None
    failed_node: str | None
    global_acc: dict[int, float]
    federated_acc: dict[int, float]
    silo_acc: dict[str, dict[int, float]]
    class_acc: dict[int, dict[int, float]]
    contribution: dict[str, dict[int, float]]
    silo_classes: dict[str, list[int]] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return max(self.global_acc)

    def optimism(self) -> dict[int, float]:
        """Federated minus global accuracy, per round where both exist."""
        return {
            r: self.federated_acc[r] - self.global_acc[r]
            for r in self.federated_acc
            if r in self.global_acc
        }

    def own_classes(self, node: str) -> list[int]:
        """Classes of which ``node`` holds the largest share of training samples."""
        counts = self.silo_classes
        if node not in counts:
            return []
        ncls = len(counts[node])
        return [
            c
            for c in range(ncls)
            if counts[node][c] > 0 and counts[node][c] == max(v[c] for v in counts.values())
        ]

    def classes_acc(self, classes: list[int], r: int) -> float | None:
        vals = [
            self.class_acc[c][r]
            for c in classes
            if c in self.class_acc
            and r in self.class_acc[c]
            and self.class_acc[c][r] == self.class_acc[c][r]
        ]
        return sum(vals) / len(vals) if vals else None


def skew_label(assign: dict[str, Any]) -> str:
    p = assign.get("workload.fl.partitioner")
    if isinstance(p, dict):
        return "iid" if p.get("name") == "iid" else f"alpha={p.get('alpha')}"
    if "workload.fl.partitioner.alpha" in assign:
        return f"alpha={assign['workload.fl.partitioner.alpha']}"
    return "default"


def load_sweep(store: RunStore, sweep_id: str) -> list[RunFigures]:
    """Figures of every completed run of a sweep."""
    out = []
    for r in store.runs(sweep_id):
        if r.status != "completed" or not r.artifact_dir:
            continue
        meta = json.loads((Path(r.artifact_dir) / "meta.json").read_text())
        assign = meta.get("sweep_assignment", {})
        faults = assign.get("faults") or []
        f = faults[0] if faults else None
        cond = "none" if f is None else ("permanent" if f["kind"] == "crash" else "transient")
        fig = RunFigures(
            r.run_id,
            int(r.seed or 0),
            skew_label(assign),
            cond,
            f.get("at_round") if f else None,
            f.get("node") if f else None,
            {},
            {},
            defaultdict(dict),
            defaultdict(dict),
            defaultdict(dict),
        )
        for rnd, node, name, value, _t in store.metrics(r.run_id):
            if rnd is None:
                continue
            if name == "global_acc":
                fig.global_acc[rnd] = value
            elif name == "federated_acc":
                fig.federated_acc[rnd] = value
            elif name == "silo_acc":
                fig.silo_acc[node][rnd] = value
            elif name == "contribution":
                fig.contribution[node][rnd] = value
            elif name.startswith("class_acc/"):
                fig.class_acc[int(name.split("/")[1])][rnd] = value
        for _i, _t, kind, _r, node, data in store.events(r.run_id):
            if kind == "silo_classes":
                fig.silo_classes[node] = json.loads(data)["counts"]
        if fig.global_acc:
            out.append(fig)
    return out


def _ms(vals: list[float]) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return f"{statistics.mean(vals):.3f} ± {sd:.3f}"


def _timing(fig: RunFigures, fail_rounds: list[int]) -> str:
    if fig.fail_round is None:
        return "baseline"
    names = ["early", "mid", "late"] if len(fail_rounds) == 3 else [f"r{r}" for r in fail_rounds]
    return f"{fig.condition} {names[fail_rounds.index(fig.fail_round)]} (r{fig.fail_round})"


def _timing_key(label: str) -> tuple[int, str, int]:
    """Order conditions: the baseline, then each failure kind from early to late."""
    if label == "baseline":
        return (0, "", 0)
    kind = label.split(" ", 1)[0]
    return (1, kind, int(label.rsplit("(r", 1)[1].rstrip(")")))


def summarize(figs: list[RunFigures]) -> tuple[list[str], list[list[str]]]:
    """One table row per (skew, condition): mean ± std over seeds."""
    fail_rounds = sorted({f.fail_round for f in figs if f.fail_round is not None})
    groups: dict[tuple[str, str], list[RunFigures]] = defaultdict(list)
    for f in figs:
        groups[(f.skew, _timing(f, fail_rounds))].append(f)
    # the same seed's baseline (same partition and initial model): deltas are paired
    base = {(f.skew, f.seed): f for f in figs if f.fail_round is None}
    head = [
        "skew",
        "condition",
        "seeds",
        "final global acc",
        "Δ vs baseline (paired by seed)",
        "final federated acc",
        "optimism (final)",
        "failed silo acc (final)",
        "its Δ vs baseline (paired)",
        "its classes: before → final",
        "its LOO contribution",
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
        silo_delta = [a - b for a, b in zip(own, own_base, strict=True) if None not in (a, b)]
        before = [f.classes_acc(f.own_classes(node), max((f.fail_round or 2) - 1, 1)) for f in fs]
        after = [f.classes_acc(f.own_classes(node), r) for f, r in zip(fs, R, strict=True)]
        contrib = [
            statistics.mean(f.contribution[node].values()) for f in fs if f.contribution.get(node)
        ]
        rows.append(
            [
                skew,
                timing,
                str(len(fs)),
                _ms(final),
                _ms(delta) if delta else "-",
                _ms(fed),
                _ms(opt),
                _ms(silo),
                _ms(silo_delta) if silo_delta else "-",
                f"{_ms(before)} → {_ms(after)}",
                _ms(contrib),
            ]
        )
    return head, rows


def _final_silo(f: RunFigures, node: str) -> float | None:
    return f.silo_acc.get(node, {}).get(f.rounds)


def _skew_key(s: str) -> float:
    """IID first, then decreasing alpha (increasing skew)."""
    if s == "iid":
        return float("-inf")
    return -float(s.split("=")[1]) if s.startswith("alpha=") else 0.0


def plots(figs: list[RunFigures], out: Path) -> list[str]:
    """Write the report's PNGs; return their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    skews = sorted({f.skew for f in figs}, key=_skew_key)
    fail_rounds = sorted({f.fail_round for f in figs if f.fail_round is not None})

    def mean_curve(fs: list[RunFigures], attr: str) -> tuple[list[int], list[float]]:
        rounds = sorted(set.intersection(*(set(getattr(f, attr)) for f in fs)))
        return rounds, [statistics.mean(getattr(f, attr)[r] for f in fs) for r in rounds]

    # 1. accuracy vs round per condition, failure marked
    fig, axes = plt.subplots(
        1, len(skews), figsize=(4 * len(skews), 3.4), sharey=True, squeeze=False
    )
    for ax, skew in zip(axes[0], skews, strict=True):
        conds = defaultdict(list)
        for f in figs:
            if f.skew == skew:
                conds[_timing(f, fail_rounds)].append(f)
        for label, fs in sorted(conds.items(), key=lambda kv: _timing_key(kv[0])):
            x, y = mean_curve(fs, "global_acc")
            (line,) = ax.plot(x, y, label=label, lw=2 if label == "baseline" else 1)
            if fs[0].fail_round:
                ax.axvline(fs[0].fail_round - 0.5, color=line.get_color(), ls=":", lw=0.8)
        ax.set_title(skew)
        ax.set_xlabel("round")
    axes[0][0].set_ylabel("global test accuracy (measured)")
    for ax in axes[0]:
        ax.legend(fontsize=5, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "accuracy_vs_round.png", dpi=110)
    files.append("accuracy_vs_round.png")
    plt.close(fig)

    # 2. optimism vs skew (final round), baseline vs with failure
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for cond in ("none", "permanent", "transient"):
        ys = []
        for skew in skews:
            vals = [
                f.optimism().get(f.rounds) for f in figs if f.skew == skew and f.condition == cond
            ]
            vals = [v for v in vals if v is not None]
            ys.append(statistics.mean(vals) if vals else float("nan"))
        ax.plot(skews, ys, "o-", label="baseline" if cond == "none" else f"{cond} failure")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_ylabel("optimism = federated - global acc")
    ax.set_xlabel("label skew")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "optimism_vs_skew.png", dpi=110)
    files.append("optimism_vs_skew.png")
    plt.close(fig)

    # 3. final accuracy vs failure timing, and 4. failed silo's own accuracy
    for fname, getter, ylabel in (
        ("final_acc_vs_timing.png", lambda f: f.global_acc[f.rounds], "final global accuracy"),
        (
            "failed_silo_acc.png",
            lambda f: _final_silo(f, f.failed_node or "silo-2"),
            "failed silo's own test accuracy (final)",
        ),
    ):
        fig, ax = plt.subplots(figsize=(6, 3.4))
        labels = sorted({_timing(f, fail_rounds) for f in figs}, key=_timing_key)
        width = 0.8 / max(len(skews), 1)
        for i, skew in enumerate(skews):
            ys, spread = [], []
            for lab in labels:
                vals = [
                    getter(f) for f in figs if f.skew == skew and _timing(f, fail_rounds) == lab
                ]
                vals = [v for v in vals if v is not None]
                ys.append(statistics.mean(vals) if vals else 0)
                spread.append(statistics.stdev(vals) if len(vals) > 1 else 0)
            ax.bar(
                [j + i * width for j in range(len(labels))],
                ys,
                width,
                yerr=spread,  # std over seeds
                capsize=2,
                error_kw={"lw": 0.7},
                label=skew,
            )
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))])
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(f"{ylabel}\nmean ± std over seeds", fontsize=8)
        ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        files.append(fname)
        plt.close(fig)
    return files


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
    return write_pages(
        out, f"Sweep report: {sweep_id}", intro, [(None, head, rows)], plots(figs, out)
    )
