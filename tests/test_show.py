"""``testbed show`` and ``testbed ls`` tell what the store recorded: statuses, events,
every workload's summary and, for a failed run, the cause (node and log file).

Runs are written into a real SQLite ``RunStore`` (no fleet) the way the runner and the
workloads write them; a failed run's node log holds a real Python traceback (a child
process that raised). The slow test runs a real fleet that fails inside Flower.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from testbed import cli
from testbed.backends import register_backend
from testbed.backends.local import LocalBackend
from testbed.cause import failure_cause, find_cause, scan_log
from testbed.controller.service import Controller
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

ROOT = Path(__file__).resolve().parents[1]

FL_SPEC = """\
name: show-fl
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, count: 2}
workload:
  fl: {rounds: 2}
"""

#: A real flwr line that mentions an exception but is not the run's error.
NOISE = (
    "2026-11-27 14:16:27,466 flwr Connection attempt failed with exception: [Errno 111]"
    " Connection refused\n"
    "2026-11-27T14:16:20.329Z INFO [uvicorn.error] Started server process [10095]\n"
)


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's console wide enough that table cells are not cut."""
    monkeypatch.setattr(cli, "console", Console(width=250, no_color=True))


def _invoke(*args: str) -> list[str]:
    res = CliRunner().invoke(cli.app, list(args))
    assert res.exit_code == 0, res.output
    rows = (line.replace("│", " ").replace("┃", " ") for line in res.output.splitlines())
    return [" ".join(line.split()) for line in rows]


def _fl_run(store: RunStore, run_id: str = "fl-ok") -> str:
    """A completed FL run: 2 rounds, edge-2 crashed in round 2 (fault, effect), a
    satellite-pass link change, statuses and the summary as ``fl_summary`` writes it."""
    store.create_run(run_id, "show-fl", seed=1, backend="local")
    t0 = store.run(run_id).created_at
    store.add_event(run_id, "fleet_starting", ts=t0 + 1, nodes=["cloud", "edge-1", "edge-2"])
    store.add_event(run_id, "fleet_ready", ts=t0 + 2, superlink_port=9092)
    store.add_event(run_id, "node_limits", ts=t0 + 2, node="edge-1", memory="8 GB")
    for r in (1, 2):
        store.add_event(run_id, "round_start", round=r, ts=t0 + 2 + 2 * r, sampled=2)
        store.add_event(run_id, "round_end", round=r, ts=t0 + 3 + 2 * r, replies=2)
    spec = {"kind": "crash", "node": "edge-2", "at_round": 2}
    store.add_event(
        run_id,
        "fault_injected",
        round=2,
        node="edge-2",
        ts=t0 + 6.5,
        kind="crash",
        source="schedule",
        spec=spec,
    )
    store.add_event(run_id, "node_down", round=2, node="edge-2", ts=t0 + 6.6, reason="crash")
    store.add_event(
        run_id,
        "link_changed",
        node="edge-1",
        ts=t0 + 5,
        t_s=3.0,
        bandwidth_mbps=0,
        reason="satellite pass ended",
    )
    store.set_status(run_id, 1, "edge-1", "completed")
    store.set_status(run_id, 1, "edge-2", "completed")
    store.set_status(run_id, 2, "edge-1", "completed")
    store.set_status(run_id, 2, "edge-2", "failed", "node down (crash)")
    for r, acc in ((0, 0.1), (1, 0.6), (2, 0.8)):
        store.add_metric(run_id, "global_acc", acc, round=r)
    summary = {
        "rounds": 2,
        "global_acc": {0: 0.1, 1: 0.6, 2: 0.8},
        "federated_acc": {1: 0.55, 2: 0.75},
        "round_duration_s": {1: 1.0, 2: 1.0},
        "final_global_acc": 0.8,
        "node_status": {
            "edge-1": {1: "completed", 2: "completed"},
            "edge-2": {1: "completed", 2: "failed"},
        },
        "peak_rss_mb": {"edge-1": 500.0, "edge-2": 510.0},
        "wall_s": 12.0,
    }
    store.finish_run(run_id, "completed", json.loads(json.dumps(summary)))
    return run_id


def _traceback_log(path: Path) -> None:
    """A node log as a real failing process writes it: noise, then a traceback."""
    path.parent.mkdir(parents=True, exist_ok=True)
    code = "def load():\n    return 1 / 0\nload()\n"
    with open(path, "w") as f:
        f.write(NOISE)
        f.flush()
        subprocess.run([sys.executable, "-c", code], stderr=f, check=False, timeout=60)


def _failed_run(store: RunStore, run_id: str = "fl-bad") -> str:
    """A failed FL run (as the issue's: no rounds) whose edge-1 log holds a traceback;
    recorded without a cause, as runs were before the runner recorded one."""
    d = store.create_run(run_id, "show-bad", seed=1, backend="local")
    (d / "logs").mkdir()
    (d / "logs" / "cloud.log").write_text(NOISE)
    (d / "logs" / "flwr-run.log").write_text("Successfully started run 42\n")
    _traceback_log(d / "logs" / "edge-1.log")
    store.add_event(run_id, "fleet_starting", nodes=["cloud", "edge-1", "edge-2"])
    store.finish_run(run_id, "failed", {"rounds": 2, "final_global_acc": None, "wall_s": 25.0})
    return run_id


def test_failure_cause_names_the_traceback_node_and_log(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    run = store.run(_failed_run(store))
    cause = failure_cause(store, run)
    assert cause is not None
    assert cause.message == "ZeroDivisionError: division by zero"
    assert (cause.node, cause.log) == ("edge-1", "logs/edge-1.log")
    lines = (tmp_path / "runs" / run.run_id / "logs" / "edge-1.log").read_text().splitlines()
    assert cause.line is not None and lines[cause.line - 1] == cause.message
    assert cause.where == "<string>:2 in load"
    # a completed run has no cause; noise alone (no traceback, no ERROR line) is none
    assert failure_cause(store, store.run(_fl_run(store))) is None
    assert scan_log(NOISE.splitlines()) is None


def test_flower_serverapp_traceback_beats_runner_reason(tmp_path: Path) -> None:
    """Flower's ServerApp log (ERROR line, coloured, then the traceback): the exception
    line, the project's deepest frame; the ServerApp's node when known."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "flwr-run.log").write_text(
        "\x1b[91mERROR \x1b[0m:     ServerApp raised an exception\n"
        "Traceback (most recent call last):\n"
        '  File "/x/nodes/data/datasets.py", line 146, in load_npz\n'
        "    with np.load(p) as f:\n"
        '  File "/v/lib/python3.11/site-packages/numpy/lib/_npyio_impl.py", line 489, in load\n'
        "    raise ValueError(\n"
        "ValueError: This file contains pickled (object) data.\n"
        "\x1b[91mERROR \x1b[0m:     Exit Code: 201\n"
    )
    summary = {"reason": "TimeoutError: no progress"}
    cause = find_cause(tmp_path, summary, [], server="cloud")
    assert cause is not None
    assert cause.message == "ValueError: This file contains pickled (object) data."
    assert cause.where == "nodes/data/datasets.py:146 in load_npz"
    assert cause.origin == "node cloud (ServerApp), logs/flwr-run.log:7"
    (logs / "flwr-run.log").write_text("\x1b[91mERROR \x1b[0m:     Exit Code: 201\n")
    cause = find_cause(tmp_path, summary, [])  # no traceback: the runner's reason first
    assert cause is not None and cause.message == "TimeoutError: no progress"
    cause = find_cause(tmp_path, {}, [])  # nothing else: the ERROR line
    assert cause is not None and cause.message.startswith("ERROR : Exit Code: 201")


def test_show_prints_statuses_events_and_cause(tmp_path: Path, wide: None) -> None:
    store = RunStore(tmp_path / "runs")
    ok, bad = _fl_run(store), _failed_run(store)
    out = str(tmp_path / "runs")
    lines = _invoke("show", ok, "--out", out)
    assert "2 0.800 0.750 1.000" in lines  # the summary's accuracy table, as before
    assert "statuses per round (2 nodes, 2 rounds)" in lines
    assert "node 1 2 ok failed other" in lines
    assert "edge-1 ok ok 2 0 0" in lines and "edge-2 ok FAIL 1 1 0" in lines
    assert "failed x1: node down (crash) (edge-2 r2)" in lines
    assert "events (5 listed of 10)" in lines
    joined = "\n".join(lines)
    assert "6.5 2 edge-2 fault fault_injected kind=crash source=schedule" in joined
    assert "6.6 2 edge-2 effect node_down reason=crash" in lines
    assert (
        "5.0 - edge-1 link link_changed t_s=3.0 bandwidth_mbps=0 reason=satellite pass ended"
        in lines
    )
    assert "not listed: node_limits x1, round_end x2, round_start x2" in lines
    assert not any(line.startswith("cause:") for line in lines)

    lines = _invoke("show", bad, "--out", out)
    assert "failed in 25.0 s wall; stored in" in "\n".join(lines)
    assert "cause: ZeroDivisionError: division by zero" in lines
    at = next(line for line in lines if line.startswith("from "))
    assert at.startswith("from node edge-1, logs/edge-1.log:") and at.endswith(
        "(at <string>:2 in load)"
    )


def test_ls_shows_the_cause_of_failed_runs(tmp_path: Path, wide: None) -> None:
    store = RunStore(tmp_path / "runs")
    _fl_run(store), _failed_run(store)
    lines = _invoke("ls", "--out", str(tmp_path / "runs"))
    assert "run name status seed final acc wall s sweep cause" in lines
    bad = next(line for line in lines if line.startswith("fl-bad"))
    assert bad.endswith("failed 1 - 25.0 edge-1: ZeroDivisionError: division by zero")
    ok = next(line for line in lines if line.startswith("fl-ok"))
    assert ok.endswith("completed 1 0.800 12.0")


@register_backend("local-nope")
class NopeBackend(LocalBackend):
    """A backend whose fleet never starts (after the run is recorded)."""

    name = "local-nope"

    def start(self, timeout_s: float = 60.0) -> None:
        raise RuntimeError("nope: this fleet does not start")


def test_runner_records_the_cause_of_a_run_it_marks_failed(tmp_path: Path, wide: None) -> None:
    """A run that raises (here: its fleet does not start) keeps the runner's error as its
    cause in the summary; ls, show and the controller read it from there."""
    store = RunStore(tmp_path / "runs")
    with pytest.raises(Exception, match="nope"):
        run_experiment(parse_spec(FL_SPEC), store, backend="local-nope")
    run = store.runs()[0]
    recorded = run.summary_dict["cause"]
    assert recorded["message"].startswith(run.summary_dict["reason"][:40])
    assert "nope" in recorded["message"] and recorded["log"] is None
    lines = _invoke("show", run.run_id, "--out", str(tmp_path / "runs"))
    assert f"cause: {recorded['message']}" in lines and "from the runner" in lines
    ctl = Controller(tmp_path / "runs", tmp_path)
    assert ctl.run(run.run_id)["cause"] == f"{recorded['message']} (the runner)"


def test_controller_run_json_carries_the_cause(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    ok, bad = _fl_run(store), _failed_run(store)
    ctl = Controller(tmp_path / "runs", tmp_path)
    rows = {r["run_id"]: r for r in ctl.runs()}
    assert rows[ok]["cause"] is None
    assert rows[bad]["cause"].startswith("ZeroDivisionError: division by zero (node edge-1,")


def _workload_runs(store: RunStore) -> str:
    """One run of functions + semantic offload + LLM pipeline + compression + semantic
    mux together (the summaries as each workload returns them)."""
    rid = "together"
    store.create_run(rid, "show-together", seed=3, backend="local")
    fn = {
        "node": "fog-1",
        "tier": "fog",
        "mode": "cpu_preferred",
        "start_backend": "cpu",
        "end_backend": "gpu-emulated",
        "requests": 100,
        "p50_ms": 40.0,
        "p95_ms": 90.0,
        "slo_ms": 100.0,
        "slo_violations": 4,
        "slo_violation_pct": 4.0,
        "gpu_seconds": 1.5,
        "switches": 1,
    }
    tags = {
        "t_s": 5.0,
        "old": "cpu_preferred",
        "new": "gpu_preferred",
        "reason": "p95 high",
        "p95_ms": 120.0,
        "rate_rps": 20.0,
    }
    store.tagged("functions").add_metric(rid, "mode_decision", 1.0, node="resize", tags=tags)
    store.add_event(
        rid,
        "llm_partition",
        replica=0,
        policy="hyperion",
        nodes=["edge-1", "fog-1"],
        cut=[[0, 5], [5, 12]],
        modelled_bottleneck_ms=31.25,
    )
    parts = {
        "functions": {"policy": "gaia", "functions": {"resize": fn}, "gpu_timing": None},
        "semantic_offload": {
            "snr_db": 12.0,
            "snr_source": "spec",
            "schemes": {
                "semantic": {
                    "answers": 64,
                    "accuracy": {"digit": 0.91},
                    "e2e_s": 0.0123,
                    "link_s": 0.004,
                    "bytes_up": 512,
                }
            },
        },
        "llm_pipeline": {
            "policy": "hyperion",
            "throughput_rps": 2.5,
            "completed": 50,
            "failed_attempts": 1,
            "requests_lost": 0,
            "short_n": 40,
            "short_p50_ms": 210.0,
            "short_p95_ms": 480.0,
        },
        "compress": {
            "model": "cnn",
            "dataset": "digits",
            "per_eps": [
                {
                    "eps": 0.1,
                    "ratio": 3.2,
                    "acc_before": 0.95,
                    "acc_after": 0.9,
                    "acc_finetuned": 0.94,
                    "compress_seconds": 1.25,
                    "modelled_speedup_x": 2.5,
                }
            ],
        },
        "semantic_mux": {
            "seeds": [1, 2],
            "ratios": {"K=2 tdma latency": 1.8},
            "first_task_accuracy_drop": {"10.0": 0.02},
        },
    }
    summary = {**parts["functions"], "workloads": parts, "wall_s": 60.0}
    store.finish_run(rid, "completed", summary)
    return rid


def test_show_prints_every_workload_of_a_run(tmp_path: Path, wide: None) -> None:
    store = RunStore(tmp_path / "runs")
    lines = _invoke("show", _workload_runs(store), "--out", str(tmp_path / "runs"))
    joined = "\n".join(lines)
    # functions: the table, SLO attainment and promotions
    assert "resize fog-1 cpu_pref cpu>gpu-emulated 100 40.0 90.0 100.0 4.0 1.5 1" in lines
    assert (
        "functions: SLO attainment 96.0% of 100 requests; promotions/demotions: resize +1/-0"
        in lines
    )
    # semantic offload: accuracy and e2e latency
    assert "semantic offload, SNR 12.0 dB (spec)" in joined
    assert "semantic 64 digit 0.910 12.3 4.0 512" in lines
    # LLM pipeline: p50/p95, throughput, cuts
    assert "LLM pipeline, policy hyperion" in lines and "throughput req/s 2.50" in lines
    assert "completed 50" in lines and "failed attempts 1" in lines and "requests lost 0" in lines
    assert "short p50 ms (n=40) 210.0" in lines and "short p95 ms (n=40) 480.0" in lines
    assert "0 edge-1 > fog-1 0-5 | 5-12 31.2" in lines
    assert not any(line.startswith("short_p50_ms") for line in lines)
    # compression and semantic mux
    assert "0.1 3.20 0.950 0.900 0.940 1.25 2.50" in lines
    assert (
        "ratio K=2 tdma latency 1.80" in lines
        and "first task accuracy drop, SNR 10.0 dB 0.020" in lines
    )
    assert "statuses: none recorded (no FL rounds)" in lines


def test_large_fleets_and_long_event_lists_are_cut_with_counts(tmp_path: Path, wide: None) -> None:
    store = RunStore(tmp_path / "runs")
    rid = "big"
    store.create_run(rid, "big", seed=1, backend="local")
    t0 = store.run(rid).created_at
    for n in range(1, 61):  # 60 nodes, 25 rounds; nodes 1..25 each fail in their round
        for r in range(1, 26):
            st = "failed" if r == n else "completed"
            store.set_status(rid, r, f"edge-{n}", st, "timeout" if st == "failed" else "")
    for k in range(40):
        store.add_event(rid, "node_down", round=1, node=f"edge-{k}", ts=t0 + k, reason="crash")
    store.finish_run(rid, "completed", {"wall_s": 1.0})
    lines = _invoke("show", rid, "--out", str(tmp_path / "runs"))
    assert "statuses per round (60 nodes, 25 rounds)" in lines
    rows = [line for line in lines if line.startswith(("edge-", "..."))]
    assert rows[0] == "edge-26 … edge-60 (35 nodes) " + "ok " * 20 + "… 25 0 0"  # biggest first
    assert rows[1] == "edge-1 FAIL " + "ok " * 19 + "… 24 1 0"
    header = next(line for line in lines if line.startswith("node 1 2"))
    assert header.endswith("19 20 +5 rounds ok failed other")
    assert "... 6 more nodes (6 more rows)" in lines  # 26 rows: 20 shown (edge-1..19)
    assert "failed x25: timeout (edge-1 r1, edge-2 r2, edge-3 r3, +22)" in lines
    assert "events (40 listed of 40)" in lines
    assert "... 10 more events" in lines
    assert "19.0 1 edge-19 effect node_down reason=crash" in lines
    assert "30.0 1 edge-30 effect node_down reason=crash" in lines
    assert not any("edge-20 effect" in line for line in lines)


@pytest.mark.slow
def test_fleet_failing_inside_flower_shows_its_cause(tmp_path: Path) -> None:
    """The issue's case on a real fleet: an npz dataset holding pickled objects passes
    validation, the ServerApp fails to load it; show and ls name the node and log."""
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.array([{"a": 1}], dtype=object), y=np.array([0]))
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        FL_SPEC.replace(
            "fl: {rounds: 2}",
            "fl:\n    rounds: 1\n    protocol_timing: fast\n"
            f"    dataset: {{name: npz, path: {bad}}}\n",
        )
    )
    out = tmp_path / "runs"
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "COLUMNS": "250",
    }
    testbed = [sys.executable, "-m", "testbed"]
    t0 = time.monotonic()
    res = subprocess.run(
        [*testbed, "run", str(spec), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert time.monotonic() - t0 < 400
    run = RunStore(out).runs()[0]
    cause = run.summary_dict["cause"]  # recorded by the runner
    assert (cause["node"], cause["log"]) == ("cloud", "logs/flwr-run.log"), cause
    assert cause["message"].startswith("ValueError: Object arrays cannot be loaded")
    assert "cause: ValueError" in res.stdout  # the live summary says it too
    show = subprocess.run(
        [*testbed, "show", run.run_id, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert show.returncode == 0, show.stderr
    assert "from node cloud (ServerApp), logs/flwr-run.log:" in show.stdout
    assert "nodes/data/datasets.py" in show.stdout  # the frame that raised, in our code
    ls = subprocess.run(
        [*testbed, "ls", "--out", str(out)], env=env, capture_output=True, text=True, timeout=120
    )
    assert "cloud: ValueError: Object arrays" in ls.stdout
