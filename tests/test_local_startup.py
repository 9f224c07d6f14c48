"""Local backend start-up choices: where the SuperLink keeps its state, when a client
node counts as registered, that the zygote forks every SuperNode, and the nodes'
scheduling priorities."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.backends.local import LocalBackend
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
    spec = SPEC.replace("{id: edge, tier: edge}", "{id: edge, tier: edge, count: 3}")
    backend = LocalBackend(make_plan(parse_spec(spec)), tmp_path, warm=False)
    logs = [tmp_path / "logs" / f"edge-{i}.log" for i in (1, 2)]  # (edge-3: no log yet)
    logs[0].parent.mkdir(parents=True)
    logs[0].write_bytes(b"INFO : Starting Flower SuperNode\nConnection refused\n")
    logs[1].write_bytes(b"\x1b[92mINFO \x1b[0m:      SuperNode ID: 4105498632909426736\n")
    assert backend.registered() == {"edge-2"}
    with logs[0].open("ab") as f:
        f.write(b"SuperNode ID: 17\n")
    assert backend.registered() == {"edge-1", "edge-2"}
    assert backend.registered(["edge-1", "edge-3"]) == {"edge-1"}  # (only those asked)
    assert set(backend.node_ids().values()) == {"edge-1", "edge-2"}


def test_a_ready_file_appears_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend reads a node's ready file as soon as it exists (``node_limits``); a
    file created empty and written after failed a run under load 15 with
    ``JSONDecodeError`` (a reproduction of soak round 14, issue 31). It is written
    aside and renamed into place. Mutation tried: ``write_text`` straight to the path
    (no rename: the check below never runs)."""
    import json
    import os

    import nodes.agent as agent

    monkeypatch.setattr(agent, "_WARM", [True])  # warm already (a zygote's fork)
    ready = tmp_path / "nodes" / "edge-1" / "ready"
    seen: list[dict[str, object]] = []
    replace = os.replace

    def watched(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        assert Path(dst) == ready and not ready.exists()  # absent until whole
        seen.append(json.loads(Path(src).read_text()))
        replace(src, dst)

    monkeypatch.setattr(agent.os, "replace", watched)
    agent._prewarm(str(ready), {"memory": "cap"})
    assert seen == [{"pid": os.getpid(), "limits": {"memory": "cap"}}]
    assert json.loads(ready.read_text()) == seen[0]
    assert [p.name for p in ready.parent.iterdir()] == ["ready"]  # no temporary left


AUTOGROUP = Path("/proc/self/autogroup").exists()  # (the kernel schedules by session)


def _nice(pid: int) -> tuple[int, str]:
    """A process's nice and its autogroup's line (``/autogroup-N nice K``; without
    autogroup scheduling, a line that ends as if it were right)."""
    group = Path(f"/proc/{pid}/autogroup")
    nice = os.getpriority(os.PRIO_PROCESS, pid)
    return nice, group.read_text() if AUTOGROUP else f"nice {nice}\n"


def test_every_supernode_is_a_fork_of_the_zygote_at_the_lowest_priority(
    tmp_path: Path,
) -> None:
    """The zygote imports and warms a node's stack once; each SuperNode is its fork.
    From 2026-11-27 to 11-28 none was: the backend compared a 5-item command prefix
    with the 4-item ``python -m nodes supernode`` of nodes/cli.py, so every node
    started plainly beside an idle zygote, and the quickstart's fleet took 21 s to
    start instead of ~5 s (bench/fleet_start.py). Mutation tried: that comparison
    (this test fails: each node's parent is this process).

    The client nodes run at nice 19, and the run records it (``node_limits``): at 200
    nodes in their own sessions at nice 0, the SuperLink got ~1/200 of the CPU and Flower
    ended the run in round 1. They share the zygote's session, so one autogroup at nice 0
    (each in its own at nice 19 starved under any neighbour's load: four busy loops left
    each ~1 % of a core). Mutations tried: the nodes' ``--nice`` left out (this test
    fails: nice 0); ``os.setsid()`` back in the zygote's fork (fails: its own session)."""
    import psutil

    from nodes.agent import CLIENT_NICE

    spec = SPEC.replace("{id: edge, tier: edge}", "{id: edge, tier: edge, count: 2}")
    backend = LocalBackend(make_plan(parse_spec(spec)), tmp_path)
    try:
        backend.start()
        zygote = backend._zygote
        assert zygote is not None and zygote.proc is not None
        for name in ("edge-1", "edge-2"):
            node = backend.procs.procs[name]
            assert psutil.Process(node.pid).ppid() == zygote.proc.pid, name
            nice, group = _nice(node.pid)
            assert nice == CLIENT_NICE, (name, nice)
            # the zygote's session, so its autogroup, shared by the run's nodes, at nice 0
            assert os.getsid(node.pid) == os.getsid(zygote.proc.pid) != node.pid, name
            assert os.getpgid(node.pid) == node.pid, name  # its own group: killpg its tree
            if AUTOGROUP:
                assert group == _nice(zygote.proc.pid)[1] and group.endswith(" nice 0\n"), group
        limits = backend.node_limits()
        assert limits["edge-1"]["priority"].startswith(f"nice {CLIENT_NICE}")
    finally:
        backend.stop()
