"""A SuperLink restart before round 1 fires as the fleet is ready, just before ``flwr
run`` submits the app: the local backend's restart returns once the new SuperLink
listens, so the submission finds it (bench/fuzz_runs.py, seed 1, case 3: the run failed
with "Connection to the SuperLink is unavailable" in logs/flwr-run.log).

Mutation tried: restart_superlink returning right after its SIGUSR1 (as before): the
run fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.conftest import processes_under

SPEC = """\
name: restart-at-submission
seed: 3
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, count: 2}
workload:
  fl: {rounds: 1, local_epochs: 1, round_timeout_s: 30, protocol_timing: fast}
faults:
  - {kind: superlink-restart, at_round: 1, phase: before}
"""


@pytest.mark.slow
def test_a_superlink_restart_before_round_1_does_not_fail_the_submission(
    tmp_path: Path,
) -> None:
    store = RunStore(tmp_path)
    res = run_experiment(parse_spec(SPEC, "restart.yaml"), store)
    kinds = [e.kind for e in store.events(res.run_id)]
    assert res.status == "completed", store.run(res.run_id).summary_dict
    assert kinds.index("fault_injected") < kinds.index("round_start")
    assert {r.status for r in store.round_status(res.run_id)} == {"completed"}
    assert processes_under(tmp_path) == []
