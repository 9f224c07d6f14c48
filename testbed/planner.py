"""Resolve an :class:`Experiment` into a :class:`Plan`: concrete nodes, links, workload."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

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


class ProfileRule:
    """The profile of each replica of one fleet entry, drawn on first use.

    Without ``profile_mix`` every replica has the entry's ``profile``. With it, replica
    ``i`` (0-based) takes the profile whose cumulative weight first exceeds
    ``u_i = splitmix64(seed, crc32(id), i) / 2**64``: a seeded rule per index, so a
    replica's profile is the same whether it is drawn alone (a million virtual
    clients, only the sampled ones looked at) or with all others (:meth:`draw_all`),
    on every backend.

    Parameters
    ----------
    exp : Experiment
        The experiment (profiles resolved through its catalog).
    spec : NodeSpec
        The fleet entry.
    seed : int
        The run's seed.
    """

    def __init__(self, exp: Experiment, spec: NodeSpec, seed: int) -> None:
        import zlib

        import numpy as np

        self.spec = spec
        if not spec.profile_mix:
            pname = spec.profile if isinstance(spec.profile, str) else f"{spec.id}-inline"
            self.names: list[str] = [pname]
            self.profiles = [exp.profile_of(spec)]
            self.cdf = np.array([1.0])
        else:
            self.names = sorted(spec.profile_mix)
            w = np.array([spec.profile_mix[n] for n in self.names], dtype=float)
            self.cdf = np.cumsum(w / w.sum())
            self.profiles = [
                exp.profile_of(spec.model_copy(update={"profile": n})) for n in self.names
            ]
        self.key = (int(seed) & MASK64, zlib.crc32(spec.id.encode()))

    def pick(self, indices: Any) -> Any:
        """Index into :attr:`names` of each replica in ``indices`` (array of int)."""
        import numpy as np

        idx = np.asarray(indices, dtype=np.uint64)
        if len(self.names) == 1:
            return np.zeros(idx.shape, dtype=np.int64)
        u = uniform(self.key[0], self.key[1], idx)
        return np.minimum(np.searchsorted(self.cdf, u, side="right"), len(self.names) - 1)

    def __call__(self, i: int) -> tuple[str, DeviceProfile]:
        """(profile name, profile) of replica ``i``."""
        k = int(self.pick([i])[0])
        return self.names[k], self.profiles[k]

    def draw_all(self) -> list[tuple[str, DeviceProfile]]:
        """Every replica's (profile name, profile), drawn at once (the same values)."""
        import numpy as np

        picks = self.pick(np.arange(self.spec.count))
        return [(self.names[k], self.profiles[k]) for k in picks.tolist()]


MASK64 = (1 << 64) - 1


def uniform(seed: int, stream: int, idx: Any) -> Any:
    """``splitmix64`` of ``(seed, stream, index)`` as floats in [0, 1), one per entry of
    ``idx`` (uint64 array): a counter-based draw, the same alone or in bulk."""
    import numpy as np

    with np.errstate(over="ignore"):
        z = idx * np.uint64(0x9E3779B97F4A7C15)
        z = z + np.uint64(seed) * np.uint64(0xBF58476D1CE4E5B9) + np.uint64(stream)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


@dataclass(frozen=True)
class NodeGroup:
    """One fleet entry's replicas in the plan (nodes ``start .. start + count - 1``).

    Attributes
    ----------
    spec : NodeSpec
        The fleet entry.
    start : int
        Index of its first node in :attr:`Plan.nodes`.
    role : str
        Every replica's FL role (``server``, ``client`` or ``none``).
    first_pid : int or None
        Partition id of its first replica (clients), else None.
    """

    spec: NodeSpec
    start: int
    role: str
    first_pid: int | None

    @property
    def count(self) -> int:
        return self.spec.count


class PlannedNodes(Sequence[PlannedNode]):
    """The plan's nodes, each made on first use from its fleet entry (:class:`NodeGroup`):
    nothing is held per node, so a million virtual clients cost a few groups. Indexing
    and iteration give equal nodes every time (the same seeded profile rule, the same
    link lookup).

    Parameters
    ----------
    exp : Experiment
        The experiment.
    groups : list of NodeGroup
        Its fleet entries in order.
    seed : int
        The run's seed (profile draws).
    """

    def __init__(self, exp: Experiment, groups: list[NodeGroup], seed: int) -> None:
        self.exp, self.groups = exp, groups
        self.server_tier = links_lead_to(exp)
        self.timing = exp.workload.fl.protocol_timing if exp.workload.fl else "flower"
        self.rules = [ProfileRule(exp, g.spec, seed) for g in groups]
        self.starts = [g.start for g in groups]
        self.n = sum(g.count for g in groups)
        from nodes.hosting import Hosted
        from testbed.spec.hosting import section_models

        models = section_models(exp)
        # (every node runs every section here: what hosts() gives each node)
        self.sections = tuple(k for k, m in models.items() if isinstance(m, Hosted))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> PlannedNode:  # type: ignore[override]
        if not isinstance(i, int):
            raise TypeError("PlannedNodes takes one integer index")
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        g = bisect.bisect_right(self.starts, i) - 1
        return self.node(g, i - self.starts[g])

    def node(self, g: int, k: int) -> PlannedNode:
        """Replica ``k`` (0-based) of group ``g``."""
        group = self.groups[g]
        spec = group.spec
        name = spec.id if spec.count == 1 else f"{spec.id}-{k + 1}"
        pname, prof = self.rules[g](k)
        pid = None if group.first_pid is None else group.first_pid + k
        link = self.exp.links.for_node(name, spec, self.server_tier)
        return PlannedNode(
            name, spec.tier, group.role, pname, prof, pid, link, self.timing, self.sections
        )

    def __iter__(self) -> Iterator[PlannedNode]:
        for g, group in enumerate(self.groups):
            for k in range(group.count):
                yield self.node(g, k)


@dataclass(frozen=True)
class Plan:
    """Everything a backend needs to realise one run.

    ``nodes`` is a sequence: a tuple, or :class:`PlannedNodes` (made on first use) when
    every node runs every workload section (:func:`make_plan`).
    """

    name: str
    seed: int
    nodes: Sequence[PlannedNode]
    experiment: Experiment
    faults: tuple[FaultSpec, ...] = field(default=())

    @property
    def groups(self) -> list[NodeGroup] | None:
        """The fleet entries behind :attr:`nodes` (None: nodes planned one by one)."""
        return self.nodes.groups if isinstance(self.nodes, PlannedNodes) else None

    @property
    def server(self) -> PlannedNode:
        groups = self.groups
        if groups is not None and isinstance(self.nodes, PlannedNodes):
            g = next(i for i, grp in enumerate(groups) if grp.role == "server")
            return self.nodes.node(g, 0)
        return next(n for n in self.nodes if n.role == "server")

    @property
    def num_clients(self) -> int:
        """How many client nodes (without making them)."""
        groups = self.groups
        if groups is not None:
            return sum(g.count for g in groups if g.role == "client")
        return sum(1 for n in self.nodes if n.role == "client")

    @property
    def clients(self) -> Sequence[PlannedNode]:
        """Client nodes by partition id."""
        groups = self.groups
        if groups is not None and isinstance(self.nodes, PlannedNodes):
            return ClientNodes(self.nodes)
        return tuple(n for n in self.nodes if n.role == "client")

    def client_names(self) -> Sequence[str]:
        """Client names ordered by partition id (:class:`nodes.fl.identity.NodeNames`
        when planned by groups: nothing per node)."""
        groups = self.groups
        if groups is not None:
            from nodes.fl.identity import NodeNames

            return NodeNames([(g.spec.id, g.count) for g in groups if g.role == "client"])
        return [n.name for n in sorted(self.clients, key=lambda n: n.partition_id or 0)]

    def client_counts(self) -> dict[tuple[str, str], int]:
        """Client nodes per (tier, profile name), without making the nodes (a profile
        mix is drawn for all replicas at once by the same rule)."""
        import numpy as np

        out: dict[tuple[str, str], int] = {}
        nodes = self.nodes
        if not isinstance(nodes, PlannedNodes):
            for n in self.clients:
                out[(n.tier, n.profile_name)] = out.get((n.tier, n.profile_name), 0) + 1
            return out
        for g, group in enumerate(nodes.groups):
            if group.role != "client":
                continue
            rule = nodes.rules[g]
            picks = np.bincount(rule.pick(np.arange(group.count)), minlength=len(rule.names))
            for name, k in zip(rule.names, picks.tolist(), strict=True):
                if k:
                    key = (group.spec.tier, name)
                    out[key] = out.get(key, 0) + int(k)
        return out

    def client_links(self) -> list[tuple[LinkSpec, int]]:
        """Client uplinks with how many clients have each: a fleet entry's link once
        with its count, and each replica with a link of its own (``links.nodes``)."""
        nodes = self.nodes
        if not isinstance(nodes, PlannedNodes):
            return [(n.uplink, 1) for n in self.clients]
        exp, out = self.experiment, []
        for g, group in enumerate(nodes.groups):
            if group.role != "client":
                continue
            own = own_link_replicas(exp, group.spec)
            out += [(nodes.node(g, k).uplink, 1) for k in own]
            if group.count > len(own):
                spec = group.spec
                link = exp.links.nodes.get(spec.id) or exp.links.for_pair(
                    spec.tier, nodes.server_tier
                )
                out.append((link, group.count - len(own)))
        return out

    def client_names_json(self) -> str:
        """The run config's ``node-names`` (:func:`nodes.fl.identity.node_names` reads
        it): the client groups, or the list of names."""
        import json

        names = self.client_names()
        to_json = getattr(names, "to_json", None)
        return str(to_json()) if to_json is not None else json.dumps(list(names))


class ClientNodes(Sequence[PlannedNode]):
    """The client nodes of :class:`PlannedNodes`, by partition id, made on first use."""

    def __init__(self, nodes: PlannedNodes) -> None:
        self.nodes = nodes
        self.gs = [i for i, g in enumerate(nodes.groups) if g.role == "client"]
        self.pids = [nodes.groups[i].first_pid or 0 for i in self.gs]
        self.n = sum(nodes.groups[i].count for i in self.gs)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, pid: int) -> PlannedNode:  # type: ignore[override]
        if not isinstance(pid, int):
            raise TypeError("ClientNodes takes one integer index")
        if pid < 0:
            pid += self.n
        if not 0 <= pid < self.n:
            raise IndexError(pid)
        j = bisect.bisect_right(self.pids, pid) - 1
        return self.nodes.node(self.gs[j], pid - self.pids[j])

    def __iter__(self) -> Iterator[PlannedNode]:
        for g in self.gs:
            for k in range(self.nodes.groups[g].count):
                yield self.nodes.node(g, k)


def own_link_replicas(exp: Experiment, spec: NodeSpec) -> list[int]:
    """Replicas (0-based) of a replicated fleet entry that ``links.nodes`` gives a link
    of their own (by replica name); none for an entry of one node (its name is its id)."""
    if spec.count == 1:
        return []
    out = []
    for name in exp.links.nodes:
        gid, sep, k = name.rpartition("-")
        if sep and gid == spec.id and k.isdigit() and not k.startswith("0"):
            if 1 <= int(k) <= spec.count:
                out.append(int(k) - 1)
    return sorted(out)


def profile_draws(exp: Experiment, spec: NodeSpec, seed: int) -> list[tuple[str, DeviceProfile]]:
    """(profile name, profile) of each replica of ``spec``: its ``profile``, or drawn from
    its ``profile_mix`` weights by :class:`ProfileRule` (same seed, same draws on every
    backend, alone or all at once)."""
    return ProfileRule(exp, spec, seed).draw_all()


def _lazy(exp: Experiment) -> bool:
    """Whether every node runs every workload section (nodes can then be planned by
    group, :class:`PlannedNodes`); a section naming its ``nodes`` is planned node by node."""
    from nodes.hosting import Hosted
    from testbed.spec.hosting import section_models

    return all(
        not isinstance(m, Hosted) or m.nodes is None for m in section_models(exp).values()
    )


def make_plan(exp: Experiment, seed: int | None = None) -> Plan:
    """Resolve nodes (replicas, profiles, roles, partition ids) and their uplinks."""
    seed = exp.seed if seed is None else seed
    fleet = exp.fleet.nodes if exp.fleet else []
    if _lazy(exp):
        groups, at, pid = [], 0, 0
        several = len(exp.workload.sections) > 1
        fl_on_all = "fl" in exp.workload.sections
        for spec in fleet:
            # beside other workloads, a node FL does not run on has no FL role
            role = spec.fl_role if not several or fl_on_all else "none"
            groups.append(NodeGroup(spec, at, role, pid if role == "client" else None))
            at += spec.count
            pid += spec.count if role == "client" else 0
        nodes: Sequence[PlannedNode] = PlannedNodes(exp, groups, seed)
        return Plan(exp.name, seed, nodes, exp, tuple(exp.faults))
    planned: list[PlannedNode] = []
    on = hosts(exp)
    several = len(exp.workload.sections) > 1
    server_tier = links_lead_to(exp)  # FL's server, else the functions' origin
    pid = 0
    timing = exp.workload.fl.protocol_timing if exp.workload.fl else "flower"
    for spec in fleet:
        drawn = profile_draws(exp, spec, seed)
        for name, (pname, prof) in zip(spec.names(), drawn, strict=True):
            # beside other workloads, a node FL does not run on has no FL role
            role = spec.fl_role if not several or "fl" in on[name] else "none"
            link = exp.links.for_node(name, spec, server_tier)
            planned.append(
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
    return Plan(exp.name, seed, tuple(planned), exp, tuple(exp.faults))


def link_kind_path(exp: Experiment, name: str) -> str:
    """The YAML path that gives node ``name``'s link its kind (for errors):
    :meth:`~testbed.spec.models.LinksSpec.kind_path`."""
    fleet = exp.fleet.nodes if exp.fleet else []
    spec = next(s for s in fleet if name in s.names())
    return exp.links.kind_path(name, spec, links_lead_to(exp))
