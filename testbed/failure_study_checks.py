"""Checks on a failure-study sweep that its report prints beside the main table.

- :func:`determinism`: runs of one skew and seed that left out exactly the same replies
  must end with the same model.
- :func:`other_misses`: runs in which a silo other than the failed one did not answer
  (their rows mix the condition with that silo's absence).
"""

from __future__ import annotations

from collections import defaultdict

from testbed.failure_study_runs import RunFigures, _skew_key, _timing, fail_rounds_of


def determinism(figs: list[RunFigures]) -> tuple[list[str], list[list[str]]]:
    """Runs of one skew and seed that left out exactly the same replies must end with the
    same model (e.g. a permanent and a transient failure that both miss only the last
    round): one row per such group, with the largest gap of global accuracy over rounds."""
    fail_rounds = fail_rounds_of(figs)
    groups: dict[tuple[str, int, frozenset[tuple[int, str]]], list[RunFigures]] = defaultdict(list)
    for f in figs:
        groups[(f.skew, f.seed, f.missed)].append(f)
    head = ["skew", "seed", "conditions", "replies left out", "final global acc", "max |gap|"]
    rows = []
    for (skew, seed, missed), fs in sorted(
        groups.items(), key=lambda kv: (_skew_key(kv[0][0]), kv[0][1], sorted(kv[0][2]))
    ):
        if len(fs) < 2:
            continue
        rounds = set.intersection(*(set(f.global_acc) for f in fs))
        gap = max(
            max(f.global_acc[r] for f in fs) - min(f.global_acc[r] for f in fs) for r in rounds
        )
        left = ", ".join(f"r{r} {n}" for r, n in sorted(missed)) or "none"
        finals = " / ".join(f"{f.global_acc[f.rounds]:.4f}" for f in fs)
        names = " / ".join(_timing(f, fail_rounds) for f in fs)
        rows.append([skew, str(seed), names, left, finals, f"{gap:.2e}"])
    return head, rows


def other_misses(figs: list[RunFigures]) -> tuple[list[str], list[list[str]]]:
    """Runs in which a silo other than the failed one left replies out: their rows in the
    main table mix the condition with that silo's absence (one row per run and silo)."""
    fail_rounds = fail_rounds_of(figs)
    head = ["run", "skew", "seed", "condition", "silo", "rounds left out"]
    rows = []
    for f in sorted(figs, key=lambda f: (_skew_key(f.skew), f.seed, f.run_id)):
        by_node: dict[str, list[int]] = defaultdict(list)
        for r, n in sorted(f.missed):
            if n != f.failed_node:
                by_node[n].append(r)
        cond = _timing(f, fail_rounds)
        for n, rs in sorted(by_node.items()):
            rows.append([f.run_id, f.skew, str(f.seed), cond, n, ", ".join(map(str, rs))])
    return head, rows
