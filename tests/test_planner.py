"""testbed/planner.py: replicas, roles, partition ids, profiles, each node's uplink."""

from __future__ import annotations

from testbed.planner import make_plan
from testbed.spec.catalog import CATALOG
from testbed.spec.loader import parse_spec

SPEC = """\
name: plan
seed: 9
fleet:
  nodes:
    - {id: cloud, tier: cloud, profile: cloud-gpu}
    - {id: edge, tier: edge, profile: rpi5, count: 2}
    - {id: fog, tier: fog, profile: {cpu_speed_factor: 1.5, cpu_cores: 4}}
    - {id: relay, tier: fog, role: none}
links:
  defaults:
    edge-cloud: {latency_ms: 20, bandwidth_mbps: 50}
    edge-fog: {latency_ms: 3}
  nodes:
    edge-2: {latency_ms: 80, bandwidth_mbps: 5}
workload:
  fl: {rounds: 1}
"""


def test_replicas_roles_partition_ids_and_profiles() -> None:
    plan = make_plan(parse_spec(SPEC))
    assert [(n.name, n.role, n.partition_id) for n in plan.nodes] == [
        ("cloud", "server", None),
        ("edge-1", "client", 0),
        ("edge-2", "client", 1),
        ("fog", "client", 2),
        ("relay", "none", None),
    ]
    assert plan.server.name == "cloud" and plan.client_names() == ["edge-1", "edge-2", "fog"]
    assert plan.seed == 9 and make_plan(parse_spec(SPEC), seed=4).seed == 4
    edge = plan.clients[0]
    assert edge.profile_name == "rpi5" and edge.profile == CATALOG["rpi5"]
    fog = plan.clients[2]
    assert fog.profile_name == "fog-inline" and fog.profile.cpu_speed_factor == 1.5
    assert edge.node_config(3) == {
        "partition-id": 0,
        "num-partitions": 3,
        "node-name": "edge-1",
        "tier": "edge",
        "profile": "rpi5",
        "speed-factor": CATALOG["rpi5"].cpu_speed_factor,
        "protocol-timing": "flower",  # (the node agent takes it out before Flower)
    }


def test_uplinks_lead_to_the_server_tier_or_the_functions_origin() -> None:
    plan = make_plan(parse_spec(SPEC))
    up = {n.name: n.uplink.params() for n in plan.nodes}
    assert (up["edge-1"].latency_ms, up["edge-1"].bandwidth_mbps) == (20, 50)
    assert (up["edge-2"].latency_ms, up["edge-2"].bandwidth_mbps) == (80, 5)  # override
    assert (up["fog"].latency_ms, up["fog"].bandwidth_mbps) == (0, None)  # no default
    functions = SPEC.replace(
        "  fl: {rounds: 1}", "  functions: {origin: fog, functions: [{name: f, module: idle}]}"
    )
    up = {n.name: n.uplink.params() for n in make_plan(parse_spec(functions)).nodes}
    assert up["edge-1"].latency_ms == 3 and up["edge-2"].latency_ms == 80
