"""A real Flower fleet with one mmWave link and TT-SVD on the devices: the radio's
modelled windows and parameters reach the run record; every node's TT-SVD time counts in
its device time, with the modelled engine time beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.conftest import processes_under

SPEC = """\
name: mmwave-fl
seed: 5
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, profile: rpi5, count: 2}
links:
  nodes:
    edge-1:
      kind: mmwave
      latency_ms: 2
      mmwave: {snr_db: 10, speed_mps: 3, num_resource_blocks: 8}
workload:
  fl:
    rounds: 2
    protocol_timing: fast
    uplink: {compression: tt, svd_backend: two_phase, min_numel: 256}
"""


@pytest.mark.slow
def test_fl_over_an_mmwave_link_with_tt_svd_on_the_devices(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    res = run_experiment(parse_spec(SPEC), store)
    assert res.status == "completed", res.summary
    [radio] = [e for e in store.events(res.run_id) if e.kind == "link_radio"]
    assert radio.node == "edge-1"
    assert radio.data_dict["kind"] == "modelled" and radio.data_dict["spec"]["snr_db"] == 10
    rates = store.metrics(res.run_id, "radio_rate_mbps")
    assert rates and {m.node for m in rates} == {"edge-1"}
    assert sum(m.value for m in rates) > 0
    up = {m.node: m.value for m in store.metrics(res.run_id, "link_bytes_up")}
    assert up["edge-1"] > 0 and up["edge-2"] > 0  # both links carried the updates
    for name in ("tt_device_s", "tt_svd_s", "tt_engine_modelled_s", "tt_gemm_only_modelled_s"):
        rows = store.metrics(res.run_id, name)
        assert {(m.round, m.node) for m in rows} == {
            (r, n) for r in (1, 2) for n in ("edge-1", "edge-2")
        }, name
    dev = {(m.round, m.node): m.value for m in store.metrics(res.run_id, "device_time_s")}
    for m in store.metrics(res.run_id, "tt_device_s"):
        assert dev[(m.round, m.node)] >= m.value  # the TT-SVD is inside the device time
    assert processes_under(tmp_path) == []
