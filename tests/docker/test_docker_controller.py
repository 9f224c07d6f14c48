"""The dashboard's path to a docker fleet (``make test-docker``): the controller says
docker is available on this host, launches a spec on it (what the Experiments page
sends), and the Fleet view of the run names its backend and its node containers' engine
figures. The Chaos page's injections on a docker fleet: tests/docker/test_docker_inject.py."""

from __future__ import annotations

import time
from pathlib import Path

import docker
from fastapi.testclient import TestClient

from testbed.controller.app import create_app
from testbed.store import RunStore
from tests.docker.conftest import labelled_containers

SPEC = """\
name: dashboard-docker
seed: 2
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, profile: rpi5, count: 2}
workload:
  fl: {rounds: 2, local_epochs: 1, protocol_timing: fast}
"""


def test_the_controller_launches_on_docker_and_shows_its_fleet(
    engine: docker.DockerClient, tmp_path: Path, root: Path
) -> None:
    out = tmp_path / "runs"
    api = TestClient(create_app(out, root / "experiments"))
    backends = {b["name"]: b for b in api.get("/backends").json()}
    assert backends["docker"]["available"], backends["docker"]
    body = {"text": SPEC, "name": "dashboard-docker.yaml", "backend": "docker"}
    resp = api.post("/launches", json=body)
    assert resp.status_code == 201 and resp.json()["backend"] == "docker", resp.text
    job = resp.json()["job_id"]
    deadline, fleet = time.monotonic() + 300, None
    while time.monotonic() < deadline:
        info = api.get(f"/launches/{job}").json()
        if info["runs"] and fleet is None:
            view = api.get(f"/runs/{info['runs'][0]}/fleet")
            if view.status_code == 200 and view.json().get("nodes"):
                fleet = view.json()
        if info["finished"] == 1:
            break
        time.sleep(1)
    (run,) = RunStore(out).runs()
    assert run.status == "completed" and run.backend == "docker"
    assert fleet is not None and fleet["backend"] == "docker", fleet
    assert {n["name"] for n in fleet["nodes"]} >= {"cloud", "edge-1", "edge-2"}
    assert labelled_containers(engine) == []
