"""Semantic offload on two real nodes: an edge device process encodes, its bytes cross
an emulated mmWave link, a fog process runs the channel, demultiplexer and heads.

The answers' accuracy matches the in-process evaluation of the same trained model on the
same samples and channel realisations (only the noise is drawn anew) within a named
tolerance; the device's compute is stretched to its profile.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import SpecError, parse_spec
from testbed.store import RunStore
from tests.conftest import processes_under

#: Absolute accuracy tolerance per task: fleet answers vs in-process evaluation (the
#: same model and channel blocks, fresh noise; 150 samples at 15 dB).
ACC_TOL = 0.08
#: Relative tolerance of the stretched encoder time (sleep granularity on 2 cores).
STRETCH_TOL = 0.3
STRETCH_ABS_S = 0.003
REQUESTS = 150
DEVICE_SPEED = 0.5

SPEC = f"""\
name: offload-test
seed: 1
profiles:
  slow-ue: {{cpu_speed_factor: {DEVICE_SPEED}, cpu_cores: 1, memory_mb: 2048}}
fleet:
  nodes:
    - {{id: fog, tier: fog, profile: host}}
    - {{id: ue, tier: edge, profile: slow-ue}}
links:
  nodes:
    ue:
      kind: mmwave
      latency_ms: 2
      mmwave: {{snr_db: 15, speed_mps: 3, num_resource_blocks: 2, update_s: 0.1}}
workload:
  semantic_offload:
    devices: [ue]
    fog: fog
    num_tasks: 2
    requests: {REQUESTS}
    model:
      quick: true
      quick_train_steps: 150
      channel_bank_size: 256
      hidden_dim: 64
      num_tasks_list: [2]
"""


@pytest.mark.slow
def test_offload_on_two_nodes_matches_the_in_process_evaluation(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    res = run_experiment(parse_spec(SPEC), store)
    assert res.status == "completed", res.summary
    summary = res.summary
    assert summary["snr_db"] == 15.0 and "ue's mmwave link" in summary["snr_source"]
    for scheme, s in summary["schemes"].items():
        assert s["answers"] == REQUESTS, scheme
        for task, acc in s["accuracy"].items():
            assert abs(acc - s["in_process_accuracy"][task]) <= ACC_TOL, (scheme, task)
        assert s["e2e_s"] >= s["encode_device_s"] + s["decode_device_s"]
        assert s["link_s"] >= 2 * 2e-3  # the link's latency, both ways
        assert s["airtime"]["ofdm_symbols"] >= 1
    mux, bits = summary["schemes"]["semantic_mux"], summary["schemes"]["bit_level"]
    assert mux["payload_bytes"] == 4 * 8 * 8  # S x L complex64 symbols
    assert bits["payload_bytes"] < mux["payload_bytes"]  # packed codeword bits
    # the device's compute took its profile's time (speed factor 0.5: twice as long)
    rows = [json.loads(x) for x in (res.artifact_dir / "nodes/ue/offload.jsonl").open()]
    enc = sorted(r["encode_s"] / DEVICE_SPEED for r in rows)
    dev = sorted(r["encode_device_s"] for r in rows)
    mid = len(rows) // 2
    assert abs(dev[mid] - enc[mid]) <= STRETCH_TOL * enc[mid] + STRETCH_ABS_S
    # the bytes crossed the mmwave link, whose rate the Sionna model set
    radio = summary["radio"]["ue"]
    assert radio["kind"] == "modelled" and radio["mean_rate_mbps"] > 0
    link_up = store.metrics(res.run_id, "link_bytes_up")
    up = sum(r.value for r in link_up if r.node == "ue")
    assert up >= sum(r["bytes_up"] for r in rows)
    windows = [m for m in store.metrics(res.run_id, "radio_bler") if m.node == "ue"]
    assert windows  # every modelled radio window is in the run record
    assert processes_under(res.artifact_dir) == []


def test_offload_naming_an_unknown_node_or_a_device_as_fog_is_an_error() -> None:
    with pytest.raises(SpecError, match=r":\d+: workload.semantic_offload.devices.0: node 'uu'"):
        parse_spec(SPEC.replace("devices: [ue]", "devices: [uu]"))
    with pytest.raises(SpecError, match="also a device"):
        parse_spec(SPEC.replace("fog: fog\n    num", "fog: ue\n    num"))
