"""Fleet and link state of a run: the plan's topology plus what the events say happened.

A node or link a fault was injected into carries ``fault`` (the kind's name, label
and marker, from the registry ``testbed.faults``). Node states: ``planned`` (no run),
``starting`` (fleet not ready yet), ``up``, ``down``
(crashed / in an outage), ``straggling`` (slowed down by a straggler fault),
``misconfigured``. Link states: ``ok``, ``partitioned``, ``degraded`` (a live link change
or a link schedule moved it away from its spec), ``not emulated`` (``links.mode: none``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from testbed.controller.fleet_nodes import (
    LINK_KEYS,
    TIER_ORDER,
    Replay,
    add_metrics,
    has_link,
    link_dict,
    link_params,
    node_dict,
)
from testbed.planner import Plan
from testbed.rows import EventRow, MetricRow, StatusRow

__all__ = [
    "LINK_KEYS",
    "TIER_ORDER",
    "Replay",
    "add_metrics",
    "fleet_state",
    "has_link",
    "link_dict",
    "link_params",
    "node_dict",
    "planned_fleet",
]


def planned_fleet(plan: Plan) -> dict[str, Any]:
    """Topology of a plan with every node ``planned`` and every link at its spec.

    A plan of more than :data:`~testbed.controller.fleet_groups.GROUPED_ABOVE` nodes gets
    the grouped view instead (:func:`~testbed.controller.fleet_groups.grouped_fleet`:
    nodes per tier/profile with counts, nothing made per node).

    Returns
    -------
    dict
        ``{"name", "tiers", "server", "nodes": [...], "links": [...]}``; a node has its
        name, tier, role, profile and the profile's CPU/memory/accelerator figures; a link
        joins a client node to the server node with its bandwidth, latency, jitter, loss.
    """
    from testbed.controller.fleet_groups import GROUPED_ABOVE, grouped_fleet

    if len(plan.nodes) > GROUPED_ABOVE:
        return grouped_fleet(plan)
    mode = plan.experiment.links.mode
    server = next((n.name for n in plan.nodes if n.role == "server"), None)
    tiers = [t for t in TIER_ORDER if any(n.tier == t for n in plan.nodes)]
    return {
        "name": plan.name,
        "tiers": tiers,
        "server": server,
        "links_mode": mode,
        "round": 0,
        "nodes": [node_dict(n) for n in plan.nodes],
        "links": [link_dict(n, server, mode) for n in plan.nodes if has_link(n, server)],
    }


def fleet_state(
    plan: Plan,
    events: Iterable[EventRow],
    metrics: Iterable[MetricRow],
    run_status: str,
    statuses: Iterable[StatusRow] = (),
) -> dict[str, Any]:
    """Replay a run's events over its planned fleet (a fleet of more than
    :data:`~testbed.controller.fleet_groups.GROUPED_ABOVE` nodes: by group,
    :func:`~testbed.controller.fleet_groups.grouped_state`).

    Parameters
    ----------
    plan : Plan
        The run's plan (from its resolved spec).
    events : iterable of EventRow
        The run's events, in order.
    metrics : iterable of MetricRow
        The run's metrics (traffic per link, peak memory per node).
    run_status : str
        The run's status; nodes of a finished run keep their last state.
    statuses : iterable of StatusRow
        The run's statuses per round and node (read by the grouped view only: its
        nodes with a failed round, and its counts of sampled nodes per round).
    """
    from testbed.controller.fleet_groups import GROUPED_ABOVE, grouped_state

    if len(plan.nodes) > GROUPED_ABOVE:
        return grouped_state(plan, events, metrics, run_status, statuses)
    fleet = planned_fleet(plan)
    replay = Replay(
        nodes={n["name"]: n for n in fleet["nodes"]},
        links={lk["node"]: lk for lk in fleet["links"]},
    )
    for ev in events:
        replay.event(ev)
    replay.settle()
    add_metrics(replay.nodes, replay.links, metrics)
    fleet["round"] = replay.round
    fleet["run_status"] = run_status
    return fleet
