"""The functions report over seeds: mean ± sample std per policy and function, per-seed
values in seed order, promotions and demotions from the runtime's decisions, reductions
paired by seed, and the report written from a real SQLite store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from testbed.functions.report import load, write_functions_report
from testbed.functions.seeds import (
    Decision,
    RunFigures,
    by_policy,
    fmt_seeds,
    function_table,
    policy_table,
    reduction_table,
    seed_table,
)
from testbed.stats import fmt_mean_std
from testbed.store import RunStore

PROMOTE = ("cpu_preferred", "gpu_preferred")
DEMOTE = ("gpu_preferred", "cpu_preferred")


def fn(requests: int, misses: int, p50: float, p95: float, **extra: Any) -> dict[str, Any]:
    """A function's summary row as ``testbed.functions.summary`` writes it."""
    return {
        "node": "fog",
        "tier": "fog",
        "mode": "cpu_preferred",
        "start_backend": "cpu",
        "end_backend": "cpu",
        "requests": requests,
        "p50_ms": p50,
        "p95_ms": p95,
        "slo_ms": 30,
        "slo_violations": misses,
        "slo_violation_pct": 100.0 * misses / max(1, requests),
        "gpu_seconds": 0.0,
        "switches": 0,
        **extra,
    }


def summary(policy: str, **functions: dict[str, Any]) -> dict[str, Any]:
    ok = sum(f["requests"] for f in functions.values())
    return {"policy": policy, "functions": functions, "requests_ok": ok, "requests_failed": 0}


def dec(t: float, function: str, move: tuple[str, str], applied: bool = True) -> Decision:
    return Decision(t, function, move[0], move[1], applied, 50.0, 3.0, "case")


def run(policy: str, seed: int, decisions: tuple[Decision, ...] = (), **fns: Any) -> RunFigures:
    return RunFigures(policy, seed, f"{policy}-{seed}", summary(policy, **fns), decisions)


def test_formatting_marks_missing_seeds() -> None:
    assert fmt_mean_std([1.0, 2.0, 3.0]) == "2.0 ± 1.0"
    assert fmt_mean_std([1.0, None, 3.0]) == "2.0 ± 1.4 (n=2)"
    assert fmt_mean_std([5.0]) == "5.0"
    assert fmt_mean_std([None, None]) == "-"
    assert fmt_seeds([1.0, None, 2.25], 2) == "1.00 / - / 2.25"


def test_promotions_and_demotions_count_applied_moves_between_cpu_and_gpu() -> None:
    ds = (
        dec(2, "matmul", PROMOTE),
        dec(4, "matmul", PROMOTE, applied=False),  # blocked: no GPU slot
        dec(10, "matmul", DEMOTE),
        dec(22, "matmul", PROMOTE),
        dec(30, "mlp", ("gpu_preferred", "gpu")),  # case 0 lock: stays on the GPU
        dec(118, "mlp", DEMOTE),
    )
    r = run("gaia", 0, ds, matmul=fn(10, 5, 40, 90, switches=3), mlp=fn(10, 0, 20, 30, switches=2))
    assert (r.fn("matmul", "promotions"), r.fn("matmul", "demotions")) == (2.0, 1.0)
    assert (r.fn("mlp", "promotions"), r.fn("mlp", "demotions")) == (0.0, 1.0)
    assert r.total("promotions") == 2.0 and r.total("demotions") == 2.0
    assert r.total("switches") == 5.0


def test_overall_attainment_weighs_requests_not_functions() -> None:
    r = run("gaia", 0, matmul=fn(900, 900, 60, 90), idle=fn(100, 0, 20, 30))
    assert r.fn("matmul", "attain_pct") == 0.0
    assert r.total("attain_pct") == pytest.approx(10.0)  # a mean of the two would be 50 %
    with pytest.raises(ValueError):
        r.total("p95_ms")


def test_runs_group_by_policy_order_then_seed_and_reject_a_duplicate_seed() -> None:
    runs = [run(p, s, matmul=fn(1, 0, 1, 1)) for s in (2, 0, 1) for p in ("gaia", "static-cpu")]
    groups = by_policy(runs)
    assert list(groups) == ["static-cpu", "gaia"]
    assert [r.seed for r in groups["gaia"]] == [0, 1, 2]
    with pytest.raises(ValueError, match="two runs of seed 1"):
        by_policy([*runs, run("gaia", 1, matmul=fn(1, 0, 1, 1))])


def three_seeds() -> list[RunFigures]:
    """gaia attains 90 / 80 / 70 % on matmul over seeds 0, 1, 2 (given out of order)."""
    out = []
    for seed, misses, p50 in ((2, 30, 30.0), (0, 10, 10.0), (1, 20, 20.0)):
        ds = (dec(2, "matmul", PROMOTE),) + ((dec(9, "matmul", DEMOTE),) if seed == 1 else ())
        timing = ["cpu: modelled"] + (["gpu-emulated: modelled"] if seed == 1 else [])
        out.append(run("gaia", seed, ds, matmul=fn(100, misses, p50, 2 * p50, timing=timing)))
        out.append(run("static-cpu", seed, matmul=fn(100, 100, 100.0 * (seed + 1), 400.0)))
    return out


def test_function_table_gives_mean_and_sample_std_over_seeds() -> None:
    head, rows = function_table(three_seeds())
    row = dict(zip(head, next(r for r in rows if r[0] == "gaia"), strict=True))
    assert row["SLO attainment % (mean ± std)"] == "80.0 ± 10.0"
    assert row["p50 ms (mean ± std)"] == "20.0 ± 10.0"
    assert row["p95 ms (mean ± std)"] == "40.0 ± 20.0"
    assert row["promotions (mean ± std)"] == "1.0 ± 0.0"
    assert row["demotions (mean ± std)"] == "0.3 ± 0.6"
    assert row["node"] == "fog (fog)" and row["SLO ms"] == "30"
    assert row["device time (any seed)"] == "cpu: modelled; gpu-emulated: modelled"


def test_policy_table_aggregates_all_functions_per_seed() -> None:
    runs = [
        run("gaia", s, matmul=fn(100, m, 1, 1), idle=fn(100, 0, 1, 1))
        for s, m in ((0, 0), (1, 50), (2, 100))
    ]
    head, rows = policy_table(runs)
    row = dict(zip(head, rows[0], strict=True))
    assert row["seeds"] == "0, 1, 2"
    assert row["SLO attainment % (mean ± std)"] == "75.0 ± 25.0"  # 100, 75, 50 %
    assert row["requests ok / failed"] == "200 / 0"


def test_seed_table_lists_values_in_seed_order() -> None:
    head, rows = seed_table(three_seeds())
    gaia = {r[1]: dict(zip(head, r, strict=True)) for r in rows if r[0] == "gaia"}
    assert gaia["matmul"]["seeds"] == "0 / 1 / 2"
    assert gaia["matmul"]["SLO attainment % per seed"] == "90.0 / 80.0 / 70.0"
    assert gaia["matmul"]["demotions per seed"] == "0.0 / 1.0 / 0.0"
    assert gaia["(all)"]["p95 ms per seed"] == "- / - / -"  # no p95 over functions


def test_reductions_pair_each_seed_with_static_cpu_of_the_same_seed() -> None:
    _head, rows = reduction_table(three_seeds())
    (row,) = rows
    # p50: gaia 10 / 20 / 30 ms against static-cpu 100 / 200 / 300 ms: 90 % every seed
    assert row[:3] == ["gaia", "matmul", "0 / 1 / 2"]
    assert row[3] == "90.0 ± 0.0 (90.0 / 90.0 / 90.0)"
    assert row[4] == "90.0 ± 5.0 (95.0 / 90.0 / 85.0)"


def store_run(store: RunStore, policy: str, seed: int, attain_misses: int) -> None:
    """A completed functions run in a real store, with one applied promotion."""
    rid = f"gaia-{policy}-{seed}"
    store.create_run(rid, "gaia", seed=seed, backend="local", sweep_id="gaia-x", pid=os.getpid())
    store.add_metric(rid, "e2e_ms", 20.0, node="matmul", tags={"t_s": 1.0, "backend": "cpu"})
    store.add_metric(rid, "e2e_ms", 9.0, node="matmul", tags={"t_s": 3.0, "backend": "gpu-x"})
    tags = {"t_s": 2.0, "old": PROMOTE[0], "new": PROMOTE[1], "reason": "case 2"}
    store.add_metric(rid, "mode_decision", 1.0, node="matmul", tags={**tags, "p95_ms": 40.0})
    s = summary(policy, matmul=fn(100, attain_misses, 15.0, 19.0, switches=1))
    store.finish_run(rid, "completed", {**s, "host_gflops": 90.0, "gpu_timing": "emulated"})


def test_report_from_a_store_aggregates_seeds(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "store")
    for seed, misses in ((1, 20), (0, 10), (2, 30)):
        store_run(store, "gaia", seed, misses)
    runs = load(store, "gaia-x")
    assert [r.seed for r in runs] == [0, 1, 2]
    assert all(r.fn("matmul", "promotions") == 1.0 for r in runs)
    md, html = write_functions_report(store, "gaia-x", tmp_path / "out")
    text = md.read_text()
    assert "| gaia | 0, 1, 2 | 100 / 0 | 80.0 ± 10.0 |" in text
    assert "90.0 / 80.0 / 70.0" in text
    assert "| gaia | 1 | gaia-gaia-1 |" in text  # the runs table, one row per seed
    assert (tmp_path / "out" / "p95.png").stat().st_size > 0
    assert "80.0 ± 10.0" in html.read_text()
