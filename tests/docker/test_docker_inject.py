"""Live injections into a running docker fleet (``make test-docker``): ``testbed
inject`` and the controller's ``POST /runs/{id}/inject`` (what the dashboard's Chaos
page sends) act on the containers. A crash kills the node's container (the engine says
it exited), a partition cuts its link and heals, a straggler slows the node's compute;
each is recorded with its effect and the run completes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import docker
from fastapi.testclient import TestClient

from testbed.backends.docker import NODE_LABEL, RUN_LABEL
from testbed.controller.app import create_app
from testbed.rows import RunRow
from testbed.store import RunStore
from tests.docker.conftest import docker_run, labelled_containers

ROUNDS = 6
SLOWDOWN = 3.0
#: > 2 x round_timeout_s: the partition must cost edge-2 a round. It is injected a few
#: seconds into round 1, after the crash: edge-2's round-1 reply may get out before the
#: cut (measured: its training takes ~2 s), and round 1 ends within 20 s of its start,
#: so the partition covers more than round 2's whole deadline.
PARTITION_S = 50
STRETCH_TOL = 0.8  # named tolerance: a straggled round's device time >= this x factor x CPU

SPEC = f"""\
name: docker-inject
seed: 2
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, profile: {{cpu_cores: 1, memory_mb: 1024}}, count: 3}}
workload:
  fl: {{rounds: {ROUNDS}, local_epochs: 1, round_timeout_s: 20}}
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "testbed", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, COLUMNS="300"),
    )


def _running(store: RunStore, proc: subprocess.Popen[str], timeout_s: float) -> RunRow:
    """The run once its fleet is up and a round has started."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        runs = store.runs() if (store.root / "testbed.db").exists() else []
        if runs and any(e.kind == "round_start" for e in store.events(runs[0].run_id)):
            return runs[0]
        time.sleep(1)
    raise AssertionError("the docker run did not reach its first round")


def _state(client: docker.DockerClient, run: str, node: str) -> str:
    (c,) = client.containers.list(
        all=True, filters={"label": [f"{RUN_LABEL}={run}", f"{NODE_LABEL}={node}"]}
    )
    return str(c.attrs["State"]["Status"])


def test_inject_and_the_chaos_api_act_on_containers(
    engine: docker.DockerClient, tmp_path: Path, root: Path
) -> None:
    spec, out = tmp_path / "inject.yaml", tmp_path / "runs"
    spec.write_text(SPEC)
    proc = docker_run(spec, out)
    try:
        store = RunStore(out)
        run = _running(store, proc, 240)
        r = _cli("inject", run.run_id, "--kind", "crash", "--node", "edge-1", "--out", str(out))
        assert r.returncode == 0 and "applied" in r.stdout, r.stdout + r.stderr
        assert _state(engine, run.run_id, "edge-1") == "exited"  # docker kill
        api = TestClient(create_app(out, root / "experiments"))
        # longer than two rounds' deadlines (20 s): the round in progress, or the next
        # one when edge-2's reply got out just before the cut, cannot get its reply
        body = {"kind": "partition", "node": "edge-2", "duration_s": PARTITION_S, "wait_s": 15}
        resp = api.post(f"/runs/{run.run_id}/inject", json=body)
        assert resp.status_code == 201 and resp.json()["status"] == "applied", resp.text
        r = _cli(
            "inject", run.run_id, "--kind", "straggler", "--node", "edge-3",
            "--factor", str(SLOWDOWN), "--rounds", "2", "--out", str(out),
        )  # fmt: skip
        assert r.returncode == 0 and "applied" in r.stdout, r.stdout + r.stderr
        control = json.loads((out / run.run_id / "nodes" / "edge-3" / "control.json").read_text())
        assert control["slowdown"] == SLOWDOWN
        assert proc.wait(timeout=400) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert store.run(run.run_id).status == "completed"
    events = store.events(run.run_id)
    injected = {(e.node, e.data_dict["kind"]) for e in events if e.kind == "fault_injected"}
    assert injected == {("edge-1", "crash"), ("edge-2", "partition"), ("edge-3", "straggler")}
    seen = {(e.kind, e.node) for e in events}
    assert {("node_down", "edge-1"), ("link_partitioned", "edge-2")} <= seen
    assert {("link_healed", "edge-2"), ("straggler_set", "edge-3")} <= seen
    status = {(r, n): s for r, n, s, _w in store.round_status(run.run_id)}
    assert status[(ROUNDS, "edge-1")] in ("excluded", "failed")
    # the partition's effect, not only its event: the round in progress when the link
    # was cut ends without edge-2's reply (late or failed), and once healed it answers
    cut = next(e.ts for e in events if (e.kind, e.node) == ("link_partitioned", "edge-2"))
    during = [r for r, n, s, _why, ts in store.round_status(run.run_id, with_ts=True)
              if n == "edge-2" and ts > cut and s != "completed"]  # fmt: skip
    assert during, status
    assert status[(ROUNDS, "edge-2")] == "completed", status
    until = next(e.data_dict["until_round"] for e in events if e.kind == "straggler_set")
    train = {  # the training's CPU time: the work the straggler factor multiplies
        m.round: m.value or 0
        for m in store.metrics(run.run_id, "train_cpu_s")
        if m.node == "edge-3"
    }
    device = {
        m.round: m.value or 0
        for m in store.metrics(run.run_id, "device_time_s")
        if m.node == "edge-3"
    }
    slowed = [r for r in (until - 1, until) if r in device and r in train]
    assert any(device[r] >= STRETCH_TOL * SLOWDOWN * train[r] for r in slowed), (device, train)
    assert labelled_containers(engine) == []
