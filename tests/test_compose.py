"""docker-compose.yml is generated from the quickstart spec and must stay in sync."""

from __future__ import annotations

from pathlib import Path

import yaml

from testbed.backends.compose import render_compose
from testbed.planner import make_plan
from testbed.spec.loader import load_spec


def test_committed_compose_matches_spec(root: Path) -> None:
    spec = "experiments/quickstart.yaml"
    want = render_compose(make_plan(load_spec(root / spec)), spec)
    assert (root / "docker-compose.yml").read_text() == want, "run `make compose`"


def test_compose_runs_the_experiment_with_the_docker_backend(root: Path) -> None:
    doc = yaml.safe_load((root / "docker-compose.yml").read_text())
    services = doc["services"]
    assert set(services) == {"testbed", "controller", "ui"}  # nodes: made by the runner
    for svc in services.values():
        assert svc["network_mode"] == "host" and svc["init"] is True
        assert svc["command"][0] == "testbed"
    tb = services["testbed"]
    assert tb["command"] == [
        "testbed",
        "run",
        "${EXPERIMENT:-experiments/quickstart.yaml}",
        "--backend",
        "docker",
        "--out",
        "${PWD}/runs",
    ]
    # the project at its host path (specs, runs), and the engine's socket
    assert tb["volumes"] == [
        "${PWD}:${PWD}",
        "/:/host:ro",  # a spec anywhere on the host (testbed/hostfs.py)
        "${DOCKER_SOCK:-/var/run/docker.sock}:/var/run/docker.sock",
    ]
    assert tb["environment"]["TESTBED_HOST_ROOT"] == "/host"
    assert tb["working_dir"] == "${PWD}"
    assert tb["environment"]["DOCKER_HOST"] == "unix:///var/run/docker.sock"
