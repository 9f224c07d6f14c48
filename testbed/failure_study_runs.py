"""One failure-study run's figures, read from the run store (:class:`RunFigures`), and
the labels that order a sweep's runs: its skew and its failure condition.

:mod:`testbed.failure_study` (the report) and :mod:`testbed.failure_study_checks` (the
checks printed beside it) both read runs through this module, so neither imports the
other's.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.rows import RunRow
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
    shapley: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    #: (round, node) of every reply the run did not aggregate (status other than completed)
    missed: frozenset[tuple[int, str]] = frozenset()

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


def run_figures(store: RunStore, r: RunRow) -> RunFigures:
    """One completed run's figures: its sweep assignment, metrics and silo classes."""
    meta = json.loads((Path(r.artifact_dir or "") / "meta.json").read_text())
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
    for m in store.metrics(r.run_id):
        if m.round is not None and m.value is not None:
            _add_metric(fig, m.name, str(m.node), m.round, m.value)
    for e in store.events(r.run_id):
        if e.kind == "silo_classes" and e.data:
            fig.silo_classes[str(e.node)] = json.loads(e.data)["counts"]
    fig.missed = frozenset(
        (st.round, st.node) for st in store.round_status(r.run_id) if st.status != "completed"
    )
    return fig


def _add_metric(fig: RunFigures, name: str, node: str, rnd: int, value: float) -> None:
    """File one per-round metric of a run under the figure it belongs to."""
    by_round = {"global_acc": fig.global_acc, "federated_acc": fig.federated_acc}
    by_node = {"silo_acc": fig.silo_acc, "contribution": fig.contribution, "shapley": fig.shapley}
    if name in by_round:
        by_round[name][rnd] = value
    elif name in by_node:
        by_node[name][node][rnd] = value
    elif name.startswith("class_acc/"):
        fig.class_acc[int(name.split("/")[1])][rnd] = value


def load_sweep(store: RunStore, sweep_id: str) -> list[RunFigures]:
    """Figures of every completed run of a sweep (runs without a global accuracy skipped)."""
    runs = [r for r in store.runs(sweep_id) if r.status == "completed" and r.artifact_dir]
    return [fig for fig in (run_figures(store, r) for r in runs) if fig.global_acc]


def fail_rounds_of(figs: list[RunFigures]) -> list[int]:
    """The rounds a sweep's failures happen before, sorted (they name the conditions)."""
    return sorted({f.fail_round for f in figs if f.fail_round is not None})


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


def _skew_key(s: str) -> float:
    """IID first, then decreasing alpha (increasing skew)."""
    if s == "iid":
        return float("-inf")
    return -float(s.split("=")[1]) if s.startswith("alpha=") else 0.0
