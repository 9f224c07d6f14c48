"""``testbed resume``: a runner killed with SIGKILL mid-run, resumed from its checkpoint.

The store must end with every (round, node) exactly once, the round that was under way
when the runner died must not be left half, no process of the killed attempt may
survive, and the resumed run must learn exactly what an uninterrupted run learns (the
local backend is reproducible: same YAML and seed, same per-round metrics).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from nodes.fl.checkpoint import load_checkpoint
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.conftest import processes_under
from tests.fleet_kill import cli, has_event, node_cgroups, own_cgroups, run_pids, wait_store

ROUNDS = 4
REAP_S = 20.0  # the longest the watchdog of a killed runner may take to reap its fleet (s)
NODES = ("edge-1", "edge-2")
SPEC = f"""\
name: resume
seed: 5
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, profile: rpi5, count: 2}}
workload:
  fl: {{rounds: {ROUNDS}, local_epochs: 1}}
"""
#: Per-(round, node) metrics a round records once per node (every round, every node).
PER_NODE = ("train_loss", "bytes_sent")
#: Per-(round, node) metrics recorded once per reply: every round's train reply, and the
#: last round's evaluation (``piggyback``: the others ride on the next train message).
PER_REPLY = ("bytes_received", "round_trip_s")
#: Metrics that depend only on data, seed and arithmetic (compared with a straight run).
LEARNING = ("global_acc", "global_loss", "train_loss", "eval_acc", "federated_acc")


def _counts(store: RunStore, run_id: str, name: str) -> Counter[tuple[int | None, str | None]]:
    return Counter((m.round, m.node) for m in store.metrics(run_id, name))


def _values(store: RunStore, run_id: str, name: str) -> list[tuple[int, str, float]]:
    return sorted((m.round, m.node or "", m.value) for m in store.metrics(run_id, name))


def test_unknown_completed_and_checkpointless_runs_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    store = RunStore(out)
    store.create_run("done-1", "x", seed=1, backend="local")
    store.finish_run("done-1", "completed")
    store.create_run("dead-1", "x", seed=1, backend="local", pid=2**22 + 7)  # no such pid
    (out / "dead-1" / "spec.resolved.yaml").write_text(SPEC)
    for run_id, words in (
        ("nope", "no such run"),
        ("done-1", "completed"),
        ("dead-1", "no checkpoint"),
    ):
        proc = cli(out, "resume", run_id)
        text, _ = proc.communicate(timeout=120)
        assert proc.returncode == 2, text
        assert words in text and "Traceback" not in text, text
    assert store.run("dead-1").status == "running"  # a refused resume changes nothing


@pytest.mark.slow
def test_resume_after_sigkill_continues_from_the_checkpoint(tmp_path: Path) -> None:
    straight_store = RunStore(tmp_path / "straight")
    straight = run_experiment(parse_spec(SPEC), straight_store, spec_path="inline")
    assert straight.status == "completed", straight.summary

    out = tmp_path / "runs"
    spec = tmp_path / "resume.yaml"
    spec.write_text(SPEC)
    cgroups_before = node_cgroups()
    proc = cli(out, "run", str(spec))
    # round 3 started: the checkpoint of round 2 is on disk and round 3 is half done
    run_id = wait_store(out, has_event("round_start", 3), proc, 300)
    run_dir = out / run_id
    first = {p.pid for p in processes_under(run_dir)}
    assert first, "the fleet is running"
    proc.kill()  # SIGKILL: the runner's teardown never runs
    proc.wait()
    deadline = time.time() + REAP_S  # the run's watchdog reaps the fleet
    while processes_under(run_dir) and time.time() < deadline:
        time.sleep(0.25)
    assert processes_under(run_dir) == []
    assert RunStore(out).run(run_id).status == "interrupted"

    resume = cli(out, "resume", run_id[:12])
    text, _ = resume.communicate(timeout=400)
    assert resume.returncode == 0, text
    assert not any(psutil.pid_exists(p) and _same_run(p, run_dir) for p in first)
    assert processes_under(tmp_path) == []
    # the killed attempt's cgroups are gone (its own: a neighbour's runs are not counted)
    assert own_cgroups(node_cgroups() - cgroups_before, first | run_pids(out)) == set()

    store = RunStore(out)
    run = store.run(run_id)
    assert run.status == "completed" and run.summary_dict["final_global_acc"] is not None
    [resumed] = [e.data_dict for e in store.events(run_id) if e.kind == "resumed"]
    # round 2's checkpoint, or round 3's if the dead attempt's ServerApp finished round 3
    # before its nodes were reaped; the round after it ran again
    assert resumed["checkpoint_round"] in (2, 3)
    assert resumed["from_round"] == resumed["checkpoint_round"] + 1
    ckpt = load_checkpoint(run_dir)
    assert ckpt is not None and ckpt.round == ROUNDS  # (the final one)
    # every (round, node) exactly once: statuses, per-node metrics, global metrics
    assert Counter((s.round, s.node, s.status) for s in store.round_status(run_id)) == Counter(
        (r, n, "completed") for r in range(1, ROUNDS + 1) for n in NODES
    )
    for name in PER_NODE:
        want = Counter((r, n) for r in range(1, ROUNDS + 1) for n in NODES)
        assert _counts(store, run_id, name) == want, name
    for name in PER_REPLY:
        want = Counter((r, n) for r in range(1, ROUNDS + 1) for n in NODES)
        assert _counts(store, run_id, name) == want + Counter((ROUNDS, n) for n in NODES), name
    assert _counts(store, run_id, "global_acc") == Counter((r, None) for r in range(ROUNDS + 1))
    rounds_started = Counter(e.round for e in store.events(run_id) if e.kind == "round_start")
    assert rounds_started == Counter(range(1, ROUNDS + 1))
    # the resumed run learned exactly what the straight run learned
    for name in LEARNING:
        a = _values(store, run_id, name)
        assert a and a == _values(straight_store, straight.run_id, name), name
    assert (run_dir / "attempts" / "1" / "logs").is_dir()
    proc = cli(out, "resume", run_id)  # a completed run: nothing to resume
    assert proc.wait(timeout=120) == 2


def _same_run(pid: int, run_dir: Path) -> bool:
    """Process ``pid`` still belongs to the run (not a pid reused by another process)."""
    try:
        p = psutil.Process(pid)
        return str(run_dir) in " ".join(p.cmdline()) + p.environ().get("FLWR_HOME", "")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def test_checkpoint_is_replaced_atomically(tmp_path: Path) -> None:
    """A checkpoint is written beside the old one and renamed over it: no temporary file
    stays, the newest round wins, and a reader always sees a whole file."""
    import torch
    from flwr.app import ArrayRecord

    from nodes.fl.checkpoint import save_checkpoint

    for r in (1, 2):
        save_checkpoint(tmp_path, r, ArrayRecord({"w": torch.full((3,), float(r))}))
    ckpt = load_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.round == 2 and ckpt.arrays["w"].tolist() == [2.0] * 3
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]
    assert load_checkpoint(tmp_path / "nowhere") is None


def test_roll_back_keeps_exactly_the_rounds_up_to_the_checkpoint(tmp_path: Path) -> None:
    """Lines the dead runner never ingested (before the checkpoint) come in, everything
    after it goes, except how the attempt ended; a half-written last line is cut off."""
    import json

    from testbed.resume import roll_back

    store = RunStore(tmp_path)
    run_dir = store.create_run("r", "x", seed=1, backend="local")
    t = 1000.0  # the checkpoint's time
    lines = [
        {"kind": "metric", "name": "train_loss", "value": 0.5, "round": 2, "node": "a", "t": t - 2},
        {"kind": "status", "round": 2, "node": "a", "status": "completed", "t": t - 2},
        {
            "kind": "metric",
            "name": "global_acc",
            "value": 0.8,
            "round": 2,
            "node": None,
            "t": t - 1,
        },
        {"kind": "event", "name": "round_start", "round": 3, "node": None, "data": {}, "t": t + 1},
        {"kind": "metric", "name": "train_loss", "value": 0.4, "round": 3, "node": "a", "t": t + 2},
    ]
    store.ingest("r", [lines[0], lines[3], lines[4]])  # the runner saw these before dying
    store.add_event("r", "runner_lost", ts=t + 5)
    store.add_event("r", "fault_applied", round=3, ts=t + 3)
    text = "".join(json.dumps(x) + "\n" for x in lines) + '{"kind": "met'
    (run_dir / "telemetry.jsonl").write_text(text)

    counts = roll_back(store, "r", run_dir, t)
    assert counts["ingested"] == 2  # the status and global_acc of round 2
    assert counts["dropped_metrics"] == 1 and counts["dropped_events"] == 2
    assert sorted((m.name, m.round) for m in store.metrics("r")) == [
        ("global_acc", 2),
        ("train_loss", 2),
    ]
    assert [(s.round, s.node, s.status) for s in store.round_status("r")] == [(2, "a", "completed")]
    assert [e.kind for e in store.events("r")] == ["runner_lost"]
    assert (run_dir / "telemetry.jsonl").read_text().endswith("}\n")
    assert roll_back(store, "r", run_dir, t)["ingested"] == 0  # idempotent
