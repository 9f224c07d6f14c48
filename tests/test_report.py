"""Sweep report helpers that need no runs."""

from __future__ import annotations

from testbed.failure_study import _timing_key


def test_conditions_are_ordered_baseline_then_early_mid_late() -> None:
    labels = [
        "transient late (r6)",
        "permanent mid (r4)",
        "baseline",
        "transient early (r2)",
        "permanent late (r6)",
        "permanent early (r2)",
        "permanent r10 (r10)",
    ]
    assert sorted(labels, key=_timing_key) == [
        "baseline",
        "permanent early (r2)",
        "permanent mid (r4)",
        "permanent late (r6)",
        "permanent r10 (r10)",
        "transient early (r2)",
        "transient late (r6)",
    ]


def _fig(seed: int, cond: str, fail: int | None, missed: set, final: float):  # noqa: ANN202
    from collections import defaultdict

    from testbed.failure_study import RunFigures

    acc = {0: 0.1, 1: 0.5, 2: final}
    dd = defaultdict(dict)  # type: ignore[var-annotated]
    return RunFigures(
        f"run-{seed}-{cond}-{fail}",
        seed,
        "iid",
        cond,
        fail,
        "silo-2" if fail else None,
        acc,
        {},
        dd,
        dd,
        dd,
        missed=frozenset(missed),
    )


def test_determinism_pairs_only_runs_that_left_out_the_same_replies() -> None:
    from testbed.failure_study_checks import determinism

    figs = [
        _fig(1, "none", None, set(), 0.9),
        _fig(1, "permanent", 2, {(2, "silo-2")}, 0.8),
        _fig(1, "transient", 2, {(2, "silo-2")}, 0.8),
        _fig(2, "permanent", 2, {(2, "silo-2")}, 0.7),
        _fig(2, "transient", 2, {(2, "silo-2")}, 0.75),  # not deterministic: shows its gap
        _fig(2, "permanent", 1, {(1, "silo-2"), (2, "silo-2")}, 0.6),
    ]
    head, rows = determinism(figs)
    assert head[-1] == "max |gap|"
    assert [(r[1], r[3], r[5]) for r in rows] == [
        ("1", "r2 silo-2", "0.00e+00"),
        ("2", "r2 silo-2", "5.00e-02"),
    ]


def test_other_misses_lists_silos_that_are_not_the_failed_one() -> None:
    from testbed.failure_study_checks import other_misses

    figs = [
        _fig(1, "permanent", 2, {(2, "silo-2"), (1, "silo-3"), (2, "silo-3")}, 0.8),
        _fig(2, "permanent", 2, {(2, "silo-2")}, 0.8),
        _fig(3, "none", None, {(2, "silo-4")}, 0.8),
    ]
    _head, rows = other_misses(figs)
    assert [(r[2], r[4], r[5]) for r in rows] == [("1", "silo-3", "1, 2"), ("3", "silo-4", "2")]
