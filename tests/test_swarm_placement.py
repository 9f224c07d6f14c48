"""``fleet.nodes[].placement`` without an engine: the spec's checks, the swarm
constraints it becomes, the default by tier, and that every other backend says it
ignores it (tests/docker/test_swarm.py runs it on two engines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.backends import get_backend
from testbed.backends.swarm_engines import constraints, matches, placements
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


class _Manager:
    """A swarm manager's answers, as the docker SDK gives them (no engine here)."""

    def __init__(self) -> None:
        self.nodes = self

    def info(self) -> dict[str, object]:
        return {"Swarm": {"ControlAvailable": True, "NodeID": "m1", "NodeAddr": "10.0.0.1"}}

    def list(self) -> list[object]:
        class N:
            def __init__(self, attrs: dict[str, object]) -> None:
                self.attrs = attrs

        return [
            N({"ID": "m1", "Status": {"Addr": "0.0.0.0"}}),
            N({"ID": "w1", "Status": {"Addr": "10.0.0.7"}}),
            N({"ID": "w2", "Status": {}}),
        ]


def test_the_advertised_address_is_the_flag_then_the_env_then_the_managers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from testbed.backends.swarm_engines import ADVERTISE_ENV, Engines

    monkeypatch.delenv(ADVERTISE_ENV, raising=False)
    assert Engines(_Manager()).address == "10.0.0.1"  # type: ignore[arg-type]
    monkeypatch.setenv(ADVERTISE_ENV, "10.0.0.2")
    assert Engines(_Manager()).address == "10.0.0.2"  # type: ignore[arg-type]
    assert Engines(_Manager(), (), "10.0.0.3").address == "10.0.0.3"  # type: ignore[arg-type]


def test_advertise_addr_is_refused_off_swarm_and_passed_to_a_sweeps_children(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from testbed import cli
    from testbed.sweep import child_flags

    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    res = CliRunner().invoke(cli.app, ["validate", str(spec), "--advertise-addr", "10.0.0.3"])
    assert res.exit_code == 2 and "--advertise-addr" in res.output, res.output
    assert "advertise" in get_backend("swarm").options
    assert child_flags([], None, False, False, "10.0.0.3") == ["--advertise-addr", "10.0.0.3"]


def test_a_workloads_server_is_reached_at_its_engines_address() -> None:
    """A function runtime, LLM stage or semantic fog on a worker engine listens on every
    address there (BIND_ENV); the runner reaches it at the worker's swarm address, and
    on the manager (the runner's host) at loopback."""
    from testbed.backends.swarm_engines import Engines

    engines = Engines(_Manager())  # type: ignore[arg-type]
    assert engines.address_of("m1") == "127.0.0.1"
    assert engines.address_of("w1") == "10.0.0.7"
    with pytest.raises(ValueError, match="no address"):
        engines.address_of("w2")
    assert get_backend("swarm").workloads is None  # every workload runs on the swarm
