"""One run's timeline: every workload's key metric and every event on one time axis.

The dashboard's Timeline page draws what :func:`run_timeline` returns. Times are
seconds after the fleet was ready (the first ``fleet_ready`` event; the run's first
row when there is none). A workload names its key metrics with the class attribute
``key_metrics`` (:mod:`testbed.workloads`); rows of a store written before rows carried
their workload (``workload`` NULL) are taken as the run's one workload's, except the
fleet's own rows (link counters), which belong to no workload.

A run on ``--backend simulation`` also has a virtual clock (modelled): its rows carry
``vt_s``, virtual seconds after the fleet was ready (:func:`virtual_clock`), and its
swimlanes are drawn on both clocks (:mod:`testbed.controller.lanes`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from testbed.controller.lanes import LaneNode, swimlanes
from testbed.rows import EventRow, WorkloadMetricRow
from testbed.store import RunStore

#: Events that are not drawn (bookkeeping, not something that happened to the fleet).
QUIET = frozenset({"node_limits", "node_identified", "protocol_timing", "space_clock"})
#: Metrics that are the fleet's own (recorded once per run, per node).
FLEET_METRICS = ("link_",)
#: The simulation's running virtual time at each round's end (:mod:`testbed.simulation.grid`).
VIRTUAL_METRIC = "virtual_time_s"
#: (virtual s, how it was found) of a row: ``event`` (its ``virtual_t_s``), ``round``
#: (the virtual clock at its round's end; a ``round_start`` at the previous one's) or
#: ``interpolated`` (between round ends, on the wall clock).
VirtualOf = Callable[[str, "int | None", Mapping[str, Any], float, "str | None"], tuple[float, str]]


def key_metrics(section: str) -> tuple[str, ...]:
    """The key metrics a registered workload declares (none: not drawn)."""
    from testbed.workloads import WORKLOADS, load_builtin

    load_builtin()
    cls = WORKLOADS[section] if section in WORKLOADS else None
    return tuple(getattr(cls, "key_metrics", ()))


def key_bounds(section: str, spec: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, float]]]:
    """The bounds a registered workload puts on its key metrics, from its resolved
    section ``spec``: metric -> (label, series -> upper bound); none: {}."""
    from testbed.workloads import WORKLOADS, load_builtin

    load_builtin()
    hook = getattr(WORKLOADS[section], "key_bounds", None) if section in WORKLOADS else None
    return dict(hook(spec)) if hook is not None else {}


def _origin(events: list[EventRow], rows: list[WorkloadMetricRow]) -> float:
    ready = [e.ts for e in events if e.kind == "fleet_ready"]
    if ready:
        return min(ready)
    return min([e.ts for e in events] + [r.ts for r in rows], default=0.0)


def _owner(workload: str | None, name: str, sections: list[str]) -> str | None:
    """The workload of a metric row (an untagged row of a one-workload run is its)."""
    if workload is not None or name.startswith(FLEET_METRICS) or len(sections) != 1:
        return workload
    return sections[0]


def virtual_clock(rows: Sequence[WorkloadMetricRow], t0: float) -> VirtualOf | None:
    """The virtual time of a row of a simulation run (None: the run has no virtual clock).

    The simulation records the virtual clock at each round's end (``virtual_time_s``,
    round ``r``) and its fault events at their virtual instant (``virtual_t_s``). A row
    is placed at its own ``virtual_t_s``, else (a row of the workload that keeps the
    clock, with a round) at its round's end, else between the round ends around its
    wall time (linear; before the first round: from 0 at the fleet's start, after the
    last: the last value).
    """
    ends = sorted(
        (r.ts - t0, float(r.value), r.round, r.workload)
        for r in rows
        if r.name == VIRTUAL_METRIC and r.round is not None and r.value is not None
    )
    if not ends:
        return None
    at_round = {0: 0.0, **{int(rnd): v for _, v, rnd, _ in ends if rnd is not None}}
    owner = next((w for *_, w in ends if w is not None), None)
    wall = np.array([0.0, *(max(0.0, w) for w, *_ in ends)])
    virt = np.maximum.accumulate(np.array([0.0, *(v for _, v, _, _ in ends)]))

    def of(
        kind: str, rnd: int | None, data: Mapping[str, Any], t_s: float, workload: str | None
    ) -> tuple[float, str]:
        if isinstance(data.get("virtual_t_s"), int | float):
            return float(data["virtual_t_s"]), "event"
        if rnd is not None and workload in (owner, None):
            key = rnd - 1 if kind == "round_start" else rnd
            if key in at_round:
                return at_round[key], "round"
        return float(np.interp(t_s, wall, virt)), "interpolated"

    return of


def key_summary(
    metrics: Sequence[Mapping[str, Any]], tags: Sequence[Mapping[str, Any]],
    bounds: Mapping[str, Mapping[str, tuple[str, Mapping[str, float]]]] | None = None,
    tdf: float = 1.0,
) -> list[dict[str, Any]]:  # fmt: skip
    """Per (workload, key metric): rows, mean, p50, p95, last, and rows per second from
    the first row to the last (a per-request metric's throughput; per emulated second
    under time dilation ``tdf``: the rows' wall-clock span / ``tdf``); ``kind``: measured /
    modelled as the rows' tags say (None: not tagged); where the workload bounds the
    metric (``bounds``: workload -> :func:`key_bounds`), ``bound`` (its label) and
    ``within_bound_pct``: the share of rows with a bound (by their series, the row's
    node) at or under it."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, m in enumerate(metrics):
        groups.setdefault((m["workload"], m["name"]), []).append(i)
    out = []
    for (wl, name), idx in groups.items():
        vals = np.array([metrics[i]["value"] for i in idx if metrics[i]["value"] is not None])
        ts = [float(metrics[i]["t_s"]) for i in idx]
        span = (max(ts) - min(ts)) / tdf
        kinds = sorted({str(tags[i].get("kind")) for i in idx} & {"measured", "modelled"})
        out.append({
            "workload": wl, "name": name, "rows": len(idx),
            "mean": float(vals.mean()) if len(vals) else None,
            "p50": float(np.percentile(vals, 50)) if len(vals) else None,
            "p95": float(np.percentile(vals, 95)) if len(vals) else None,
            "last": float(vals[-1]) if len(vals) else None,
            "per_s": (len(idx) - 1) / span if len(idx) > 1 and span > 0 else None,
            "kind": " + ".join(kinds) or None,
            **_within(wl, name, [metrics[i] for i in idx], bounds or {}),
        })  # fmt: skip
    return out


def _within(
    wl: str, name: str, rows: Sequence[Mapping[str, Any]],
    bounds: Mapping[str, Mapping[str, tuple[str, Mapping[str, float]]]],
) -> dict[str, Any]:  # fmt: skip
    """``bound`` and ``within_bound_pct`` of one key metric's rows (none: {})."""
    if name not in bounds.get(wl, {}):
        return {}
    label, by_series = bounds[wl][name]
    held = [r["value"] <= by_series[r["node"]] for r in rows
            if r["node"] in by_series and r["value"] is not None]  # fmt: skip
    return {"bound": label, "within_bound_pct": 100.0 * sum(held) / len(held) if held else None}


def _ran(
    rows: Sequence[WorkloadMetricRow], sections: list[str], nodes: Sequence[str]
) -> dict[str, dict[str, int]]:
    """Node -> workload -> rows it recorded on that node (what each node ran)."""
    out: dict[str, dict[str, int]] = {n: {} for n in nodes}
    for r in rows:
        owner = _owner(r.workload, r.name, sections)
        if r.node in out and owner is not None:
            out[r.node][owner] = out[r.node].get(owner, 0) + 1
    return out


def run_timeline(
    store: RunStore,
    run_id: str,
    sections: list[str],
    hosts: dict[str, list[str]],
    nodes: Sequence[LaneNode] = (),
    specs: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The timeline of run ``run_id``.

    Parameters
    ----------
    store : RunStore
        The run store.
    run_id : str
        A full run id.
    sections : list[str]
        The run's workloads (from its resolved spec), in the spec's order.
    hosts : dict[str, list[str]]
        Node name -> the workloads the spec places on it.
    nodes : sequence of LaneNode
        The planned nodes (tier, planned link), one swimlane each.
    specs : mapping, optional
        Section -> its resolved spec (for the workload's :func:`key_bounds`).

    Returns
    -------
    dict
        ``workloads`` (each with its ``key_metrics``), ``hosts``, ``ran`` (node ->
        workload -> rows recorded on it), ``t0`` (epoch s), ``virtual`` (whether rows
        carry ``vt_s``), ``metrics``: ``[{t_s, workload, name, node, round, value}]`` of
        the key metrics, ``summary`` (:func:`key_summary`), ``events``: ``[{t_s, kind,
        node, round, workload, detail}]`` (with ``vt_s``, ``vt_from`` on a virtual
        clock) and ``swimlanes``: ``{"wall": ..., "virtual": ...}``
        (:func:`testbed.controller.lanes.swimlanes`; virtual only on a virtual clock).
    """
    events = store.events(run_id)
    rows = store.workload_metrics(run_id)
    t0 = _origin(events, rows)
    vclock = virtual_clock(rows, t0)
    keys = {s: key_metrics(s) for s in sections}
    metrics, tags = [], []
    spans: dict[str, list[float]] = {}
    vspans: dict[str, list[float]] = {}
    last = {"t_s": 0.0, "vt_s": 0.0}  # the run's last record on each clock
    for r in rows:
        owner = _owner(r.workload, r.name, sections)
        vt = vclock("metric", r.round, r.tags, r.ts - t0, owner)[0] if vclock else 0.0
        last.update(t_s=max(last["t_s"], r.ts - t0), vt_s=max(last["vt_s"], vt))
        if owner is not None:
            spans.setdefault(owner, []).append(r.ts - t0)
            vspans.setdefault(owner, []).append(vt)
        if owner is None or r.name not in keys.get(owner, ()):
            continue
        row: dict[str, Any] = {"t_s": r.ts - t0, "workload": owner, "name": r.name,
                               "node": r.node, "round": r.round, "value": r.value}  # fmt: skip
        if vclock is not None:
            row["vt_s"], row["vt_from"] = vclock("metric", r.round, r.tags, r.ts - t0, owner)
        metrics.append(row)
        tags.append(r.tags)
    tagged = store.event_workloads(run_id)
    drawn, raw = [], []
    for e in events:
        if e.kind in QUIET:
            continue
        item: dict[str, Any] = {"t_s": _when(e, t0), "kind": e.kind, "node": e.node,
                                "round": e.round, "workload": tagged.get(e.id),
                                "detail": _detail(e)}  # fmt: skip
        if vclock is not None:
            item["vt_s"], item["vt_from"] = vclock(
                e.kind, e.round, e.data_dict, item["t_s"], item["workload"]
            )
        raw.append({**item, "data": e.data_dict})
        if e.kind != "round_start":
            drawn.append(item)
    drawn.sort(key=lambda e: float(e["t_s"] or 0.0))
    lanes = {"wall": _lanes(nodes, raw, sections, spans, "t_s", last["t_s"])}
    if vclock is not None:
        lanes["virtual"] = _lanes(nodes, raw, sections, vspans, "vt_s", last["vt_s"])
    return {
        "run_id": run_id,
        "t0": t0,
        "virtual": vclock is not None,
        "workloads": [{"section": s, "key_metrics": list(keys[s])} for s in sections],
        "hosts": hosts,
        "ran": _ran(rows, sections, list(hosts) or [n.name for n in nodes]),
        "metrics": metrics,
        "time_dilation": (tdf := store.time_dilation(run_id)),
        "summary": key_summary(
            metrics, tags, {s: key_bounds(s, (specs or {}).get(s) or {}) for s in sections}, tdf
        ),
        "events": drawn,
        "swimlanes": lanes,
    }


def _lanes(
    nodes: Sequence[LaneNode], events: list[dict[str, Any]], sections: list[str],
    spans: Mapping[str, list[float]], clock: str, last_row: float,
) -> dict[str, Any]:  # fmt: skip
    """The swimlanes on one clock (``t_s`` wall, ``vt_s`` virtual), to the run's last
    record (an event or a row)."""
    on = [{**e, "t": e[clock]} for e in events]
    end = max([last_row, *(e["t"] for e in on)])
    first_last = {w: (min(ts), max(ts)) for w, ts in spans.items() if ts}
    return swimlanes(nodes, on, sections, end, spans=first_last)


def _when(e: EventRow, t0: float) -> float:
    """Seconds after ``t0`` an event happened (a scheduled link change is recorded at
    the end of the run with the time it was applied:
    :func:`testbed.workloads.base.record_link_counters`)."""
    return e.ts - t0


def _detail(e: EventRow) -> str:
    """A short text of an event's data (its fault kind, reason, or parameters)."""
    d = e.data_dict
    for key in ("kind", "reason", "message", "status"):
        if key in d:
            return str(d[key])[:120]
    if "params" in d:
        return ", ".join(f"{k}={v}" for k, v in dict(d["params"]).items() if v)[:120]
    return ""
