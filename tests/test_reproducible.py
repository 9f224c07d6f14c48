"""The same YAML and seed twice on the local backend: identical per-round metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

pytestmark = pytest.mark.slow

SPEC = """\
name: twice
seed: 11
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: silo, tier: fog, count: 3}
workload:
  fl:
    partitioner: {name: dirichlet, alpha: 0.5}
    rounds: 3
"""
#: Metrics that depend on the data, the seed and the arithmetic only (not on timing).
LEARNING = ("global_acc", "global_loss", "train_loss", "eval_acc", "eval_loss", "federated_acc")


def test_same_yaml_and_seed_give_identical_metrics(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    runs = [run_experiment(parse_spec(SPEC), store, spec_path="inline") for _ in range(2)]
    assert [r.status for r in runs] == ["completed", "completed"]
    for name in LEARNING:
        a, b = (
            sorted((r, n, v) for r, n, _k, v, _t in store.metrics(run.run_id, name))
            for run in runs
        )
        assert a and a == b, name  # bit for bit, not within a tolerance
