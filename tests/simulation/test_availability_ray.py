"""An availability trace played through Flower's Simulation Engine (Ray): a client off
per the trace at a round's start is not sampled in that round (and is again once the
trace has it on).

Slow: Ray starts in ~10 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

pytestmark = pytest.mark.slow

CLIENTS = ("edge-1", "edge-2", "edge-3", "edge-4")
#: edge-2 is never on during the run; edge-3 comes on 3 virtual seconds in (round 1
#: starts at 0 and lasts longer: the protocol delay alone is 6.89 s); the others always.
TRACE = """\
client,start_s,end_s
edge-1,0,100000
edge-2,90000,100000
edge-3,3,100000
edge-4,0,100000
"""

SPEC = """\
name: sim-availability
seed: 7
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, profile: rpi5, count: 4}
workload:
  fl: {rounds: 3, local_epochs: 1, round_timeout_s: 60}
simulation:
  availability: {path: trace.csv}
"""


def test_a_client_off_per_the_trace_is_not_sampled(tmp_path: Path) -> None:
    (tmp_path / "trace.csv").write_text(TRACE)
    spec = tmp_path / "avail.yaml"
    spec.write_text(SPEC)
    store = RunStore(tmp_path / "runs")
    exp = parse_spec(SPEC, folder=tmp_path)
    res = run_experiment(exp, store, backend="simulation", spec_path=str(spec))
    assert res.status == "completed", res.summary
    events = store.events(res.run_id)
    sampled = {e.round: e.data_dict.get("sampled") for e in events if e.kind == "round_start"}
    assert sampled == {1: 2, 2: 3, 3: 3}, sampled  # Flower sampled only the clients on
    rows = {(r, n): (s, why) for r, n, s, why in store.round_status(res.run_id)}
    off = {(1, "edge-2"), (2, "edge-2"), (3, "edge-2"), (1, "edge-3")}
    for key, (s, why) in rows.items():
        if key in off:
            assert s == "excluded", (key, s, why)
        else:
            assert s == "completed", (key, s, why)
    assert len(rows) == 3 * len(CLIENTS)
