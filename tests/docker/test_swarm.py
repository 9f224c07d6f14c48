"""One experiment across two Docker engines in one swarm (``--backend swarm``).

docker/swarm.sh (``make test-swarm``, part of ``make test-docker``) starts a second
private engine beside e2e.sh's, forms a swarm on loopback (engine A: manager, label
``engine=a``; engine B: worker, ``engine=b``) and runs this file with
``TESTBED_SWARM_TESTS=1``, ``TESTBED_SWARM_ENGINES`` = engine B's socket and
``TESTBED_SWARM_B`` = its swarm node id. Elsewhere it skips.

The spec (tests/docker/test_docker_parity.py's) pins two nodes to each engine and has a
partition (engine A), a straggler and a crash (engine B: through its own API and through
the swarm). It runs on local, on the single engine (``--backend docker``, placements
ignored and recorded so) and on the swarm: the parity test's checks hold for docker and
for swarm against local, every (round, node) status of the swarm equals the single
engine's, every container must have run where its
placement says (the services' tasks, as ``docker service ps`` lists them, sampled
while the run goes), and nothing may be left on either engine.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from testbed.backends import preflight
from testbed.backends.base import NotSupported
from testbed.backends.docker import RUN_LABEL
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.docker.conftest import docker_run, labelled_containers
from tests.docker.test_docker_parity import PARITY, assert_parity, runs

ENABLE = "TESTBED_SWARM_TESTS"

ON = {"near-1": "a", "near-2": "a", "far-1": "b", "far-2": "b", "cloud": "a"}


@pytest.fixture(scope="module")
def swarm(engine: docker.DockerClient) -> Iterator[docker.DockerClient]:
    """Engine B's client (the worker); engine A is ``engine``."""
    if os.environ.get(ENABLE) != "1":
        pytest.skip(f"needs two engines in a swarm: run `make test-swarm` (root), or {ENABLE}=1")
    b = docker.DockerClient(base_url=os.environ["TESTBED_SWARM_ENGINES"], timeout=60)
    yield b
    b.close()


class TaskWatch(threading.Thread):
    """``docker service ps`` of the run's services every 0.5 s while the run goes:
    node -> the engine label of every swarm node its tasks ran on."""

    def __init__(self, manager: docker.DockerClient) -> None:
        super().__init__(daemon=True)
        self.manager = manager
        self.labels = {
            n.id: (n.attrs["Spec"].get("Labels") or {}).get("engine") for n in manager.nodes.list()
        }
        self.seen: dict[str, set[str]] = {}
        self.tasks: dict[str, set[str]] = {}  # node -> ids of every task its service had
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            try:
                services = self.manager.services.list(filters={"label": RUN_LABEL})
                for s in services:
                    node = s.attrs["Spec"]["Labels"]["testbed.node"]
                    tasks = s.tasks()  # (a scale to 0 deletes the task: ids, not counts)
                    self.tasks.setdefault(node, set()).update(t["ID"] for t in tasks)
                    for t in tasks:
                        if t.get("NodeID"):
                            self.seen.setdefault(node, set()).add(self.labels[t["NodeID"]])
            except docker.errors.NotFound:
                continue  # (a service removed meanwhile)


def test_one_spec_on_local_one_engine_and_two_engines(
    engine: docker.DockerClient, swarm: docker.DockerClient, tmp_path: Path
) -> None:
    """tests/docker/test_docker_parity.py's spec on local, docker (engine A alone) and the
    swarm: docker and swarm each agree with local (the parity test's checks), so every
    (round, node) status of the swarm equals the single engine's."""
    exp = parse_spec(PARITY)
    with pytest.raises(docker.errors.ImageNotFound):  # (swarm.sh starts B empty)
        swarm.images.get(os.environ.get("TESTBED_IMAGE", "continuum-testbed:latest"))
    watch = TaskWatch(engine)
    got = runs(exp, ("local", "docker"), tmp_path)
    watch.start()
    got.update(runs(exp, ("swarm",), tmp_path))
    watch.done.set()
    watch.join(5)
    assert_parity(exp, got["local"], got["docker"], "docker cpu_quota=")
    assert_parity(exp, got["local"], got["swarm"], "swarm nano_cpus=")
    one, two = got["docker"], got["swarm"]
    assert two.status == one.status
    assert two.status[(4, "far-2")] in ("excluded", "failed")  # crashed on engine B
    throttled = {(k, n) for k, n in two.kinds if k in ("cpu_throttled", "cpu_restored")}
    assert throttled == {("cpu_throttled", "far-1"), ("cpu_restored", "far-1")}  # via B's API
    # where each container ran: the tasks the swarm placed (docker service ps), as the
    # run recorded them too
    assert {n: sorted(e) for n, e in watch.seen.items()} == {n: [e] for n, e in ON.items()}
    ready = {b: _fleet_ready(tmp_path / b) for b in ("docker", "swarm")}
    b_id = os.environ["TESTBED_SWARM_B"][:12]
    placed = ready["swarm"]["placed"]
    assert {n for n, where in placed.items() if b_id in where} == {"far-1", "far-2"}, placed
    assert set(ready["swarm"]["image_loads"]) != set(), ready["swarm"]  # into engine B
    assert "placement of near, far (read by --backend swarm only" in ready["docker"]["ignored"]
    assert two.limits["far-1"]["engine"].endswith(f"({b_id})")
    # per-container memory from both engines' stats
    store = RunStore(tmp_path / "swarm")
    run_id = store.runs()[0].run_id
    peak = {m.node: m.value for m in store.metrics(run_id, "peak_rss_mb")}
    assert all((peak.get(n) or 0) > 50 for n in ON if n != "cloud"), peak
    # nothing left: no service, no container of the runs on either engine
    assert engine.services.list(filters={"label": RUN_LABEL}) == []
    assert labelled_containers(engine) == [] and labelled_containers(swarm) == []


def _fleet_ready(where: Path) -> dict[str, Any]:
    store = RunStore(where)
    run_id = store.runs()[0].run_id
    return next(json.loads(e.data) for e in store.events(run_id) if e.kind == "fleet_ready")


def test_validate_refuses_what_the_swarm_cannot_do(swarm: docker.DockerClient) -> None:
    """A placement no engine matches, netem, and a straggler on a node that may land on
    an engine the runner cannot reach: each refused before anything starts, named."""
    nowhere = PARITY.replace("placement: {engine: b}", "placement: {engine: c}")
    with pytest.raises(NotSupported, match=r"fleet.nodes\[2\].placement: no ready swarm node"):
        preflight("swarm", [parse_spec(nowhere)], host=False)
    netem = PARITY.replace("links:\n", "links:\n  mode: netem\n")
    with pytest.raises(NotSupported, match="links.mode: netem is not supported on --backend swarm"):
        preflight("swarm", [parse_spec(netem)], host=False)
    os.environ["TESTBED_SWARM_ENGINES"], url = "", os.environ["TESTBED_SWARM_ENGINES"]
    try:
        with pytest.raises(NotSupported, match=r"faults\[1\].kind: straggler acts through"):
            preflight("swarm", [parse_spec(PARITY)], host=False)
    finally:
        os.environ["TESTBED_SWARM_ENGINES"] = url
    preflight("swarm", [parse_spec(PARITY)], host=True)  # with engine B reachable: fine


CTRL_C = """\
name: swarm-ctrl-c
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: near, tier: edge, profile: rpi5, placement: {engine: a}}
    - {id: far, tier: edge, profile: rpi5, placement: {engine: b}}
workload:
  fl: {rounds: 30, local_epochs: 1, round_timeout_s: 20}
"""


def test_ctrl_c_removes_every_service_and_container_on_both_engines(
    engine: docker.DockerClient, swarm: docker.DockerClient, tmp_path: Path
) -> None:
    spec = tmp_path / "long.yaml"
    spec.write_text(CTRL_C)
    proc = docker_run(spec, tmp_path / "runs", backend="swarm")
    try:
        deadline = time.monotonic() + 120
        while (
            not swarm.containers.list(filters={"label": RUN_LABEL})
            or len(engine.containers.list(filters={"label": RUN_LABEL})) < 2
        ):  # the server and near on A, far on B
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.5)
        time.sleep(5)  # into the run
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert engine.services.list(filters={"label": RUN_LABEL}) == []
    assert labelled_containers(engine) == [] and labelled_containers(swarm) == []


OUTAGE = """\
name: swarm-outage
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: near, tier: edge, profile: rpi5, placement: {engine: a}}
    - {id: far, tier: edge, profile: rpi5, placement: {engine: b}}
workload:
  fl: {rounds: 4, local_epochs: 1, round_timeout_s: 30}
faults:
  - {kind: outage, node: far, at_round: 2, duration_s: 8}
"""


def test_an_outage_scales_the_service_to_0_and_back_on_its_engine(
    engine: docker.DockerClient, swarm: docker.DockerClient, tmp_path: Path
) -> None:
    """An outage through the swarm: far's task removed, then a new task placed by the
    same constraint (engine B again), which rejoins and completes the last round."""
    watch = TaskWatch(engine)
    watch.start()
    store = RunStore(tmp_path / "outage")
    res = run_experiment(parse_spec(OUTAGE), store, backend="swarm")
    watch.done.set()
    watch.join(5)
    assert res.status == "completed", res.summary
    kinds = {(e.kind, e.node) for e in store.events(res.run_id)}
    assert {("node_down", "far"), ("node_restarted", "far")} <= kinds, kinds
    status = {(r, n): s for r, n, s, _w in store.round_status(res.run_id)}
    assert status[(4, "far")] == "completed", status
    assert len(watch.tasks["far"]) == 2 and watch.seen["far"] == {"b"}, (watch.tasks, watch.seen)
    assert labelled_containers(engine) == [] and labelled_containers(swarm) == []
