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
    # edge-2's memory was not measured: "-", never 0
    assert "edge-1 1 0 1 700" in lines and "edge-2 0 1 0 -" in lines
    assert "peak RSS -: not measured for the node" in lines
    assert "note: hello" in lines
    assert not any(line.startswith(("wall_s:", "listed:")) for line in lines)
    assert lines[-1] == "completed in 12.3 s wall; stored in /tmp/r1 (run r1)"


def _lines(summary: dict[str, object]) -> list[str]:
    console, buf = _console()
    print_summary(console, RunResult("r1", "completed", Path("/tmp/r1"), 30.0, summary))
    return [" ".join(line.replace("│", " ").split()) for line in buf.getvalue().splitlines()]


#: A simulation run's summary as ``fl_summary`` and the backend's ``fleet_info`` write it.
SIMULATED = {
    "global_acc": {0: 0.05, 1: 0.3, 2: 0.6},
    "federated_acc": {1: 0.33, 2: 0.69},
    "round_duration_s": {1: 28.9, 2: 1.45},  # wall: round 1 includes starting Ray
    "virtual_round_s": {1: 9.5, 2: 2.25},
    "virtual_time_s": 11.75,
    "node_status": {"edge-1": {1: "completed", 2: "completed"}},
    "peak_rss_mb": {"simulation": 1534.2},  # one process tree, not per node
    "clock": "virtual",
    "ray": "local, 2 CPUs",
    "links_mode": "proxy",
    "link_kinds": {"proxy": 1},
    "links_modelled": "priced on the virtual clock by each link's kind; no traffic is shaped",
}


def test_simulation_summary_says_virtual() -> None:
    """A simulation's table is titled virtual, not measured, and shows the virtual round
    times beside the wall's; per-node memory is "-" (not 0) and the process tree's peak
    is named beside; the clock and the modelled links are lines."""
    lines = _lines(dict(SIMULATED))
    assert "accuracy per round (simulation: virtual clock)" in lines
    assert not any("measured)" in line for line in lines)
    assert any("virtual round s ┃ wall round s" in line for line in lines)
    # round, global, federated, virtual round s, wall round s
    assert "1 0.300 0.330 9.500 28.900" in lines and "2 0.600 0.690 2.250 1.450" in lines
    assert "edge-1 2 0 0 -" in lines
    assert any("peak RSS MB, not client nodes: simulation 1534" in line for line in lines)
    assert any(
        line.startswith("clock: virtual (modelled")
        and "11.8 s virtual" in line
        and line.endswith("Ray: local, 2 CPUs")
        for line in lines
    )
    assert any(
        line.startswith("links: proxy (proxy x1); priced on the virtual clock") for line in lines
    )
    assert not any(
        line.startswith(("virtual_time_s:", "clock:  ", "links_mode:")) for line in lines
    )


def test_wall_clock_summary_is_measured_and_names_a_links_fallback() -> None:
    """A run on a wall clock keeps one measured round-time column; a docker netem
    fallback is a ``links:`` line with the mode in force and why."""
    lines = _lines(
        {
            "global_acc": {1: 0.5},
            "round_duration_s": {1: 2.0},
            "node_status": {"edge-1": {1: "completed"}},
            "peak_rss_mb": {"edge-1": 300.0, "cloud": 800.0},
            "links_mode": "proxy",
            "link_kinds": {"proxy": 3, "mmwave": 1},
            "links_fallback": "links.mode: netem cannot shape the containers (not root)",
            "ignored": "simulation: (read by --backend simulation only)",
        }
    )
    assert "ignored: simulation: (read by --backend simulation only)" in lines
    assert "accuracy per round (measured)" in lines and "1 0.500 - 2.000" in lines
    assert "edge-1 1 0 0 300" in lines
    assert "peak RSS MB, not client nodes: cloud 800" in lines
    assert not any(line.startswith("clock:") for line in lines)
    assert (
        "links: proxy (mmwave x1, proxy x3); fell back: links.mode: netem cannot shape the "
        "containers (not root)" in lines
    )


def test_live_view_shows_virtual_time_and_a_links_fallback() -> None:
    console, buf = _console()
    obs = ConsoleObserver(console)
    obs.started("r1", make_plan(parse_spec(SPEC)))
    task = obs.progress.tasks[0]
    assert obs._table().title == "nodes" and "virtual" not in task.description
    obs.record({"kind": "event", "name": "fleet_ready", "clock": "virtual"})
    assert task.description.endswith("(simulation: virtual clock)")
    assert obs._table().title == "nodes (virtual clock)"
    obs.record({"kind": "event", "name": "round_end", "round": 1})
    obs.record({"kind": "metric", "name": "virtual_time_s", "round": 1, "value": 9.5})
    assert task.fields["info"] == "round 1 done, virtual t 9.5 s"
    fallback = {"kind": "event", "name": "links_fallback", "asked": "netem", "used": "proxy"}
    obs.record({**fallback, "why": "not root"})
    assert obs.live is not None
    obs.live.stop()
    assert "links: proxy instead of netem: not root" in buf.getvalue()


def test_a_large_fleet_is_shown_by_group_then_its_failed_nodes() -> None:
    """200 edge nodes of two profiles: the live view has one row per (tier, profile),
    the summary one per group with its rounds counted, then only the failed nodes."""
    spec = SPEC.replace(
        "- {id: edge, tier: edge, count: 2}",
        "- {id: a, tier: edge, profile: rpi5, count: 150}\n"
        "    - {id: b, tier: edge, profile: jetson-orin-nano, count: 50}",
    )
    console, buf = _console()
    obs = ConsoleObserver(console)
    obs.started("r1", make_plan(parse_spec(spec)))
    obs.record({"kind": "event", "name": "round_start", "round": 1})
    obs.record({"kind": "status", "node": "b-3", "status": "failed"})
    console.print(obs._table())
    live = [" ".join(line.replace("│", " ").split()) for line in buf.getvalue().splitlines()]
    assert "edge rpi5 150 training 150" in live
    assert "edge jetson-orin-nano 50 failed 1, training 49" in live
    assert len(live) < 10

    statuses = {f"a-{i}": {1: "completed", 2: "completed"} for i in range(1, 151)}
    statuses |= {f"b-{i}": {1: "completed", 2: "completed"} for i in range(1, 51)}
    statuses["b-3"] = {1: "failed", 2: "excluded"}
    groups = {n: "edge/rpi5" if n.startswith("a") else "edge/jetson-orin-nano" for n in statuses}
    lines = _lines({"node_status": statuses, "node_groups": groups})
    assert "edge/rpi5 150 300 0 0" in lines
    assert "edge/jetson-orin-nano 50 98 1 1" in lines
    assert "b-3 0 1 1" in lines  # the one node with a failure: completed, failed, other
    assert not any(line.startswith("a-1 ") for line in lines)
    assert len(lines) < 15


def test_a_virtual_fleet_is_counted_by_group_live_and_in_the_summary() -> None:
    """A million clients (over ``LIVE_NODES_MAX``): the live view counts them by group
    and lists a node once a record names it; the summary's group row counts the whole
    fleet and its rounds not sampled (``not_sampled``) under "other"."""
    spec = SPEC.replace("count: 2}", "count: 1000000, profile: rpi5}")
    console, buf = _console()
    obs = ConsoleObserver(console)
    obs.started("r1", make_plan(parse_spec(spec)))
    assert obs.nodes == {} and obs.group_sizes == {("edge", "rpi5"): 1_000_000}
    obs.record({"kind": "event", "name": "round_start", "round": 1})
    obs.record({"kind": "status", "node": "edge-77", "status": "completed"})
    obs.record({"kind": "status", "node": "edge-1000001", "status": "completed"})  # not one
    assert set(obs.nodes) == {"edge-77"}
    console.print(obs._table())
    live = [" ".join(line.replace("│", " ").split()) for line in buf.getvalue().splitlines()]
    assert "edge rpi5 1000000 completed 1, waiting 999999" in live

    statuses = {"edge-77": {1: "completed", 2: "completed"}, "edge-9": {2: "failed"}}
    lines = _lines(
        {
            "node_status": statuses,
            "node_groups": {"edge-77": "edge/rpi5", "edge-9": "edge/rpi5"},
            "group_nodes": {"edge/rpi5": 1_000_000},
            "not_sampled": {"edge/rpi5": 1_999_997},
        }
    )
    assert "edge/rpi5 1000000 2 1 1999997" in lines
    assert "edge-9 0 1 0" in lines


def test_no_accuracy_line_for_an_app_that_records_none() -> None:
    """A user's app records no global accuracy: no ``final_global_acc: None`` line; our
    own app's failed run without one still says so."""
    app = {"global_acc": {}, "final_global_acc": None, "node_status": {"e-1": {1: "completed"}}}
    assert not any(line.startswith("final_global_acc") for line in _lines(app))
    ours = {"global_acc": {0: 0.1}, "final_global_acc": None}
    assert "final_global_acc: None" in _lines(ours)
