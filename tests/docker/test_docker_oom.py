"""A node whose container exceeds its memory cap in the middle of a run
(``make test-docker``): the kernel's OOM killer ends it, the run records ``oom`` for
that node (a ``node_down`` with the engine's reason) and goes on to complete with the
other nodes."""

from __future__ import annotations

import time
from pathlib import Path

import docker
from docker.errors import APIError

from testbed.backends.docker import NODE_LABEL, RUN_LABEL
from testbed.store import RunStore
from tests.docker.conftest import docker_run, labelled_containers
from tests.docker.test_docker_inject import _running

ROUNDS = 6
MEMORY_MB = 1024

SPEC = f"""\
name: docker-oom
seed: 4
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, profile: {{cpu_cores: 1, memory_mb: {MEMORY_MB}}}, count: 2}}
workload:
  fl: {{rounds: {ROUNDS}, local_epochs: 1, round_timeout_s: 20}}
"""

#: Run inside edge-1's container, mid-run: the node's own processes become the OOM
#: killer's first choice (oom_score_adj 1000, as root in the container), then memory is
#: touched in 64 MB steps up to twice the container's cap: the container's memory
#: exceeds its limit and the kernel kills the node (the container ends with it).
HOG = f"""
import os
me = str(os.getpid())
for pid in os.listdir("/proc"):
    if pid.isdigit() and pid not in (me, "1"):
        try:
            open(f"/proc/{{pid}}/oom_score_adj", "w").write("1000")
        except OSError:
            pass
held = []
for _ in range({2 * MEMORY_MB // 64}):
    held.append(bytearray(64 * 2**20))
"""


def test_a_node_over_its_memory_cap_mid_run_is_oom_and_the_run_goes_on(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    spec, out = tmp_path / "oom.yaml", tmp_path / "runs"
    spec.write_text(SPEC)
    proc = docker_run(spec, out)
    try:
        store = RunStore(out)
        run = _running(store, proc, 240)
        (c,) = engine.containers.list(
            filters={"label": [f"{RUN_LABEL}={run.run_id}", f"{NODE_LABEL}=edge-1"]}
        )
        try:
            c.exec_run(["python", "-c", HOG], user="0:0")
        except APIError:
            pass  # the container ended under the exec
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            c.reload()
            if c.attrs["State"]["Status"] == "exited":
                break
            time.sleep(0.5)
        assert c.attrs["State"]["OOMKilled"] is True, c.attrs["State"]
        assert proc.wait(timeout=400) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert store.run(run.run_id).status == "completed"
    events = store.events(run.run_id)
    down = [e.data_dict.get("reason") for e in events
            if (e.kind, e.node) == ("node_down", "edge-1")]  # fmt: skip
    assert down == ["oom"], down
    status = {(r, n): s for r, n, s, _w in store.round_status(run.run_id)}
    assert status[(ROUNDS, "edge-1")] in ("excluded", "failed"), status
    assert all(status[(r, "edge-2")] == "completed" for r in range(1, ROUNDS + 1)), status
    assert labelled_containers(engine) == []
