"""End to end, faithful ``gaia`` policy: the four execution modes in one run, a
promotion under load and a demotion once a ``gpu_preferred`` function's load stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.conftest import processes_under

SPEC = """\
name: fn-modes
seed: 5
fleet:
  nodes:
    - {id: edge, tier: edge, profile: jetson-orin-nano}
    - {id: cloud, tier: cloud, profile: cloud-gpu}
links:
  defaults:
    edge-edge: {latency_ms: 1}
    edge-cloud: {latency_ms: 10}
workload:
  functions:
    policy: gaia
    duration_s: 22
    runtime: {time_scale: 0.008}       # evaluate every 0.48 s; 14.4-s windows
    functions:
      - name: mm                       # cpu_preferred; misses 0.5 ms: promoted
        module: matmul
        slo_ms: 0.5
        request: {n: 256}
        arrivals: {kind: poisson, rate_rps: 6}
      - name: conv                     # gpu: starts on a GPU, never moves
        module: conv
        request: {side: 32}
        arrivals: {kind: poisson, rate_rps: 2}
      - name: mlp                      # gpu_preferred: load for 4 s, then none: demoted
        module: mlp
        request: {batch: 32}
        arrivals: {kind: phases, phases: [[4, 5]]}
      - name: idle                     # cpu: never on a GPU
        module: idle
        request: {wait_ms: 5}
        arrivals: {kind: poisson, rate_rps: 4}
"""


@pytest.mark.slow  # a real functions fleet for ~40 s: in `make test-e2e`
def test_gaia_runs_all_four_modes_promotes_and_demotes(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    res = run_experiment(parse_spec(SPEC), store, spec_path="inline")
    assert res.status == "completed", res.summary
    fns = res.summary["functions"]
    assert {n: f["mode"] for n, f in fns.items()} == {
        "mm": "cpu_preferred", "conv": "gpu", "mlp": "gpu_preferred", "idle": "cpu"
    }  # fmt: skip
    assert res.summary["requests_failed"] == 0
    rows = store._db.execute(
        "SELECT node, name, value, tags FROM metrics WHERE run_id=? AND name IN "
        "('e2e_ms', 'mode_decision')",
        (res.run_id,),
    ).fetchall()
    backends: dict[str, set[str]] = {}
    decisions: dict[str, list[dict[str, object]]] = {}
    for fn, name, value, tags in rows:
        t = json.loads(tags)
        if name == "e2e_ms":
            backends.setdefault(fn, set()).add(t["backend"])
        elif value == 1.0:
            decisions.setdefault(fn, []).append(t)
    assert backends["conv"] == {"gpu-emulated"} and backends["idle"] == {"cpu"}
    assert backends["mlp"] == {"gpu-emulated"}  # its load stopped before the demotion
    assert backends["mm"] == {"cpu", "gpu-emulated"}
    assert [d["new"] for d in decisions["mm"]][0] == "gpu_preferred"
    [down] = decisions["mlp"]
    assert down["new"] == "cpu_preferred" and str(down["reason"]).startswith("case 4")
    assert float(str(down["t_s"])) >= 4.0 + 14.4 - 0.5
    assert set(decisions) == {"mm", "mlp"}  # cpu and gpu modes never move
    assert fns["idle"]["gpu_seconds"] == 0
    assert processes_under(tmp_path) == []
