"""The docker backend on a real engine (``make test-docker``): containers carry the
device profile's limits (docker inspect), engine faults act on them, a node killed by
the OOM killer is reported as ``oom``, and no container outlives its run: on success,
on error and on Ctrl-C."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import docker
import pytest

from testbed.backends.docker import NODE_LABEL, RUN_LABEL, DockerBackend
from testbed.planner import make_plan
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.docker.conftest import docker_run, labelled_containers

MB = 2**20
MIN_NODE_MB = 50.0  # a warm node (Python, Flower, torch imported) uses more than this

SMALL = """\
name: docker-small
seed: 3
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: tiny, tier: edge, profile: {{cpu_cores: 1, memory_mb: {memory_mb}}}, count: 2}}
workload:
  fl: {{rounds: {rounds}, local_epochs: 1, round_timeout_s: 20}}
"""


def _state(c: docker.models.containers.Container) -> str:
    c.reload()
    return str(c.attrs["State"]["Status"])


def test_limits_from_the_profile_and_faults_through_the_engine(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    # (a superlink-restart planned keeps the SuperLink's state on disk, which the restart
    # below needs; the fault itself never fires: no chaos engine runs here)
    restart = "faults:\n  - {kind: superlink-restart, at_round: 1}\n"
    plan = make_plan(parse_spec(SMALL.format(memory_mb=1024, rounds=1) + restart))
    be = DockerBackend(plan, tmp_path / "run-limits")
    try:
        be.start()
        mine = engine.containers.list(filters={"label": f"{RUN_LABEL}={be.run_label}"})
        cs = {c.labels[NODE_LABEL]: c for c in mine}
        assert set(cs) == {"cloud", "tiny-1", "tiny-2"}
        host = sorted(os.sched_getaffinity(0))
        for i, name in enumerate(("tiny-1", "tiny-2")):
            hc = cs[name].attrs["HostConfig"]
            assert (hc["CpuQuota"], hc["CpuPeriod"]) == (100_000, 100_000)
            assert hc["Memory"] == 1024 * MB
            if len(host) > 1:
                assert hc["CpusetCpus"] == str(host[i % len(host)])
            assert hc["NetworkMode"] == "host"
        assert be.node_limits()["tiny-1"]["memory"] == f"docker memory={1024 * MB}"
        node = be.node("tiny-1")
        node.update_limits(cpus=0.5, memory_mb=900)
        cs["tiny-1"].reload()
        hc = cs["tiny-1"].attrs["HostConfig"]
        assert (hc["CpuQuota"], hc["Memory"]) == (50_000, 900 * MB)
        node.pause()
        assert _state(cs["tiny-1"]) == "paused" and node.alive()
        node.resume()
        assert _state(cs["tiny-1"]) == "running"
        time.sleep(2.1)  # one stats interval
        res = be.resources()
        assert res["tiny-2"].source == "docker-stats" and res["tiny-2"].rss_mb > MIN_NODE_MB
        node.kill()
        assert not node.alive() and "tiny-1" not in be.exit_reasons()  # a fault, not a death
        node.start()
        be._wait_node("tiny-1", time.monotonic() + 60)
        assert node.alive() and _state(cs["tiny-1"]) == "running"
        db = tmp_path / "run-limits" / "nodes" / "cloud" / "superlink.db"
        assert db.stat().st_size > 0  # Flower's state on disk: a restart keeps it
        be.restart_superlink()
        assert _state(cs["cloud"]) == "running" and be.superlink_restarts == 1
    finally:
        be.stop()
    assert labelled_containers(engine) == []


def test_a_node_killed_by_oom_is_reported_oom_and_nothing_is_left(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Under a 96 MB limit a node cannot import its stack: the kernel kills it; the run
    fails naming ``oom`` (State.OOMKilled) and its containers are removed (error path)."""
    store = RunStore(tmp_path)
    exp = parse_spec(SMALL.format(memory_mb=96, rounds=1))
    with pytest.raises(RuntimeError, match="oom"):
        run_experiment(exp, store, backend="docker")
    assert labelled_containers(engine) == []
    (run,) = store.runs()
    assert run.status == "failed"


def test_ctrl_c_removes_every_container(engine: docker.DockerClient, tmp_path: Path) -> None:
    spec = tmp_path / "long.yaml"
    spec.write_text(SMALL.format(memory_mb=1024, rounds=30))
    proc = docker_run(spec, tmp_path / "runs")
    try:
        deadline = time.monotonic() + 120
        while len(engine.containers.list(filters={"label": RUN_LABEL})) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.5)
        time.sleep(5)  # into the run
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert labelled_containers(engine) == []
    # no superlink-restart planned: the SuperLink's state in memory, as locally (on disk,
    # 48 containers made its SQLite writes time out)
    assert list((tmp_path / "runs").rglob("superlink.db")) == []
