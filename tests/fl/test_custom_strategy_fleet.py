"""A user strategy class named by dotted path in the YAML runs on a real fleet."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SPEC = """\
name: custom-strategy
seed: 5
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, count: 2}
workload:
  fl:
    rounds: 2
    strategy:
      name: tests.fl.custom_hooks:ScaledFedAvg
      params: {server_lr: 0.0, fraction_train: 1.0}
"""


def test_user_strategy_from_yaml_drives_a_real_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the user's package must be importable by the ServerApp process, as any user's is
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    store = RunStore(tmp_path)
    res = run_experiment(parse_spec(SPEC), store, spec_path="inline")
    assert res.status == "completed", res.summary
    acc = {r: v for r, _n, _k, v, _t in store.metrics(res.run_id, "global_acc")}
    assert sorted(acc) == [0, 1, 2]
    # server_lr = 0: the class kept the initial model although both silos trained
    assert acc[0] == acc[1] == acc[2]
    trained = {(r, n) for r, n, *_ in store.metrics(res.run_id, "train_loss")}
    assert trained == {(r, n) for r in (1, 2) for n in ("edge-1", "edge-2")}
