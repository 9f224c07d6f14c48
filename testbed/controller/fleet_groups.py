"""The fleet of a large plan, by group: nodes per tier/profile with how many are in each
state, and only the nodes that failed or were faulted listed one by one.

A plan of more than :data:`GROUPED_ABOVE` nodes (200 real SuperNodes; a million virtual
clients of the simulation backend) gets this view from :mod:`testbed.controller.fleet`.
Nothing is made per node but the nodes an event touched or a round status failed: a
plan of :class:`~testbed.planner.PlannedNodes` costs one vectorised profile draw per
fleet entry (the seeded rule of :class:`~testbed.planner.ProfileRule`).

The view has ``grouped: True``, ``node_count``, and ``groups``: one per (tier, profile,
role, workloads) with the profile's figures, ``nodes`` (its count), ``states`` (state ->
nodes), ``link`` (the uplink most of its nodes have; ``own_links`` counts the others),
``link_states`` and, in a run, ``bytes_up`` / ``bytes_down`` over its links (wire
counters where the run has them, else payloads) and its largest ``peak_rss_mb``.
``nodes`` and ``links`` list only the nodes (links) an event touched (a fault, a crash,
a straggler, a link change) or whose node failed a round (``failed_rounds``): at most
:data:`LISTED_MAX`, ``listed_more`` counts the rest. ``round_counts`` gives per round
the nodes sampled, their outcomes, and the nodes not sampled (``excluded`` rows plus
the ``not_sampled`` counts the store keeps for a fleet over 10,000 clients,
:func:`testbed.chaos.finalize_statuses`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from testbed.controller.fleet_nodes import (
    TIER_ORDER,
    Replay,
    add_metrics,
    has_link,
    link_dict,
    link_params,
    node_dict,
)
from testbed.planner import Plan, PlannedNode, PlannedNodes, own_link_replicas
from testbed.rows import EventRow, MetricRow, StatusRow

#: Fleets of more nodes than this are shown by group (small fleets: a box per node).
GROUPED_ABOVE = 50
#: At most this many failed or faulted nodes are listed one by one.
LISTED_MAX = 200
#: Events that make a node (and its link) worth listing: faults and their effects.
TOUCHING = frozenset(
    {
        "fault_injected",
        "node_down",
        "node_restarted",
        "node_rejoined",
        "straggler_set",
        "misconfig_set",
        "link_partitioned",
        "link_healed",
        "link_changed",
        "link_degraded",
        "link_restored",
    }
)

Key = tuple[str, str, str, tuple[str, ...]]  # tier, profile, role, workloads


def _link_key(n: PlannedNode) -> str:
    return json.dumps({**link_params(n.uplink), "scheduled": bool(n.uplink.schedule)})


class FleetGroups:
    """The groups of a plan, and the group of a node by name (made on first use).

    Parameters
    ----------
    plan : Plan
        The plan (nodes planned by group, or one by one).
    """

    def __init__(self, plan: Plan) -> None:
        self.plan, self.mode = plan, plan.experiment.links.mode
        nodes = plan.nodes
        self.lazy = nodes if isinstance(nodes, PlannedNodes) else None
        self.by_name: dict[str, PlannedNode] = {}
        self.keys: dict[str, Key | None] = {}
        self.groups: dict[Key, dict[str, Any]] = {}
        self.links: dict[Key, Counter[str]] = {}
        if self.lazy is not None:
            lazy = self.lazy
            self.ids = {g.spec.id: i for i, g in enumerate(lazy.groups)}
            roles = [g.role for g in lazy.groups]
            self.server = plan.server.name if "server" in roles else None
            for g in range(len(lazy.groups)):
                self._add_entry(lazy, g)
        else:
            self.by_name = {n.name: n for n in nodes}
            self.server = next((n.name for n in nodes if n.role == "server"), None)
            for n in nodes:
                self._add(n, 1, _link_key(n))
        for key, counts in self.links.items():
            top, k = counts.most_common(1)[0]
            self.groups[key]["link"] = json.loads(top)
            self.groups[key]["own_links"] = self.groups[key]["nodes"] - k

    def _add(self, n: PlannedNode, count: int, link: str | None) -> None:
        """``count`` nodes like ``n`` (``link``: the key of their uplink)."""
        key = (n.tier, n.profile_name, n.role, tuple(n.workloads))
        grp = self.groups.get(key)
        if grp is None:
            grp = self.groups[key] = {
                "group": f"{n.tier}/{n.profile_name}",
                **{k: v for k, v in node_dict(n).items() if k not in ("name", "detail", "state")},
                "nodes": 0,
                "link": None,
                "own_links": 0,
                "bytes_up": None,
                "bytes_down": None,
                "peak_rss_mb": None,
            }
        grp["nodes"] += count
        if link is not None and has_link(n, self.server):
            self.links.setdefault(key, Counter())[link] += count

    def _add_entry(self, lazy: PlannedNodes, g: int) -> None:
        """The replicas of fleet entry ``g``, per profile drawn, without making them."""
        import numpy as np

        count, rule = lazy.groups[g].count, lazy.rules[g]
        own = own_link_replicas(self.plan.experiment, lazy.groups[g].spec)
        if len(rule.names) == 1:
            per_profile = [count]
        else:
            picks = rule.pick(np.arange(count))
            per_profile = np.bincount(picks, minlength=len(rule.names)).tolist()
        for k in own:  # replicas with a link of their own (``links.nodes``)
            n = lazy.node(g, k)
            self._add(n, 1, _link_key(n))
            per_profile[rule.names.index(n.profile_name)] -= 1
        mine = set(own)
        shared = next((k for k in range(count) if k not in mine), None)
        if shared is None:
            return
        n0 = lazy.node(g, shared)
        for j, k in enumerate(per_profile):
            if k:
                like = PlannedNode(
                    n0.name, n0.tier, n0.role, rule.names[j], rule.profiles[j],
                    None, n0.uplink, n0.protocol_timing, n0.workloads,
                )  # fmt: skip
                self._add(like, k, _link_key(n0))

    def node(self, name: str) -> PlannedNode | None:
        """The planned node called ``name`` (None: no such node)."""
        if self.lazy is None:
            return self.by_name.get(name)
        g = self.ids.get(name)
        if g is not None and self.lazy.groups[g].count == 1:
            return self.lazy.node(g, 0)
        gid, sep, k = name.rpartition("-")
        g = self.ids.get(gid) if sep else None
        if g is None or not k.isdigit() or k.startswith("0"):
            return None
        count = self.lazy.groups[g].count
        return self.lazy.node(g, int(k) - 1) if count > 1 and 1 <= int(k) <= count else None

    def key(self, name: str) -> Key | None:
        """The group of node ``name`` (remembered)."""
        if name not in self.keys:
            n = self.node(name)
            self.keys[name] = (
                None if n is None else (n.tier, n.profile_name, n.role, tuple(n.workloads))
            )
        return self.keys[name]

    def key_of_made(self, name: str) -> Key:
        """The group of a node already resolved (one :meth:`touch` made)."""
        key = self.key(name)
        assert key is not None, name
        return key

    def touch(self, name: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The node and link dicts of node ``name`` (a node to list), at their spec."""
        n = self.node(name)
        if n is None:
            return None, None
        return node_dict(n), link_dict(n, self.server, self.mode) if has_link(
            n, self.server
        ) else None

    def view(self) -> dict[str, Any]:
        """The planned fleet by group (every node ``planned``, every link at its spec)."""
        groups = sorted(
            self.groups.values(), key=lambda d: (TIER_ORDER.index(d["tier"]), d["group"])
        )
        link_state = "ok" if self.mode != "none" else "not emulated"
        for grp in groups:
            grp["states"] = {"planned": grp["nodes"]}
            grp["link_states"] = {link_state: grp["nodes"]} if grp["link"] else {}
        return {
            "name": self.plan.name,
            "tiers": [t for t in TIER_ORDER if any(g["tier"] == t for g in groups)],
            "server": self.server,
            "links_mode": self.mode,
            "round": 0,
            "grouped": True,
            "grouped_above": GROUPED_ABOVE,
            "node_count": len(self.plan.nodes),
            "groups": groups,
            "nodes": [],
            "links": [],
            "listed_more": 0,
            "round_counts": [],
        }


def grouped_fleet(plan: Plan) -> dict[str, Any]:
    """:func:`testbed.controller.fleet.planned_fleet` of a large plan, by group."""
    return FleetGroups(plan).view()


@dataclass
class _Touched(Replay):
    """A replay that makes a node's dicts when a fault or its effect first touches it."""

    make: Callable[[str], tuple[dict[str, Any] | None, dict[str, Any] | None]] | None = None

    def event(self, ev: EventRow) -> None:
        if ev.node and ev.kind in TOUCHING and ev.node not in self.nodes and self.make:
            n, lk = self.make(ev.node)
            if n is not None:
                self.nodes[ev.node] = n
            if lk is not None:
                self.links[ev.node] = lk
        super().event(ev)


def grouped_state(
    plan: Plan,
    events: Iterable[EventRow],
    metrics: Iterable[MetricRow],
    run_status: str,
    statuses: Iterable[StatusRow] = (),
) -> dict[str, Any]:
    """:func:`testbed.controller.fleet.fleet_state` of a large plan, by group."""
    fg = FleetGroups(plan)
    fleet = fg.view()
    replay = _Touched(nodes={}, links={}, make=fg.touch)
    for ev in events:
        replay.event(ev)
    replay.settle()
    failed: dict[str, list[int]] = {}
    statuses = list(statuses)
    for s in statuses:
        if s.status == "failed":
            failed.setdefault(s.node, []).append(int(s.round))
    for name in failed:
        if name not in replay.nodes and (made := fg.touch(name))[0] is not None:
            replay.nodes[name] = made[0]
            replay.nodes[name]["state"] = "up" if replay.ready else "starting"
    _count_states(fg, replay, "up" if replay.ready else "starting")
    metrics = list(metrics)
    _group_metrics(fg, metrics)
    names = sorted(replay.nodes)
    listed = {n: replay.nodes[n] for n in names[:LISTED_MAX]}
    for name, rounds in failed.items():
        if name in listed:
            listed[name]["failed_rounds"] = sorted(rounds)
    links = {n: lk for n, lk in replay.links.items() if n in listed}
    add_metrics(listed, links, metrics)
    fleet.update(
        nodes=list(listed.values()),
        links=[links[n] for n in sorted(links)],
        listed_more=max(len(names) - LISTED_MAX, 0),
        round=replay.round,
        run_status=run_status,
        round_counts=round_counts(statuses, metrics),
    )
    return fleet


def _count_states(fg: FleetGroups, replay: Replay, default: str) -> None:
    """Each group's nodes per state (and links per state): every node ``default``
    but the ones the replay touched."""
    link_default = "ok" if fg.mode != "none" else "not emulated"
    for grp in fg.groups.values():
        grp["states"] = {default: grp["nodes"]}
    for name, n in replay.nodes.items():
        states = fg.groups[fg.key_of_made(name)]["states"]
        states[default] -= 1
        states[n["state"]] = states.get(n["state"], 0) + 1
    for name, lk in replay.links.items():
        states = fg.groups[fg.key_of_made(name)]["link_states"]
        states[link_default] -= 1
        states[lk["state"]] = states.get(lk["state"], 0) + 1
    for grp in fg.groups.values():
        grp["states"] = {s: k for s, k in grp["states"].items() if k}
        grp["link_states"] = {s: k for s, k in grp["link_states"].items() if k}


def _group_metrics(fg: FleetGroups, metrics: list[MetricRow]) -> None:
    """Bytes up/down over each group's links and its largest peak memory: per node as
    :func:`~testbed.controller.fleet.add_metrics` gives them, then per group."""
    keys = {m.node: fg.key(m.node) for m in metrics if m.node is not None}
    nodes: dict[str, dict[str, Any]] = {n: {} for n, k in keys.items() if k is not None}
    links: dict[str, dict[str, Any]] = {
        n: {} for n in nodes if fg.groups[fg.key_of_made(n)]["link"]
    }
    add_metrics(nodes, links, metrics)
    for name, lk in links.items():
        grp = fg.groups[fg.key_of_made(name)]
        for k in ("bytes_up", "bytes_down"):
            if lk.get(k) is not None:
                grp[k] = (grp[k] or 0.0) + lk[k]
    for name, n in nodes.items():
        if n.get("peak_rss_mb") is not None:
            grp = fg.groups[fg.key_of_made(name)]
            grp["peak_rss_mb"] = max(grp["peak_rss_mb"] or 0.0, n["peak_rss_mb"])


def round_counts(
    statuses: Iterable[StatusRow], metrics: Iterable[MetricRow]
) -> list[dict[str, int]]:
    """Per round: nodes ``sampled`` (a status other than ``excluded``) and how many of
    them ``completed``, ``failed`` or ended ``other``\\wise (late), and ``not_sampled``
    (``excluded`` rows plus the store's ``not_sampled`` counts per group)."""
    per: dict[int, Counter[str]] = {}
    for s in statuses:
        per.setdefault(int(s.round), Counter())[s.status] += 1
    for m in metrics:
        if m.name == "not_sampled" and m.round is not None and m.value is not None:
            per.setdefault(int(m.round), Counter())["not_sampled"] += int(m.value)
    out = []
    for r, c in sorted(per.items()):
        sampled = sum(k for s, k in c.items() if s not in ("excluded", "not_sampled"))
        out.append(
            {
                "round": r,
                "sampled": sampled,
                "completed": c["completed"],
                "failed": c["failed"],
                "other": sampled - c["completed"] - c["failed"],
                "not_sampled": c["excluded"] + c["not_sampled"],
            }
        )
    return out
