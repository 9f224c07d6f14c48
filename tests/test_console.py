"""The terminal display: live node states from store records, and the final summary."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from testbed.console import ConsoleObserver, print_summary
from testbed.planner import make_plan
from testbed.runner import RunResult
from testbed.spec.loader import parse_spec

SPEC = """\
name: console
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, count: 2}
workload:
  fl: {rounds: 2}
"""


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=160, force_terminal=False), buf


def test_live_view_follows_records() -> None:
    console, _buf = _console()
    obs = ConsoleObserver(console)
    obs.started("r1", make_plan(parse_spec(SPEC)))
    task = obs.progress.tasks[0]
    assert set(obs.nodes) == {"edge-1", "edge-2"} and task.total == 2

    obs.record({"kind": "event", "name": "round_start", "round": 1})
    assert {s["state"] for s in obs.nodes.values()} == {"training"}
    obs.record({"kind": "metric", "name": "train_loss", "node": "edge-1", "value": 0.25})
    obs.record({"kind": "metric", "name": "global_acc", "round": 1, "value": 0.5})
    obs.record({"kind": "status", "node": "edge-2", "status": "failed"})
    obs.record({"kind": "event", "name": "round_end", "round": 1})
    assert obs.nodes["edge-1"]["train_loss"] == 0.25
    assert task.completed == 1 and task.fields["info"] == "round 1 done"
    obs.record({"kind": "event", "name": "round_start", "round": 2})
    # a failed node keeps showing it until it replies; the others train round 2
    assert obs.nodes["edge-2"]["state"] == "failed"
    assert (obs.nodes["edge-1"]["state"], obs.nodes["edge-1"]["round"]) == ("training", 2)
    obs.record({"kind": "progress", "name": "halfway", "value": 0.5})
    assert task.completed == 50 and task.fields["info"] == "halfway"
    assert obs.live is not None
    obs.live.stop()


def test_summary_tables_and_scalar_lines() -> None:
    console, buf = _console()
    summary = {
        "global_acc": {0: 0.1, 1: 0.5},
        "federated_acc": {1: 0.45},
        "node_status": {"edge-1": {1: "completed", 2: "excluded"}, "edge-2": {1: "failed"}},
        "peak_rss_mb": {"edge-1": 700.4},
        "wall_s": 9.0,
        "note": "hello",
        "listed": [1, 2],
    }
    result = RunResult("r1", "completed", Path("/tmp/r1"), 12.34, summary)
    print_summary(console, result)
    lines = [" ".join(line.replace("│", " ").split()) for line in buf.getvalue().splitlines()]
    assert "1 0.500 0.450 -" in lines  # round, global, federated, no round time
    assert "edge-1 1 0 1 700" in lines and "edge-2 0 1 0 0" in lines
    assert "note: hello" in lines
    assert not any(line.startswith(("wall_s:", "listed:")) for line in lines)
    assert lines[-1] == "completed in 12.3 s wall; stored in /tmp/r1 (run r1)"
