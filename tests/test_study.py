"""Failure-study metrics on a small real run: the arithmetic is checked independently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodes.fl import task
from testbed.failure_study import load_sweep
from testbed.report import write_report
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

pytestmark = pytest.mark.slow

SPEC = """\
name: study-small
seed: 4
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: silo, tier: fog, count: 3}
workload:
  fl:
    partitioner: {name: dirichlet, alpha: 0.5, min_partition_size: 20}
    rounds: 4
    local_epochs: 2
    round_timeout_s: 20
    protocol_timing: fast  # (the study's arithmetic, not Flower's 3 s polls)
    evaluation: {per_silo: true, contributions: true, shapley: true}
"""
CRASH = "faults:\n  - {kind: crash, node: silo-2, at_round: 3}\n"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[RunStore, list]:
    store = RunStore(tmp_path_factory.mktemp("study"))
    runs = []
    for faults in ([], [{"kind": "crash", "node": "silo-2", "at_round": 3}]):
        exp = parse_spec(SPEC + (CRASH if faults else ""))
        assign = {"workload.fl.partitioner": {"name": "dirichlet", "alpha": 0.5}, "faults": faults}
        runs.append(
            run_experiment(
                exp, store, sweep_id="small", variant=json.dumps(assign), assignment=assign
            )
        )
    return store, runs


def test_optimism_is_federated_minus_global(sweep) -> None:
    store, runs = sweep
    figs = {f.run_id: f for f in load_sweep(store, "small")}
    for res in runs:
        g = {r: v for r, _n, _k, v, _t in store.metrics(res.run_id, "global_acc")}
        f = {r: v for r, _n, _k, v, _t in store.metrics(res.run_id, "federated_acc")}
        opt = figs[res.run_id].optimism()
        assert set(opt) == set(f) and len(opt) == 4
        for r in opt:
            assert opt[r] == pytest.approx(f[r] - g[r], abs=1e-12)


def test_per_silo_accuracy_recomputed_from_final_model(sweep) -> None:
    store, runs = sweep
    res = runs[1]  # with the crash: the failed silo is still scored
    exp = parse_spec(SPEC + CRASH)
    splits = task.get_splits(exp.workload.fl, 4, 3)
    import torch

    model = task.make_model(exp.workload.fl, splits)
    model.load_state_dict(torch.load(res.artifact_dir / "final_model.pt"))
    silo = {n: v for r, n, _k, v, _t in store.metrics(res.run_id, "silo_acc") if r == 4}
    assert set(silo) == {"silo-1", "silo-2", "silo-3"}
    for i, name in enumerate(["silo-1", "silo-2", "silo-3"]):
        assert silo[name] == pytest.approx(task.evaluate(model, splits.silo_test[i])[1], abs=1e-6)


def test_federated_accuracy_is_weighted_mean_of_answering_silos(sweep) -> None:
    """Each silo's accuracy weighs by its local TEST count (what it evaluated on),
    taken here from the data splits, not from the store."""
    store, runs = sweep
    res = runs[1]
    splits = task.get_splits(parse_spec(SPEC + CRASH).workload.fl, 4, 3)
    n_test = {f"silo-{i + 1}": len(t) for i, t in enumerate(splits.silo_test)}
    n_train = {f"silo-{i + 1}": len(t) for i, t in enumerate(splits.silo_train)}
    acc = {(r, n): v for r, n, _k, v, _t in store.metrics(res.run_id, "eval_acc")}
    fed = {r: v for r, _n, _k, v, _t in store.metrics(res.run_id, "federated_acc")}
    wrong = []
    for r in (1, 2, 3):  # piggybacked on round r + 1's train replies
        nodes = [n for (rr, n) in acc if rr == r]
        want = sum(acc[(r, n)] * n_test[n] for n in nodes) / sum(n_test[n] for n in nodes)
        assert fed[r] == pytest.approx(want, abs=1e-9)
        by_train = sum(acc[(r, n)] * n_train[n] for n in nodes) / sum(n_train[n] for n in nodes)
        wrong.append(abs(by_train - want))
    assert max(wrong) > 1e-9  # the data tell the two weightings apart: this test can fail
    assert ("silo-2" in {n for (rr, n) in acc if rr == 3}) is False  # crashed before round 3


def test_contributions_and_report(sweep, tmp_path: Path) -> None:
    store, runs = sweep
    contrib = {(r, n) for r, n, _k, _v, _t in store.metrics(runs[1].run_id, "contribution")}
    assert (1, "silo-2") in contrib and (4, "silo-2") not in contrib and (4, "silo-1") in contrib
    # exact Shapley values (<= 8 silos): they sum to v(all) - v(none) = the round's
    # aggregate accuracy minus that of the model the round started from (global_acc of
    # the previous round; round 1 starts from the initial model, not recorded: skipped)
    shap: dict[int, float] = {}
    for r, _n, _k, v, _t in store.metrics(runs[0].run_id, "shapley"):
        shap[r] = shap.get(r, 0.0) + v
    glob = {r: v for r, _n, _k, v, _t in store.metrics(runs[0].run_id, "global_acc")}
    assert set(shap) == {1, 2, 3, 4}
    checked = [r for r in sorted(shap) if r - 1 in glob]
    assert len(checked) >= 3
    for r in checked:  # (FedAvg's own float32 sums may flip a prediction: 2 test images)
        assert shap[r] == pytest.approx(glob[r] - glob[r - 1], abs=2 / 360 + 1e-6), r
    ev = [e for e in store.events(runs[0].run_id) if e.kind == "contributions"]
    assert ev and json.loads(ev[0].data)["evaluations"] == 2**3  # every coalition, once
    md, page = write_report(store, "small", tmp_path / "rep")
    text = md.read_text()
    assert "baseline" in text and "permanent" in text and "optimism" in text
    assert "its Shapley value" in text
    for png in (
        "accuracy_vs_round.png",
        "optimism_vs_skew.png",
        "final_acc_vs_timing.png",
        "failed_silo_acc.png",
    ):
        assert (tmp_path / "rep" / png).stat().st_size > 1000
    assert "<table>" in page.read_text()
