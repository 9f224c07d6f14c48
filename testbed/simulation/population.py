"""The virtual clock's clients, by rule: a million clients are a few groups.

Each client's :class:`~testbed.simulation.clock.ClientModel` (stretch of its device
profile, its priced link, its tier) is made when the clock first asks for it, from
its fleet entry (:class:`testbed.planner.NodeGroup`): the entry's profile, or the one
its ``profile_mix`` gives replica ``i`` by the planner's seeded rule
(:class:`testbed.planner.ProfileRule`: the same on every backend, alone or in bulk),
and the entry's link. The settings the simulation process reads hold the distinct
models, each group's rule (first partition id, count, the rule's key and cumulative
weights, the model of each profile) and the clients that differ from their group's
rule (a link of their own in ``links.nodes``, a satellite's passes): nothing per
client otherwise.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from testbed.simulation.clock import ClientModel

if TYPE_CHECKING:
    from testbed.emulation.link import LinkSchedule
    from testbed.planner import Plan, PlannedNode


@dataclasses.dataclass(frozen=True)
class RuleGroup:
    """Clients ``first .. first + count - 1`` whose model follows one profile rule.

    Attributes
    ----------
    first, count : int
        Partition ids covered.
    key : (int, int)
        The profile rule's key (seed, crc32 of the entry's id).
    cdf : tuple of float
        Cumulative profile weights (one entry: a single profile).
    models : tuple of int
        Index of each profile's model in :attr:`ClientPopulation.models`.
    """

    first: int
    count: int
    key: tuple[int, int]
    cdf: tuple[float, ...]
    models: tuple[int, ...]

    def model_index(self, k: int) -> int:
        """Model of replica ``k`` (0-based) of the group."""
        if len(self.models) == 1:
            return self.models[0]
        from testbed.planner import uniform

        u = uniform(self.key[0], self.key[1], np.array([k], dtype=np.uint64))
        pick = int(np.searchsorted(np.array(self.cdf), u, side="right")[0])
        return self.models[min(pick, len(self.models) - 1)]


class ClientPopulation:
    """Client models by partition id: group rules, plus the clients that differ.

    Parameters
    ----------
    models : list of ClientModel
        The distinct models.
    groups : list of RuleGroup
        Rules, by partition id range.
    special : mapping of int to int
        Partition id -> model index of a client that differs from its group's rule.
    """

    def __init__(
        self, models: list[ClientModel], groups: list[RuleGroup], special: Mapping[int, int]
    ) -> None:
        self.models, self.groups, self.special = models, groups, dict(special)
        self.firsts = [g.first for g in groups]

    def __len__(self) -> int:
        return sum(g.count for g in self.groups)

    def model_index(self, pid: int) -> int:
        """Index of client ``pid``'s model."""
        got = self.special.get(pid)
        if got is not None:
            return got
        import bisect

        i = bisect.bisect_right(self.firsts, pid) - 1
        g = self.groups[i] if i >= 0 else None
        if g is None or not g.first <= pid < g.first + g.count:
            raise KeyError(pid)
        return g.model_index(pid - g.first)

    def model(self, pid: int) -> ClientModel:
        """Client ``pid``'s model."""
        return self.models[self.model_index(pid)]

    @classmethod
    def from_plan(
        cls, plan: Plan, mode: str, passes: Mapping[str, LinkSchedule] | None = None
    ) -> ClientPopulation:
        """The plan's clients (``mode``: the links mode in force; ``passes``: satellite
        link schedules by node name)."""
        from testbed.planner import PlannedNodes, own_link_replicas
        from testbed.simulation.links import client_model

        passes = passes or {}
        models: list[ClientModel] = []
        index: dict[str, int] = {}

        def add(node: PlannedNode) -> int:
            m = client_model(node, mode, passes.get(node.name))
            key = json.dumps(m.to_dict(), sort_keys=True)
            if key not in index:
                index[key] = len(models)
                models.append(m)
            return index[key]

        groups: list[RuleGroup] = []
        special: dict[int, int] = {}
        nodes = plan.nodes
        if not isinstance(nodes, PlannedNodes):  # planned one by one: each its own
            for n in plan.clients:
                special[n.partition_id or 0] = add(n)
            return cls(models, groups, special)
        exp = plan.experiment
        for g, group in enumerate(nodes.groups):
            if group.role != "client" or group.first_pid is None:
                continue
            spec, rule = group.spec, nodes.rules[g]
            # each its own: a satellite (its passes), a replica with its own link
            own = list(range(group.count)) if spec.tier == "space" else []
            own += own_link_replicas(exp, spec)
            for k in sorted(set(own)):
                special[group.first_pid + k] = add(nodes.node(g, k))
            base = nodes.node(g, 0)
            link = exp.links.nodes.get(spec.id) or exp.links.for_pair(spec.tier, nodes.server_tier)
            per_profile = tuple(
                add(dataclasses.replace(base, profile=p, profile_name=n, uplink=link))
                for n, p in zip(rule.names, rule.profiles, strict=True)
            )
            groups.append(
                RuleGroup(
                    group.first_pid,
                    group.count,
                    rule.key,
                    tuple(float(c) for c in rule.cdf),
                    per_profile,
                )
            )
        return cls(models, groups, special)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the simulation's settings (JSON); :meth:`from_dict` reads it."""
        return {
            "models": [m.to_dict() for m in self.models],
            "groups": [dataclasses.asdict(g) for g in self.groups],
            "special": sorted(self.special.items()),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ClientPopulation:
        """The population :meth:`to_dict` wrote."""
        groups = [
            RuleGroup(
                int(g["first"]),
                int(g["count"]),
                (int(g["key"][0]), int(g["key"][1])),
                tuple(float(c) for c in g["cdf"]),
                tuple(int(m) for m in g["models"]),
            )
            for g in d["groups"]
        ]
        special = {int(p): int(m) for p, m in d["special"]}
        return cls([ClientModel.from_dict(m) for m in d["models"]], groups, special)


class PopulationClients(Mapping[str, ClientModel]):
    """Client name -> model, over a :class:`ClientPopulation` and the names by
    partition id (a :class:`nodes.fl.identity.NodeNames` finds a name's partition id
    without a table); models are made on first use."""

    def __init__(self, names: Sequence[str], population: ClientPopulation) -> None:
        self.names, self.population = names, population
        find = getattr(names, "find", None)
        self._pid: dict[str, int] | None = None
        if find is None:
            self._pid = {n: i for i, n in enumerate(names)}

    def pid(self, name: object) -> int | None:
        """Partition id of ``name`` (None: not a client)."""
        if self._pid is not None:
            return self._pid.get(name) if isinstance(name, str) else None
        found: int | None = self.names.find(name)  # type: ignore[attr-defined]
        return found

    def __getitem__(self, name: str) -> ClientModel:
        pid = self.pid(name)
        if pid is None:
            raise KeyError(name)
        return self.population.model(pid)

    def __contains__(self, name: object) -> bool:
        return self.pid(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)
