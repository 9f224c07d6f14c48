"""One run's timeline: every workload's key metric and every event on one time axis.

The dashboard's Timeline page draws what :func:`run_timeline` returns. Times are
seconds after the fleet was ready (the first ``fleet_ready`` event; the run's first
row when there is none). A workload names its key metrics with the class attribute
``key_metrics`` (:mod:`testbed.workloads`); rows of a store written before rows carried
their workload (``workload`` NULL) are taken as the run's one workload's, except the
fleet's own rows (link counters), which belong to no workload.
"""

from __future__ import annotations

from typing import Any

from testbed.rows import EventRow, WorkloadMetricRow
from testbed.store import RunStore

#: Events that are not drawn (bookkeeping, not something that happened to the fleet).
QUIET = frozenset({"node_limits", "node_identified", "protocol_timing", "space_clock"})
#: Metrics that are the fleet's own (recorded once per run, per node).
FLEET_METRICS = ("link_",)


def key_metrics(section: str) -> tuple[str, ...]:
    """The key metrics a registered workload declares (none: not drawn)."""
    from testbed.workloads import WORKLOADS, load_builtin

    load_builtin()
    cls = WORKLOADS[section] if section in WORKLOADS else None
    return tuple(getattr(cls, "key_metrics", ()))


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


def run_timeline(
    store: RunStore, run_id: str, sections: list[str], hosts: dict[str, list[str]]
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
        Node name -> the workloads it hosts.

    Returns
    -------
    dict
        ``workloads`` (each with its ``key_metrics``), ``hosts``, ``t0`` (epoch s),
        ``metrics``: ``[{t_s, workload, name, node, round, value}]`` of the key metrics,
        ``events``: ``[{t_s, kind, node, round, workload, detail}]``.
    """
    events = store.events(run_id)
    rows = store.workload_metrics(run_id)
    t0 = _origin(events, rows)
    keys = {s: key_metrics(s) for s in sections}
    metrics = []
    for r in rows:
        owner = _owner(r.workload, r.name, sections)
        if owner is None or r.name not in keys.get(owner, ()):
            continue
        metrics.append(
            {"t_s": r.ts - t0, "workload": owner, "name": r.name, "node": r.node,
             "round": r.round, "value": r.value}  # fmt: skip
        )
    tagged = store.event_workloads(run_id)
    drawn = [
        {"t_s": _when(e, t0), "kind": e.kind, "node": e.node, "round": e.round,
         "workload": tagged.get(e.id), "detail": _detail(e)}  # fmt: skip
        for e in events
        if e.kind not in QUIET and e.kind not in ("round_start",)
    ]
    drawn.sort(key=lambda e: float(e["t_s"] or 0.0))
    return {
        "run_id": run_id,
        "t0": t0,
        "workloads": [{"section": s, "key_metrics": list(keys[s])} for s in sections],
        "hosts": hosts,
        "metrics": metrics,
        "events": drawn,
    }


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
