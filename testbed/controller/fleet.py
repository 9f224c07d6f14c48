"""Fleet and link state of a run: the plan's topology plus what the events say happened.

A node or link a fault was injected into carries ``fault`` (the kind's name, label
and marker, from the registry ``testbed.faults``). Node states: ``planned`` (no run),
``starting`` (fleet not ready yet), ``up``, ``down``
(crashed / in an outage), ``straggling`` (slowed down by a straggler fault),
``misconfigured``. Link states: ``ok``, ``partitioned``, ``degraded`` (a live link change
or a link schedule moved it away from its spec), ``not emulated`` (``links.mode: none``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from testbed.planner import Plan

TIER_ORDER = ("space", "cloud", "fog", "edge")


def _link_params(link: Any) -> dict[str, Any]:
    return {
        "bandwidth_mbps": link.bandwidth_mbps,
        "latency_ms": link.latency_ms,
        "jitter_ms": link.jitter_ms,
        "loss_pct": link.loss_pct,
    }


def planned_fleet(plan: Plan) -> dict[str, Any]:
    """Topology of a plan with every node ``planned`` and every link at its spec.

    Returns
    -------
    dict
        ``{"name", "tiers", "server", "nodes": [...], "links": [...]}``; a node has its
        name, tier, role, profile and the profile's CPU/memory/accelerator figures; a link
        joins a client node to the server node with its bandwidth, latency, jitter, loss.
    """
    mode = plan.experiment.links.mode
    nodes = [
        {
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
        }
        for n in plan.nodes
    ]
    server = next((n.name for n in plan.nodes if n.role == "server"), None)
    links = [
        {
            "node": n.name,
            "peer": server,
            **_link_params(n.uplink),
            "scheduled": bool(n.uplink.schedule),
            "state": "ok" if mode != "none" else "not emulated",
            "bytes_up": None,
            "bytes_down": None,
        }
        for n in plan.clients
        if server is not None
    ]
    tiers = [t for t in TIER_ORDER if any(n.tier == t for n in plan.nodes)]
    return {
        "name": plan.name,
        "tiers": tiers,
        "server": server,
        "links_mode": mode,
        "round": 0,
        "nodes": nodes,
        "links": links,
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


def fleet_state(
    plan: Plan,
    events: Iterable[tuple],
    metrics: Iterable[tuple],
    run_status: str,
) -> dict[str, Any]:
    """Replay a run's events over its planned fleet.

    Parameters
    ----------
    plan : Plan
        The run's plan (from its resolved spec).
    events : iterable of tuple
        ``(id, ts, kind, round, node, data_json)`` rows of the run, in order.
    metrics : iterable of tuple
        ``(round, node, name, value, ts)`` rows of the run.
    run_status : str
        The run's status; nodes of a finished run keep their last state.
    """
    fleet = planned_fleet(plan)
    nodes = {n["name"]: n for n in fleet["nodes"]}
    links = {lk["node"]: lk for lk in fleet["links"]}
    ready = False
    rnd = 0
    until: dict[str, int | None] = {}
    for _id, _ts, kind, ev_round, node, data in events:
        d = json.loads(data) if data else {}
        if kind == "fleet_ready":
            ready = True
        elif kind == "round_start" and ev_round is not None:
            rnd = int(ev_round)
        if kind == "fault_injected" and node:
            _mark_fault(nodes.get(node), links.get(node), d.get("kind", ""))
        n = nodes.get(node) if node else None
        if n is not None:
            if kind == "node_down":
                n["state"], n["detail"] = "down", d.get("reason", "")
            elif kind in ("node_restarted", "node_rejoined"):
                n["state"], n["detail"] = "up", kind.replace("_", " ")
            elif kind in ("straggler_set", "misconfig_set"):
                until[node] = d.get("until_round")
                n["state"] = "straggling" if kind == "straggler_set" else "misconfigured"
                n["detail"] = (
                    f"x{d.get('factor')} slowdown" if kind == "straggler_set" else d.get("mode", "")
                ) + (f" until round {d['until_round']}" if d.get("until_round") else "")
        lk = links.get(node) if node else None
        if lk is not None:
            if kind == "link_partitioned":
                lk["state"] = "partitioned"
            elif kind == "link_healed":
                lk["state"] = "ok"
            elif kind in ("link_changed", "link_degraded", "link_restored"):
                params = d.get("params", d)  # schedule changes nest them under "params"
                for key in ("bandwidth_mbps", "latency_ms", "jitter_ms", "loss_pct"):
                    if key in params:
                        lk[key] = params[key]
                lk["state"] = (
                    "partitioned"
                    if params.get("partitioned")
                    else "ok"
                    if kind == "link_restored"
                    else "degraded"
                )
    for name, n in nodes.items():
        if n["state"] == "planned":
            n["state"] = "up" if ready else "starting"
        last = until.get(name)
        if n["state"] in ("straggling", "misconfigured") and last is not None and rnd > last:
            n["state"], n["detail"] = "up", ""
    payload: dict[str, dict[str, float]] = {}
    for _r, node, name, value, _ts in metrics:
        if node in links and name in ("link_bytes_up", "link_bytes_down"):
            payload.setdefault(node, {})["wire_" + name[5:]] = value
        elif node in links and name in ("bytes_received", "bytes_sent"):
            key = "bytes_up" if name == "bytes_received" else "bytes_down"
            payload.setdefault(node, {})[key] = payload.get(node, {}).get(key, 0.0) + value
        elif node in nodes and name == "peak_rss_mb":
            nodes[node]["peak_rss_mb"] = value
    for node, p in payload.items():  # wire counters when the run has them, else payloads
        links[node]["bytes_up"] = p.get("wire_bytes_up", p.get("bytes_up"))
        links[node]["bytes_down"] = p.get("wire_bytes_down", p.get("bytes_down"))
    fleet["round"] = rnd
    fleet["run_status"] = run_status
    return fleet
