"""Local backend start-up choices that need no fleet: where the SuperLink keeps its
state, and when a client node counts as registered."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.backends.local import REGISTERED_LINE, LocalBackend, _registered
from testbed.planner import make_plan
from testbed.spec.loader import parse_spec

SPEC = (
    "name: t\nfleet:\n  nodes:\n    - {id: cloud, tier: cloud}\n    - {id: edge, tier: edge}\n"
    "workload:\n  fl: {}\n"
)


@pytest.mark.parametrize("faults", ["", "faults:\n  - {kind: superlink-restart, at_round: 2}\n"])
def test_the_superlink_state_is_on_disk_only_when_a_restart_is_planned(
    faults: str, tmp_path: Path
) -> None:
    backend = LocalBackend(make_plan(parse_spec(SPEC + faults)), tmp_path, warm=False)
    db = backend.superlink_db()
    if faults:
        assert db == (tmp_path / "nodes" / "cloud" / "superlink.db").resolve()
    else:  # Flower's default in-memory state; a live restart would lose the run
        assert db is None
        with pytest.raises(RuntimeError, match="keeps its state in memory"):
            backend.restart_superlink()
        assert backend.superlink_restarts == 0


def test_a_node_counts_as_registered_once_its_supernode_logged_its_id(tmp_path: Path) -> None:
    logs = [tmp_path / "edge-1.log", tmp_path / "edge-2.log", tmp_path / "absent.log"]
    logs[0].write_bytes(b"INFO : Starting Flower SuperNode\nConnection refused\n")
    logs[1].write_bytes(b"\x1b[92mINFO \x1b[0m:      " + REGISTERED_LINE + b"4105498632909426736\n")
    assert _registered(logs) == 1
    with logs[0].open("ab") as f:
        f.write(REGISTERED_LINE + b"17\n")
    assert _registered(logs) == 2
