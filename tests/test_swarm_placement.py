"""``fleet.nodes[].placement`` without an engine: the spec's checks, the swarm
constraints it becomes, the default by tier, and that every other backend says it
ignores it (tests/docker/test_swarm.py runs it on two engines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.backends import get_backend
from testbed.backends.swarm import constraints, matches, placements
from testbed.planner import make_plan
from testbed.spec.loader import SpecError, parse_spec

SPEC = """\
name: placed
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: near, tier: edge, count: 2, placement: {engine: a, hostname: box-a}}
    - {id: sat, tier: space}
    - {id: fog, tier: fog}
workload:
  fl: {rounds: 1}
"""


def _node(nid: str, host: str, role: str = "worker", **labels: str) -> dict[str, object]:
    return {
        "ID": nid,
        "Description": {"Hostname": host},
        "Spec": {"Role": role, "Labels": labels},
    }


def test_placement_becomes_swarm_constraints() -> None:
    assert constraints({"engine": "a", "hostname": "box-a"}) == [
        "node.labels.engine==a",
        "node.hostname==box-a",
    ]
    assert constraints({"node": "xyz", "role": "worker"}) == ["node.id==xyz", "node.role==worker"]


def test_a_node_matches_every_key_or_not_at_all() -> None:
    a = _node("id-a", "box-a", "manager", engine="a", tier="cloud")
    b = _node("id-b", "box-b", engine="b", tier="edge")
    assert matches(a, {"engine": "a", "hostname": "box-a"})
    assert not matches(a, {"engine": "a", "hostname": "box-b"})
    assert matches(b, {"role": "worker", "tier": "edge"}) and not matches(a, {"role": "worker"})
    assert matches(b, {}) and not matches(b, {"gpu": "yes"})


def test_default_placement_follows_the_engines_tier_labels() -> None:
    exp = parse_spec(SPEC)
    engines = [_node("a", "h", "manager", tier="cloud"), _node("b", "h", tier="edge")]
    chosen = placements(exp, engines)
    assert chosen["near-1"] == chosen["near-2"] == {"engine": "a", "hostname": "box-a"}
    assert chosen["cloud"] == {"tier": "cloud"}
    assert chosen["sat"] == {} and chosen["fog"] == {}  # no engine labelled space or fog
    assert placements(exp, [_node("a", "h", "manager")])["cloud"] == {}  # no tier labels


@pytest.mark.parametrize(
    ("placement", "match"),
    [
        ("{engine: ''}", "must be one word"),
        ("{'bad key': a}", "letters, digits"),
        ("{role: boss}", "must be manager or worker"),
        ("{tier: a=b}", "must be one word"),
    ],
)
def test_bad_placements_are_refused_naming_the_field(placement: str, match: str) -> None:
    text = SPEC.replace("{engine: a, hostname: box-a}", placement)
    with pytest.raises(SpecError, match=match) as e:
        parse_spec(text)
    assert "placement" in str(e.value)


@pytest.mark.parametrize("backend", ["local", "docker", "simulation"])
def test_other_backends_say_they_ignore_placement(backend: str, tmp_path: Path) -> None:
    exp = parse_spec(SPEC)
    cls = get_backend(backend)
    note = "placement of near (read by --backend swarm only"
    assert any(note in line for line in cls.ignored(exp))
    if backend != "docker":  # (docker's constructor connects to an engine)
        info = cls(make_plan(exp), tmp_path).fleet_info()
        assert note in info["ignored"]
    assert not get_backend("swarm").ignored(exp)
