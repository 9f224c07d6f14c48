"""``workload.llm_pipeline`` end to end on a local fleet: stage servers behind links,
requests routed by ARTS, a stage node crash mid-run recovered by re-routing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

SPEC = """\
name: hyperion-small
seed: 2
profiles:  # edge-b 5x slower than edge-a: ARTS prefers edge-a's replica whatever the
  # host's load (with equal replicas a loaded CI machine tipped it onto edge-b before the
  # crash, and the crash hit no request)
  slow-edge: {cpu_speed_factor: 0.1, memory_mb: 8192}
fleet:
  nodes:
    - {id: edge-a, tier: edge, profile: rpi5}
    - {id: edge-b, tier: edge, profile: slow-edge}
    - {id: fog, tier: fog, profile: fog-server}
    - {id: cloud, tier: cloud, profile: cloud-gpu}
links:
  nodes:
    edge-a: {bandwidth_mbps: 50, latency_ms: 2}
    edge-b: {bandwidth_mbps: 50, latency_ms: 2}
    fog: {bandwidth_mbps: 100, latency_ms: 5}
    cloud: {bandwidth_mbps: 100, latency_ms: 10}
workload:
  llm_pipeline:
    model: {n_layers: 4, d_model: 128, n_heads: 4, d_ff: 256, vocab: 128, max_seq: 64}
    replicas: [[edge-a, cloud], [edge-b, fog]]
    policy: hyperion
    requests: {prompt_tokens: 8, new_tokens: 4}
    arrivals: {kind: poisson, rate_rps: 4}
    duration_s: 8
    profile_repeats: 2
faults:
  - {kind: crash, node: edge-a, at_time_s: 3}  # on ARTS's preferred replica
"""


@pytest.mark.slow
def test_pipeline_run_records_partition_requests_and_recovers_from_a_crash(
    tmp_path: Path,
) -> None:
    store = RunStore(tmp_path / "runs")
    res = run_experiment(parse_spec(SPEC), store)
    assert res.status == "completed", res.summary
    events = [e for e in store.events(res.run_id) if e.kind == "llm_partition"]
    assert len(events) == 2
    cuts = [json.loads(e.data)["cut"] for e in events]
    for cut in cuts:  # contiguous, covering every unit (embedding, 4 blocks, head)
        assert cut[0][0] == 0 and cut[-1][1] == 6
    rows = store.tagged_metrics(res.run_id)
    e2e = [r for r in rows if r.name == "llm_e2e_ms"]
    failed = [r for r in rows if r.name == "llm_failed"]
    assert len(e2e) >= 10
    # the crashed edge-a's replica failed a request; ARTS retried it on the other one and
    # skipped edge-a while it cooled down
    assert failed and all("edge-a" in str(r.tags["route"]) for r in failed)
    retried = [r for r in e2e if r.tags["attempt"] == 1]
    assert retried and all("edge-b" in str(r.tags["route"]) for r in retried)
    stage = [r for r in rows if r.name == "llm_stage_ms" and r.node == "edge-b"]
    assert stage
    util = {r.node: r.value for r in rows if r.name == "llm_utilisation"}
    assert 0 < (util.get("edge-b") or 0) <= 1.0
    assert res.summary["short_p50_ms"] > 0
