"""The functions workload on the dilated clock (issue 29: Gaia with dilation): the same
spec at TDF 1 and TDF 2 sends the same requests over an emulated load of the same
length (twice as long on the wall clock) and records the same emulated latencies.

A device 2x slower than this host (rpi5) runs a 256x256 matmul (~11 ms of CPU here,
~22 ms on the device) behind a 10 ms, 20 Mbit/s link: emulated quantities make up most
of a request's ~25 ms; the host's own overheads (HTTP, JSON, ~1-2 ms) shrink by TDF.
Measured 2026-11-28: 23 requests each, mean e2e 25.7 ms (TDF 1) vs 25.0 ms (TDF 2).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

SAME_E2E = 0.15  # relative, mean emulated e2e at TDF 2 vs TDF 1

SPEC = """\
name: fn-tdf
seed: 3
time_dilation: {tdf}
fleet:
  nodes:
    - {{id: edge, tier: edge, profile: rpi5}}
links:
  defaults:
    edge-edge: {{latency_ms: 10, bandwidth_mbps: 20}}
workload:
  functions:
    policy: static-cpu
    duration_s: 6
    functions:
      - name: mm
        module: matmul
        slo_ms: 500
        request: {{n: 256}}
        arrivals: {{kind: poisson, rate_rps: 4}}
"""


def _run(tmp_path: Path, tdf: int) -> tuple[list[float], dict[str, object]]:
    store = RunStore(tmp_path / f"tdf{tdf}")
    res = run_experiment(parse_spec(SPEC.format(tdf=tdf)), store, spec_path="inline")
    assert res.status == "completed", res.summary
    e2e = [float(m.value or 0.0) for m in store.metrics(res.run_id, "e2e_ms")]
    return e2e, res.summary


@pytest.mark.slow  # two ~10-16 s functions runs: in `make test-e2e`
def test_tdf_1_and_2_send_the_same_load_with_the_same_emulated_latency(
    tmp_path: Path,
) -> None:
    e1, s1 = _run(tmp_path, 1)
    e2, s2 = _run(tmp_path, 2)
    assert len(e1) == len(e2) > 15 and s1["requests_failed"] == s2["requests_failed"] == 0
    assert float(s2["load_wall_s"]) > 1.6 * float(s1["load_wall_s"])  # type: ignore[arg-type]
    assert float(s2["load_emulated_s"]) == pytest.approx(  # type: ignore[arg-type]
        float(s2["load_wall_s"]) / 2  # type: ignore[arg-type]
    )
    m1, m2 = statistics.mean(e1), statistics.mean(e2)
    assert abs(m2 / m1 - 1) <= SAME_E2E, (m1, m2)
