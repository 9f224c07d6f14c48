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


def test_compose_services_one_per_node(root: Path) -> None:
    doc = yaml.safe_load((root / "docker-compose.yml").read_text())
    services = doc["services"]
    assert {"cloud", "edge-1", "edge-2", "edge-3", "fog", "testbed"} <= set(services)
    for svc in services.values():
        assert svc["network_mode"] == "host" and svc["init"] is True
        assert svc["command"][0] == "testbed"
    assert services["testbed"]["command"][:2] == ["testbed", "run"]
