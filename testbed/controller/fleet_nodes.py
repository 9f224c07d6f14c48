"""The per-node parts of the Fleet view (:mod:`testbed.controller.fleet`): a planned
node and link as dicts, and the replay of a run's events and metrics over them (shared
with the grouped view of large fleets, :mod:`testbed.controller.fleet_groups`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from testbed.emulation.link import LinkParams
from testbed.planner import PlannedNode
from testbed.rows import EventRow, MetricRow

TIER_ORDER = ("space", "cloud", "fog", "edge")


#: A link's values shown beside its state (``partitioned`` is the state itself).
LINK_KEYS = tuple(k for k in LinkParams.field_names() if k != "partitioned")


def link_params(link: Any) -> dict[str, Any]:
    return {key: getattr(link, key) for key in LINK_KEYS}


def node_dict(n: PlannedNode) -> dict[str, Any]:
    """One planned node as the fleet view shows it (state ``planned``)."""
    return {
        "name": n.name,
        "tier": n.tier,
        "role": n.role,
        "profile": n.profile_name,
        "cpu_cores": n.profile.cpu_cores,
        "cpu_speed_factor": n.profile.cpu_speed_factor,
        "memory_mb": n.profile.memory_mb,
        "accelerator": n.profile.accelerator,
        "power_w": n.profile.power_w,
        "state": "planned",
        "detail": "",
        "workloads": list(n.workloads),
    }


def has_link(n: PlannedNode, server: str | None) -> bool:
    """Whether the view draws ``n``'s uplink: FL's clients, and the nodes of other
    workloads beside FL."""
    return server is not None and (n.role == "client" or (n.role == "none" and bool(n.workloads)))


def link_dict(n: PlannedNode, server: str | None, mode: str) -> dict[str, Any]:
    """``n``'s uplink to the server node at its spec (state ``ok``)."""
    return {
        "node": n.name,
        "peer": server,
        **link_params(n.uplink),
        "scheduled": bool(n.uplink.schedule),
        "state": "ok" if mode != "none" else "not emulated",
        "bytes_up": None,
        "bytes_down": None,
    }


def _mark_fault(n: dict[str, Any] | None, lk: dict[str, Any] | None, kind: str) -> None:
    """The last fault injected into a node (or its link): its kind's label and marker."""
    from testbed.faults import FAULT_KINDS

    if kind not in FAULT_KINDS:
        return
    cls = FAULT_KINDS[kind]
    target = lk if cls.target == "link" else n
    if target is not None:
        target["fault"] = {"kind": kind, "label": cls.label, "marker": cls.marker}


@dataclass
class Replay:
    """Node and link states as the events so far leave them."""

    nodes: dict[str, dict[str, Any]]
    links: dict[str, dict[str, Any]]
    ready: bool = False
    round: int = 0
    until: dict[str, int | None] = field(default_factory=dict)  # slowed down until round

    def event(self, ev: EventRow) -> None:
        """Apply one event to the fleet, its node and the node's link."""
        d = ev.data_dict
        if ev.kind == "fleet_ready":
            self.ready = True
        elif ev.kind == "round_start" and ev.round is not None:
            self.round = int(ev.round)
        if not ev.node:
            return
        if ev.kind == "fault_injected":
            _mark_fault(self.nodes.get(ev.node), self.links.get(ev.node), d.get("kind", ""))
        n = self.nodes.get(ev.node)
        if n is not None:
            self._node_event(n, ev.node, ev.kind, d)
        lk = self.links.get(ev.node)
        if lk is not None:
            _link_event(lk, ev.kind, d)

    def _node_event(self, n: dict[str, Any], name: str, kind: str, d: dict[str, Any]) -> None:
        if kind == "node_down":
            n["state"], n["detail"] = "down", d.get("reason", "")
        elif kind in ("node_restarted", "node_rejoined"):
            n["state"], n["detail"] = "up", kind.replace("_", " ")
        elif kind in ("straggler_set", "misconfig_set"):
            self.until[name] = d.get("until_round")
            if kind == "straggler_set":
                n["state"], n["detail"] = "straggling", f"x{d.get('factor')} slowdown"
            else:
                n["state"], n["detail"] = "misconfigured", d.get("mode", "")
            if d.get("until_round"):
                n["detail"] += f" until round {d['until_round']}"

    def settle(self) -> None:
        """Nodes no event touched are up (or starting); slowdowns past their round end."""
        for name, n in self.nodes.items():
            if n["state"] == "planned":
                n["state"] = "up" if self.ready else "starting"
            last = self.until.get(name)
            slowed = n["state"] in ("straggling", "misconfigured")
            if slowed and last is not None and self.round > last:
                n["state"], n["detail"] = "up", ""


def _link_event(lk: dict[str, Any], kind: str, d: dict[str, Any]) -> None:
    """A link partitioned, healed, or changed (live or by its schedule)."""
    if kind == "link_partitioned":
        lk["state"] = "partitioned"
    elif kind == "link_healed":
        lk["state"] = "ok"
    elif kind in ("link_changed", "link_degraded", "link_restored"):
        params = d.get("params", d)  # schedule changes nest them under "params"
        lk.update({key: params[key] for key in LINK_KEYS if key in params})
        if params.get("partitioned"):
            lk["state"] = "partitioned"
        else:
            lk["state"] = "ok" if kind == "link_restored" else "degraded"


def add_metrics(
    nodes: dict[str, dict[str, Any]], links: dict[str, dict[str, Any]], metrics: Iterable[MetricRow]
) -> None:
    """Bytes up/down per link (wire counters when the run has them, else payloads),
    peak memory per node and, where the engine measured it (docker stats), mean CPU."""
    payload: dict[str, dict[str, float]] = {}
    for m in metrics:
        if m.node is None or m.value is None:
            continue
        if m.node in links and m.name in ("link_bytes_up", "link_bytes_down"):
            payload.setdefault(m.node, {})["wire_" + m.name[5:]] = m.value
        elif m.node in links and m.name in ("bytes_received", "bytes_sent"):
            key = "bytes_up" if m.name == "bytes_received" else "bytes_down"
            sums = payload.setdefault(m.node, {})
            sums[key] = sums.get(key, 0.0) + m.value
        elif m.node in nodes and m.name in ("peak_rss_mb", "mean_cpu_pct"):
            nodes[m.node][m.name] = m.value
    for node, p in payload.items():
        links[node]["bytes_up"] = p.get("wire_bytes_up", p.get("bytes_up"))
        links[node]["bytes_down"] = p.get("wire_bytes_down", p.get("bytes_down"))
