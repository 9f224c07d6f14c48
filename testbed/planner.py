"""Resolve an :class:`Experiment` into a :class:`Plan`: concrete nodes, links, workload."""

from __future__ import annotations

from dataclasses import dataclass, field

from testbed.spec.catalog import DeviceProfile
from testbed.spec.hosting import hosts, links_lead_to
from testbed.spec.models import Experiment, FaultSpec, LinkSpec, NodeSpec


@dataclass(frozen=True)
class PlannedNode:
    """A concrete node: name, tier, role, resolved profile, partition id for clients."""

    name: str
    tier: str
    role: str  # server | client | none
    profile_name: str
    profile: DeviceProfile
    partition_id: int | None
    uplink: LinkSpec
    protocol_timing: str = "flower"  # workload.fl.protocol_timing (nodes/fl/timing.py)
    workloads: tuple[str, ...] = ()  # the workload sections that run on it

    def node_config(self, num_partitions: int) -> dict[str, object]:
        """Flower node config of a client node (its identity), plus the protocol timing
        its node agent starts Flower with (the agent takes that key out again)."""
        return {
            "partition-id": self.partition_id,
            "num-partitions": num_partitions,
            "node-name": self.name,
            "tier": self.tier,
            "profile": self.profile_name,
            "speed-factor": self.profile.cpu_speed_factor,
            "protocol-timing": self.protocol_timing,
        }


@dataclass(frozen=True)
class Plan:
    """Everything a backend needs to realise one run."""

    name: str
    seed: int
    nodes: tuple[PlannedNode, ...]
    experiment: Experiment
    faults: tuple[FaultSpec, ...] = field(default=())

    @property
    def server(self) -> PlannedNode:
        return next(n for n in self.nodes if n.role == "server")

    @property
    def clients(self) -> tuple[PlannedNode, ...]:
        return tuple(n for n in self.nodes if n.role == "client")

    def client_names(self) -> list[str]:
        """Client names ordered by partition id."""
        return [n.name for n in sorted(self.clients, key=lambda n: n.partition_id or 0)]


def profile_draws(exp: Experiment, spec: NodeSpec, seed: int) -> list[tuple[str, DeviceProfile]]:
    """(profile name, profile) of each replica of ``spec``: its ``profile``, or drawn from
    its ``profile_mix`` weights (``default_rng([seed, crc32(id)])``: same seed, same
    draws on every backend)."""
    if not spec.profile_mix:
        pname = spec.profile if isinstance(spec.profile, str) else f"{spec.id}-inline"
        return [(pname, exp.profile_of(spec))] * spec.count
    import zlib

    import numpy as np

    names = sorted(spec.profile_mix)
    w = np.array([spec.profile_mix[n] for n in names], dtype=float)
    rng = np.random.default_rng([seed, zlib.crc32(spec.id.encode())])
    picks = rng.choice(len(names), size=spec.count, p=w / w.sum())
    profiles = {n: exp.profile_of(spec.model_copy(update={"profile": n})) for n in names}
    return [(names[i], profiles[names[i]]) for i in picks]


def make_plan(exp: Experiment, seed: int | None = None) -> Plan:
    """Resolve nodes (replicas, profiles, roles, partition ids) and their uplinks."""
    nodes: list[PlannedNode] = []
    on = hosts(exp)
    several = len(exp.workload.sections) > 1
    server_tier = links_lead_to(exp)  # FL's server, else the functions' origin
    pid = 0
    timing = exp.workload.fl.protocol_timing if exp.workload.fl else "flower"
    for spec in exp.fleet.nodes if exp.fleet else []:
        drawn = profile_draws(exp, spec, exp.seed if seed is None else seed)
        for name, (pname, prof) in zip(spec.names(), drawn, strict=True):
            # beside other workloads, a node FL does not run on has no FL role
            role = spec.fl_role if not several or "fl" in on[name] else "none"
            link = exp.links.for_node(name, spec, server_tier)
            nodes.append(
                PlannedNode(
                    name,
                    spec.tier,
                    role,
                    pname,
                    prof,
                    pid if role == "client" else None,
                    link,
                    timing,
                    on[name],
                )
            )
            pid += role == "client"
    return Plan(exp.name, exp.seed if seed is None else seed, tuple(nodes), exp, tuple(exp.faults))


def link_kind_path(exp: Experiment, name: str) -> str:
    """The YAML path that gives node ``name``'s link its kind (for errors):
    :meth:`~testbed.spec.models.LinksSpec.kind_path`."""
    fleet = exp.fleet.nodes if exp.fleet else []
    spec = next(s for s in fleet if name in s.names())
    return exp.links.kind_path(name, spec, links_lead_to(exp))
