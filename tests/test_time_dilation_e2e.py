"""Time dilation end to end on real Flower (issue 29): one spec whose fastest profile is
this host, run at TDF 1 and at TDF 4, gives the same emulated round times within 10 %
and the same statuses.

The spec is chosen so that emulated quantities dominate a round (devices 2x slower than
this host training ~0.7 s of CPU, 5 Mbit/s links with 60 ms latency, a partition 0.3 s
into round 2 for 2.5 s): what dilation cannot hide (Flower's and Python's own overheads,
~0.4 s of wall time per round here, which shrink by TDF in emulated time) stays a small
part of it. Were the fault's times not dilated, round 2 at TDF 4 would be ~2 s shorter
and the recorded partition 0.6 s instead of 2.5 s; were the links not, every round
~0.6 s shorter; were the devices not, ~1 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

SAME_TOTAL = 0.10  # the bound: emulated round times within 10 % (their sum)
# Each round alone: one round's time moves by up to ~1.2 s (23 %) between two rounds of
# one run at the same TDF on the CI machine (2026-11-28: 5.33 / 6.77 / 4.09 s at TDF 1),
# so a tighter bound per round tests CI's load, not dilation. The fault's own clock is
# checked directly instead (PARTITION_S).
SAME_ROUND = 0.25
PARTITION_S = 2.5  # the fault's emulated duration, recorded as link_partitioned_s

SPEC = """\
name: tdf-parity
seed: 3
time_dilation: {tdf}
fleet:
  nodes:
    - {{id: cloud, tier: cloud, profile: host}}
    - {{id: edge, tier: edge, profile: rpi5, count: 2}}
    - {{id: fog, tier: fog, profile: host}}
links:
  defaults:
    edge-cloud: {{bandwidth_mbps: 5, latency_ms: 60}}
    fog-cloud: {{bandwidth_mbps: 50, latency_ms: 10}}
workload:
  fl:
    dataset: {{name: digits}}
    model: {{name: cnn}}
    rounds: 3
    local_epochs: 30
    batch_size: 32
    lr: 0.05
    round_timeout_s: 30
    protocol_timing: fast
faults:
  - {{kind: partition, node: edge-1, at_round: 2, phase: during, delay_s: 0.3, duration_s: 2.5}}
"""


def _run(
    tmp_path: Path, tdf: int
) -> tuple[dict[int, float], set[tuple[int, str, str]], float, dict[str, float]]:
    store = RunStore(tmp_path / f"tdf{tdf}")
    res = run_experiment(parse_spec(SPEC.format(tdf=tdf)), store, spec_path="inline")
    assert res.status == "completed", res.summary
    rounds = {int(m.round): m.value for m in store.metrics(res.run_id, "round_duration_s")}
    statuses = {(r, n, s) for r, n, s, _ in store.round_status(res.run_id)}
    recorded = store.time_dilation(res.run_id)
    if tdf != 1:
        assert res.summary["time_dilation"]["tdf"] == tdf
    cut = {m.node: m.value for m in store.metrics(res.run_id, "link_partitioned_s")}
    return rounds, statuses, recorded, cut


@pytest.mark.slow
def test_tdf_1_and_4_give_the_same_emulated_rounds_and_statuses(tmp_path: Path) -> None:
    r1, s1, f1, cut1 = _run(tmp_path, 1)
    r4, s4, f4, cut4 = _run(tmp_path, 4)
    assert (f1, f4) == (1.0, 4.0)
    # the partition lasted its emulated 2.5 s at both factors (undilated timers: 0.6 s)
    for cut in (cut1, cut4):
        assert cut["edge-1"] == pytest.approx(PARTITION_S, abs=0.3), (cut1, cut4)
        assert cut["edge-2"] == 0.0
    assert s1 == s4 and {s for *_x, s in s1} == {"completed"}
    assert sorted(r1) == sorted(r4) == [1, 2, 3]
    assert r1[2] > r1[1] + 1.0  # the partition held round 2 (the fault took effect)
    total1, total4 = sum(r1.values()), sum(r4.values())
    assert abs(total4 / total1 - 1) <= SAME_TOTAL, (r1, r4)
    for r in r1:
        assert abs(r4[r] / r1[r] - 1) <= SAME_ROUND, (r, r1, r4)
