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
