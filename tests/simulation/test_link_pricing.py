"""Every link on the virtual clock is priced by its kind, or the run is refused with the
reason; LinkParams travel as one value (one field list) from the spec to the clock.

No Ray: the settings the backend writes are read back by the simulation process's own
``clock_of``, as a run does.
"""

from __future__ import annotations

import json
from dataclasses import make_dataclass
from pathlib import Path
from typing import Any

import pytest

from nodes.fl.telemetry import Telemetry
from testbed.backends.simulation import SimulationBackend
from testbed.controller.fleet import LINK_KEYS
from testbed.emulation.kinds import LinkEnds, LinkKind, register_link_kind
from testbed.emulation.link import Link, LinkParams, LinkSchedule
from testbed.planner import make_plan
from testbed.simulation.clock import ClientModel, VirtualClock
from testbed.simulation.links import check_links, client_model
from testbed.simulation.runner import clock_of
from testbed.spec.loader import parse_spec
from testbed.spec.models import LinkState

REL_TOL = 1e-9  # closed-form link times, float arithmetic only
MB = 10**6


def spec_text(edge_1: str, mode: str = "proxy") -> str:
    """Two edge clients at 10 Mbit/s, 20 ms; ``edge_1`` is edge-1's own link entry."""
    return (
        "name: kinds\nfleet:\n  nodes:\n    - {id: cloud, tier: cloud}\n"
        "    - {id: edge, tier: edge, count: 2}\n"
        f"links:\n  mode: {mode}\n"
        "  defaults:\n    edge-cloud: {bandwidth_mbps: 10, latency_ms: 20}\n"
        f"  nodes:\n    edge-1: {edge_1}\n"
        "workload:\n  fl: {rounds: 1}\n"
    )


def run_clock(tmp_path: Path, text: str) -> VirtualClock:
    """The clock the simulation process builds from the backend's settings (JSON)."""
    settings = SimulationBackend(make_plan(parse_spec(text)), tmp_path).settings({})
    settings = json.loads(json.dumps(settings))  # as written to simulation.json
    return clock_of(settings, Telemetry(str(tmp_path / "tel.jsonl")))


def test_per_link_mmwave_is_refused_on_the_virtual_clock_naming_the_link() -> None:
    exp = parse_spec(spec_text("{kind: mmwave, latency_ms: 2}"))
    want = r"links\.nodes\.edge-1\.kind: kind: mmwave cannot be priced on the virtual clock: "
    with pytest.raises(ValueError, match=want + ".*Sionna"):
        check_links(exp)
    with pytest.raises(ValueError, match=want):
        SimulationBackend.preflight([exp])
    with pytest.raises(ValueError, match="Sionna"):  # never an unlimited link instead
        client_model(make_plan(exp).clients[0], exp.links.mode)
    radio = parse_spec(spec_text("{mmwave: {snr_db: 10}}"))  # the kind from its mapping
    with pytest.raises(ValueError, match=r"links\.nodes\.edge-1\.mmwave: kind: mmwave"):
        check_links(radio)
    check_links(parse_spec(spec_text("{latency_ms: 2}", mode="netem")))  # netem is priced


@register_link_kind("halved")
class Halved(LinkKind):
    """A throwaway kind: the proxy at half the planned rate, 10 ms more latency."""

    def slow(self, p: LinkParams) -> LinkParams:
        assert p.bandwidth_mbps is not None
        return p.replace(bandwidth_mbps=p.bandwidth_mbps / 2, latency_ms=p.latency_ms + 10)

    def build(self, node_name: str, params: LinkParams, ends: LinkEnds, **options: Any) -> Link:
        from testbed.emulation.proxy import ShapingProxy

        return ShapingProxy(node_name, ends.server_host, ends.server_port, self.slow(params))

    def price(self, schedule: LinkSchedule, **options: Any) -> LinkSchedule:
        return LinkSchedule([(t, self.slow(p)) for t, p in schedule.segments])


def test_a_kind_registered_here_prices_its_link_on_the_virtual_clock(tmp_path: Path) -> None:
    text = spec_text("{kind: halved, bandwidth_mbps: 10, latency_ms: 20, "
                     "schedule: [{at_s: 100, bandwidth_mbps: 2, latency_ms: 20}]}")  # fmt: skip
    check_links(parse_spec(text))
    clock = run_clock(tmp_path, text)
    plain = 0.020 + MB * 8 / 10e6  # edge-2: the default link as planned
    assert clock.model("edge-2").link.transfer(0.0, MB) == pytest.approx(plain, rel=REL_TOL)
    halved = 0.030 + MB * 8 / 5e6
    assert clock.model("edge-1").link.transfer(0.0, MB) == pytest.approx(halved, rel=REL_TOL)
    assert clock.model("edge-1").link.at(150.0) == LinkParams(1.0, 30.0)  # its schedule too


def test_a_kind_that_does_not_say_how_it_is_priced_is_refused(tmp_path: Path) -> None:
    @register_link_kind("unpriced")
    class Unpriced(LinkKind):
        def build(self, node_name: str, params: LinkParams, ends: LinkEnds, **o: Any) -> Link:
            raise AssertionError("not built on the virtual clock")

    exp = parse_spec(spec_text("{kind: unpriced}"))
    with pytest.raises(ValueError, match=r"edge-1\.kind: kind: unpriced .*timed"):
        check_links(exp)


def test_docker_netem_builds_each_link_through_its_kind() -> None:
    from testbed.backends.docker_net import container_links
    from testbed.emulation.container_net import ContainerNetemLink, InContainer
    from testbed.emulation.kinds import link_kind

    link = link_kind("netem").build_in_container(
        "edge-1", LinkParams(latency_ms=5), LinkEnds(3, 1, server_netns="ct-t-srv", run_tag="t")
    )
    assert isinstance(link, ContainerNetemLink) and isinstance(link, InContainer)
    assert (link.name, link.server_netns) == ("tn3", "ct-t-srv")  # nothing created yet
    plan = make_plan(parse_spec(spec_text("{kind: proxy}", mode="netem")))
    want = r"links\.nodes\.edge-1\.kind: kind: proxy cannot shape node edge-1's link inside"
    with pytest.raises(ValueError, match=want):  # refused before any namespace is made
        container_links(plan, "t", "ct-t-srv")


def test_the_link_field_list_is_derived_from_link_params_once() -> None:
    names = LinkParams.field_names()
    assert names == ("bandwidth_mbps", "latency_ms", "jitter_ms", "loss_pct", "partitioned")
    assert set(LinkState.model_fields) == set(names)  # the YAML schema declares each one
    assert LINK_KEYS == names[:-1]  # the dashboard's link values: all but the state
    # a field added to LinkParams flows through the one dict round trip
    wider = make_dataclass("Wider", [("mtu_bytes", int, 1500)], bases=(LinkParams,), frozen=True)
    p = wider(bandwidth_mbps=5.0, partitioned=True, mtu_bytes=9000)
    assert wider.field_names() == (*names, "mtu_bytes")
    assert p.to_dict()["mtu_bytes"] == 9000 and wider.from_dict(p.to_dict()) == p
    assert p.replace(latency_ms=3.0).mtu_bytes == 9000
    with pytest.raises(ValueError, match=r"unknown link field\(s\) \['mtu_bytes'\]"):
        LinkParams.from_dict({"mtu_bytes": 1})
    # the clock's model keeps every field (partitioned was dropped by the old copy)
    model = ClientModel(
        params=LinkParams(8.0, 1.0, 0.5, 1.0, True), schedule=((5.0, LinkParams(2.0)),)
    )
    back = ClientModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert back == model and back.link.at(0.0).partitioned
