"""Swimlanes of a run: one lane per node with the intervals of its state, one per workload.

:func:`swimlanes` is a pure function of the run's events (``{t, kind, node, round,
workload, data}``, ``t`` on the clock drawn) and its planned nodes. A node's state at a
time is the first of :data:`PRECEDENCE` that holds then, each from its own layer of
events:

- ``down``: from ``node_down`` (crash, outage, flapping) to ``node_restarted`` or
  ``node_rejoined`` (a crash: to the end);
- ``paused``: ``node_paused`` to ``node_resumed``;
- ``partitioned``: ``link_partitioned`` to ``link_healed``, or a scheduled
  ``link_changed`` that cuts a node's link (not a space-tier node's) to the next change;
- ``no contact``: a ``link_changed`` that cuts a space-tier node's link (between
  satellite passes) to the next change;
- ``degraded``: ``link_degraded`` to ``link_restored``, or a scheduled ``link_changed``
  away from the node's planned link to the next change;
- ``straggling`` / ``misconfigured``: ``straggler_set`` / ``misconfig_set`` to the end
  of round ``until_round`` (its ``round_end``; none: to the end);
- ``in pass``: a ``link_changed`` that opens a space-tier node's link, to the next change;
- ``up``: none of the above (from the fleet's start).

A workload's lane holds its rounds (``round_start`` to ``round_end`` of its events)
when it has rounds, else one ``active`` interval from its first to its last row. Every
other event is a marker on its node's lane (a workload's own events on the workload's
lane, the fleet's events without a node on a ``fleet`` lane): markers, not rules across
the chart, so that a run with hundreds of faults stays readable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: A node's states, the strongest first (it wins where several hold at once).
PRECEDENCE = (
    "down",
    "paused",
    "partitioned",
    "no contact",
    "degraded",
    "straggling",
    "misconfigured",
    "in pass",
    "up",
)
#: Event kind -> (layer, state it opens; None: it closes the layer).
NODE_EVENTS: dict[str, tuple[str, str | None]] = {
    "node_down": ("process", "down"),
    "node_restarted": ("process", None),
    "node_rejoined": ("process", None),
    "node_paused": ("pause", "paused"),
    "node_resumed": ("pause", None),
    "link_partitioned": ("cut", "partitioned"),
    "link_healed": ("cut", None),
    "link_degraded": ("shape", "degraded"),
    "link_restored": ("shape", None),
}
#: Events that slow a node until the end of a round (``until_round`` in their data).
UNTIL_ROUND = {"straggler_set": "straggling", "misconfig_set": "misconfigured"}
#: Link parameters compared with the planned link (a scheduled change away: degraded).
LINK_KEYS = ("bandwidth_mbps", "latency_ms", "jitter_ms", "loss_pct")
#: Events drawn by the lanes themselves (not markers).
ROUND_EVENTS = ("round_start", "round_end")


@dataclass(frozen=True)
class LaneNode:
    """A planned node: its name, tier and planned link parameters (:data:`LINK_KEYS`)."""

    name: str
    tier: str
    link: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class _Layers:
    """One node's open layers: layer -> (state, since) and the closed intervals."""

    open: dict[str, tuple[str, float]] = field(default_factory=dict)
    spans: list[tuple[str, float, float]] = field(default_factory=list)

    def set(self, layer: str, state: str | None, t: float) -> None:
        was = self.open.pop(layer, None)
        if was is not None and was[0] == state:  # (unchanged: keep its start)
            self.open[layer] = was
            return
        if was is not None and t > was[1]:
            self.spans.append((was[0], was[1], t))
        if state is not None:
            self.open[layer] = (state, t)

    def close(self, t: float) -> None:
        for layer in list(self.open):
            self.set(layer, None, t)


def _data(e: Mapping[str, Any]) -> Mapping[str, Any]:
    d = e.get("data") or {}
    return d if isinstance(d, Mapping) else {}


def _scheduled(node: LaneNode, d: Mapping[str, Any]) -> str | None:
    """The state a scheduled ``link_changed`` puts the node's link in (None: planned)."""
    params = d.get("params", d)
    if not isinstance(params, Mapping):
        return None
    space = node.tier == "space"
    if params.get("partitioned"):
        return "no contact" if space else "partitioned"
    if space:
        return "in pass"
    changed = any(
        k in params and k in node.link and params[k] != node.link[k] for k in LINK_KEYS
    )
    return "degraded" if changed else None


def _node_layers(
    node: LaneNode, events: Sequence[Mapping[str, Any]], round_ends: Mapping[int, float],
    end_s: float,
) -> list[tuple[str, float, float]]:  # fmt: skip
    """Every layer's intervals of one node (events in time order, times in ``t``)."""
    layers = _Layers()
    until: list[tuple[str, float]] = []  # (layer, when its round ends)
    for e in events:
        t, kind, d = float(e["t"]), str(e["kind"]), _data(e)
        for layer, when in [u for u in until if u[1] <= t]:
            layers.set(layer, None, when)
            until.remove((layer, when))
        if kind in NODE_EVENTS:
            layer, state = NODE_EVENTS[kind]
            layers.set(layer, state, t)
        elif kind == "link_changed":
            layers.set("schedule", _scheduled(node, d), t)
        elif kind in UNTIL_ROUND:
            layers.set(kind, UNTIL_ROUND[kind], t)
            last = d.get("until_round")
            if isinstance(last, int) and last in round_ends:
                until.append((kind, max(t, round_ends[last])))
    for layer, when in until:
        layers.set(layer, None, min(when, end_s))
    layers.close(max(end_s, *(s for _, s in layers.open.values()), 0.0))
    return layers.spans


def _combine(spans: list[tuple[str, float, float]], start_s: float, end_s: float) -> list[
    tuple[str, float, float]
]:
    """One state per elementary interval (the strongest of those that hold), merged."""
    cuts = sorted({start_s, end_s, *(a for _, a, _ in spans), *(b for _, _, b in spans)})
    rank = {s: i for i, s in enumerate(PRECEDENCE)}
    out: list[tuple[str, float, float]] = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        if b <= a or a < start_s:
            continue
        held = [s for s, x, y in spans if x <= a and b <= y]
        state = min(held, key=rank.__getitem__, default="up")
        if out and out[-1][0] == state and out[-1][2] == a:
            out[-1] = (state, out[-1][1], b)
        else:
            out.append((state, a, b))
    return out


def _workload_lane(
    name: str, events: Sequence[Mapping[str, Any]], span: tuple[float, float] | None,
    only: bool,
) -> list[dict[str, Any]]:  # fmt: skip
    """A workload's rounds (its ``round_start`` .. ``round_end``; untagged ones too when
    it is the run's ``only`` workload), else its active span."""
    starts: dict[int, float] = {}
    out = []
    for e in events:
        mine = e.get("workload") == name or (only and e.get("workload") is None)
        if not mine or e["kind"] not in ROUND_EVENTS or e.get("round") is None:
            continue
        rnd, t = int(e["round"]), float(e["t"])
        if e["kind"] == "round_start":
            starts[rnd] = t
        elif rnd in starts:
            out.append({"state": "round", "start_s": starts.pop(rnd), "end_s": t,
                        "detail": f"round {rnd}"})  # fmt: skip
    for rnd, t in starts.items():  # a round still running (or cut by the run's end)
        end = span[1] if span else t
        out.append({"state": "round", "start_s": t, "end_s": max(t, end),
                    "detail": f"round {rnd} (no end recorded)"})  # fmt: skip
    if not out and span is not None:
        out.append({"state": "active", "start_s": span[0], "end_s": span[1],
                    "detail": "first to last row"})  # fmt: skip
    return out


def lane_order(nodes: Sequence[LaneNode], tiers: Sequence[str]) -> list[LaneNode]:
    """Nodes grouped by tier (``tiers`` order, others after), plan order within."""
    rank = {t: i for i, t in enumerate(tiers)}
    return sorted(nodes, key=lambda n: rank.get(n.tier, len(rank)))


def swimlanes(
    nodes: Sequence[LaneNode],
    events: Sequence[Mapping[str, Any]],
    workloads: Sequence[str],
    end_s: float,
    *,
    spans: Mapping[str, tuple[float, float]] | None = None,
    tiers: Sequence[str] = ("space", "cloud", "fog", "edge"),
) -> dict[str, Any]:
    """The swimlanes of a run.

    Parameters
    ----------
    nodes : sequence of LaneNode
        The planned nodes (their tier groups the lanes; their planned link tells a
        scheduled degradation from a return to the plan).
    events : sequence of mapping
        ``{t, kind, node, round, workload, data}``, ``t`` in seconds on the axis drawn
        (wall or virtual, after the fleet was ready), in time order.
    workloads : sequence of str
        The run's workload sections, one lane each.
    end_s : float
        Where open intervals end (the run's last record, s).
    spans : mapping, optional
        Workload -> (first, last) time of its rows, for workloads without rounds.
    tiers : sequence of str
        Tier order of the node lanes.

    Returns
    -------
    dict
        ``lanes``: ``[{lane, kind (node|workload|fleet), group}]`` top to bottom;
        ``intervals``: ``[{lane, state, start_s, end_s, detail}]``;
        ``markers``: ``[{lane, t_s, kind, detail}]``; ``states``: :data:`PRECEDENCE`.
    """
    events = sorted(events, key=lambda e: float(e["t"]))
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for e in events:
        if e.get("node") is not None:
            by_node.setdefault(str(e["node"]), []).append(e)
    round_ends = {
        int(e["round"]): float(e["t"])
        for e in events
        if e["kind"] == "round_end" and e.get("round") is not None
    }
    lanes: list[dict[str, Any]] = []
    intervals: list[dict[str, Any]] = []
    for w in workloads:
        lanes.append({"lane": f"workload {w}", "kind": "workload", "group": "workloads"})
        rows = _workload_lane(w, events, (spans or {}).get(w), len(workloads) == 1)
        intervals += [{"lane": f"workload {w}", **r} for r in rows]
    names = {n.name for n in nodes}
    loose = [e for e in events if _lane_of(e, names, workloads) == "fleet"]
    if loose:
        lanes.append({"lane": "fleet", "kind": "fleet", "group": "fleet"})
    for n in lane_order(nodes, tiers):
        lanes.append({"lane": n.name, "kind": "node", "group": n.tier})
        spans_n = _node_layers(n, by_node.get(n.name, []), round_ends, end_s)
        intervals += [
            {"lane": n.name, "state": s, "start_s": a, "end_s": b, "detail": ""}
            for s, a, b in _combine(spans_n, min(0.0, end_s), end_s)
        ]
    markers = [
        {"lane": _lane_of(e, names, workloads), "t_s": float(e["t"]), "kind": e["kind"],
         "detail": e.get("detail", "")}  # fmt: skip
        for e in events
        if e["kind"] not in ROUND_EVENTS
    ]
    return {"lanes": lanes, "intervals": intervals, "markers": markers, "states": PRECEDENCE}


def _lane_of(e: Mapping[str, Any], nodes: set[str], workloads: Sequence[str]) -> str:
    """The lane an event is drawn on: its node's, else its workload's, else the fleet's."""
    if e.get("node") in nodes:
        return str(e["node"])
    if e.get("workload") in workloads:
        return f"workload {e['workload']}"
    return "fleet"
