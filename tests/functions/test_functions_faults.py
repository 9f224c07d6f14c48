"""Faults act on a functions run as on an FL run: the chaos engine cuts the node's link
(the same ``partition`` fault kind, through the backend's link) and the requests that
cross it wait; the link's counters are recorded like FL's."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pytest

from nodes.functions.workloads import module_path
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.conftest import processes_under

CUT_AT_S, CUT_S = 2.0, 1.5


def spec_yaml(tmp: Path) -> str:
    return f"""\
name: fn-partition
seed: 5
fleet:
  nodes:
    - {{id: edge, tier: edge}}
links:
  defaults:
    edge-edge: {{latency_ms: 1}}
faults:
  - {{kind: partition, node: edge, at_time_s: {CUT_AT_S}, duration_s: {CUT_S}}}
workload:
  functions:
    policy: static-cpu
    duration_s: 6
    functions:
      - name: idle
        module: {tmp / "idle_fn.py"}
        slo_ms: 100
        request: {{wait_ms: 2}}
        arrivals: {{kind: poisson, rate_rps: 10}}
"""


@pytest.mark.slow  # a real functions fleet for ~10-25 s: in `make test-e2e`
def test_a_partition_fault_holds_the_requests_that_cross_the_link(tmp_path: Path) -> None:
    shutil.copy(module_path("idle"), tmp_path / "idle_fn.py")
    store = RunStore(tmp_path / "runs")
    res = run_experiment(parse_spec(spec_yaml(tmp_path)), store)
    assert res.status == "completed", res.summary
    assert res.summary["requests_failed"] == 0
    kinds = [e.kind for e in store.events(res.run_id) if e.node == "edge"]
    assert "link_partitioned" in kinds
    cut = {m.node: m.value for m in store.metrics(res.run_id, "link_partitioned_s")}
    assert (cut["edge"] or 0) >= 0.8 * CUT_S
    rows = [r for r in store.tagged_metrics(res.run_id) if r.name == "e2e_ms"]
    during = [
        r.value or 0 for r in rows if CUT_AT_S + 0.2 <= r.tags["t_s"] < CUT_AT_S + CUT_S - 0.5
    ]
    outside = [r.value or 0 for r in rows if r.tags["t_s"] < CUT_AT_S - 0.2]
    assert during and outside
    # sent while the link was cut: answered only once it healed (hundreds of ms later)
    assert min(during) >= 300.0 > statistics.median(outside)
    assert processes_under(tmp_path) == []
