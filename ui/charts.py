"""Figures built from controller data (pure functions: data in, figure out).

``fleet_dot`` draws the continuum as a Graphviz graph: one layer per tier (space, cloud,
fog, edge from top to bottom), nodes filled by state, each client's link to the server
labelled with bandwidth and latency and drawn by its state. The Vega-Lite builders turn
long-format metric rows (``round``, ``node``, ``name``, ``value``) and event rows into
charts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import pandas as pd

NODE_COLOURS = {
    "up": "#3fb950",
    "down": "#f85149",
    "straggling": "#f0883e",
    "misconfigured": "#d29922",
    "starting": "#c9d1d9",
    "planned": "#a5d6ff",
}
LINK_STYLES = {
    "ok": ("#57606a", "solid"),
    "partitioned": ("#f85149", "dashed"),
    "degraded": ("#f0883e", "bold"),
    "not emulated": ("#8c959f", "dotted"),
}
FAULT_EVENTS = ("fault_injected", "fault_rejected")
#: Bookkeeping events (node ids, limits, timings), left out of the Live run page's list of
#: latest events: a run's end records one ``node_identified`` per node, and those would
#: push its last ``round_end`` out of the list (the controller's timeline leaves the same
#: kinds out: ``testbed.controller.timeline.QUIET``).
BOOKKEEPING_EVENTS = frozenset({"node_limits", "node_identified", "protocol_timing", "space_clock"})
EFFECT_EVENTS = (
    "node_down",
    "node_restarted",
    "node_rejoined",
    "link_partitioned",
    "link_healed",
    "straggler_set",
    "misconfig_set",
    "link_changed",
    "link_degraded",
    "link_restored",
)


def link_label(link: dict[str, Any]) -> str:
    """``100 Mbps / 20 ms`` (+ jitter and loss when set; ``unlimited`` bandwidth)."""
    bw = link.get("bandwidth_mbps")
    parts = [f"{bw:g} Mbps" if bw else "unlimited", f"{link.get('latency_ms') or 0:g} ms"]
    if link.get("jitter_ms"):
        parts.append(f"±{link['jitter_ms']:g} ms")
    if link.get("loss_pct"):
        parts.append(f"{link['loss_pct']:g}% loss")
    label = " / ".join(parts)
    return label if link.get("state") in ("ok", None) else f"{label}\\n{link['state']}"


def fleet_dot(fleet: dict[str, Any]) -> str:
    """Graphviz DOT of a fleet (see the module docstring)."""
    lines = [
        "digraph continuum {",
        '  graph [rankdir=TB, ranksep=0.9, nodesep=0.35, fontname="Helvetica", bgcolor=none];',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=9, dir=none];',
    ]
    for tier in fleet["tiers"]:
        lines.append(f'  subgraph "cluster_{tier}" {{')
        lines.append(f'    label="{tier}"; style="rounded,dashed"; color="#8c959f"; rank=same;')
        for n in fleet["nodes"]:
            if n["tier"] != tier:
                continue
            colour = NODE_COLOURS.get(n["state"], "#ffffff")
            role = " (server)" if n["role"] == "server" else ""
            hosts = " + ".join(n.get("workloads") or [])
            label = f"{n['name']}{role}\\n{n['profile']}\\n{n['state']}"
            label += f"\\n[{hosts}]" if hosts else ""
            lines.append(f'    "{n["name"]}" [label="{label}", fillcolor="{colour}"];')
        lines.append("  }")
    layer = {t: i for i, t in enumerate(fleet["tiers"])}
    tier_of = {n["name"]: n["tier"] for n in fleet["nodes"]}
    for lk in fleet["links"]:
        colour, style = LINK_STYLES.get(lk["state"], LINK_STYLES["ok"])
        a, b = lk["peer"], lk["node"]
        if layer.get(tier_of.get(b, ""), 0) < layer.get(tier_of.get(a, ""), 0):
            a, b = b, a  # edges point down the layers, so tiers stack in order
        lines.append(
            f'  "{a}" -> "{b}" [label="{link_label(lk)}", color="{colour}",'
            f' fontcolor="{colour}", style={style}];'
        )
    lines.append("}")
    return "\n".join(lines)


def node_table(fleet: dict[str, Any]) -> pd.DataFrame:
    """One row per node: state, tier, role, profile, CPU, memory, accelerator, peak
    memory, and the mean CPU use (percent of one core) where the engine measured it
    (``--backend docker``: ``docker stats`` of the node's container)."""
    rows = [
        {
            "node": n["name"],
            "state": n["state"],
            "detail": n.get("detail", ""),
            "tier": n["tier"],
            "role": n["role"],
            "workloads": " + ".join(n.get("workloads") or []) or "-",
            "profile": n["profile"],
            "CPU cores": n["cpu_cores"],
            "CPU speed (x host)": n["cpu_speed_factor"],
            "memory MB": n["memory_mb"],
            "accelerator": n.get("accelerator") or "-",
            "peak RSS MB": round(n["peak_rss_mb"]) if n.get("peak_rss_mb") else None,
        }
        for n in fleet["nodes"]
    ]
    if any(n.get("mean_cpu_pct") is not None for n in fleet["nodes"]):  # engine stats
        for row, n in zip(rows, fleet["nodes"], strict=True):
            pct = n.get("mean_cpu_pct")
            row["mean CPU % (docker stats)"] = None if pct is None else round(pct, 1)
    return pd.DataFrame(rows)


def _mb(nbytes: float | None) -> float | None:
    """Megabytes to 3 significant figures (a small app's few hundred bytes stay visible,
    not ``0.0``)."""
    return None if nbytes is None else float(f"{nbytes / 1e6:.3g}")


def link_table(fleet: dict[str, Any]) -> pd.DataFrame:
    """One row per link: ends, state, bandwidth, latency, jitter, loss, bytes moved."""
    rows = [
        {
            "link": f"{lk['node']} - {lk['peer']}",
            "state": lk["state"],
            "bandwidth Mbps": lk["bandwidth_mbps"],
            "latency ms": lk["latency_ms"],
            "jitter ms": lk["jitter_ms"],
            "loss %": lk["loss_pct"],
            "scheduled": lk["scheduled"],
            "MB up": _mb(lk["bytes_up"]),
            "MB down": _mb(lk["bytes_down"]),
        }
        for lk in fleet["links"]
    ]
    return pd.DataFrame(rows)


def per_round(df: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """Rows of metrics ``names`` that have a round, as (round, series, value)."""
    sel = df[df["name"].isin(names) & df["round"].notna()].copy()
    sel["series"] = sel["name"] + sel["node"].map(lambda n: f" ({n})" if pd.notna(n) else "")
    return sel[["round", "series", "name", "node", "value"]]


def line_chart(y_title: str, colour: str = "series", legend_bottom: bool = False) -> dict[str, Any]:
    """Vega-Lite spec: value per round, one line per ``colour`` value.

    Specs are plain dicts (no Altair validation on every refresh of a live panel).
    """
    legend: dict[str, Any] = {"title": None}
    if legend_bottom:
        legend.update(orient="bottom", columns=1, labelLimit=0)
    return {
        "mark": {"type": "line", "point": True},
        "encoding": {
            "x": {"field": "round", "type": "quantitative", "axis": {"tickMinStep": 1}},
            "y": {"field": "value", "type": "quantitative", "title": y_title},
            "color": {"field": colour, "type": "nominal", "legend": legend},
            "tooltip": [
                {"field": colour, "type": "nominal"},
                {"field": "round", "type": "quantitative"},
                {"field": "value", "type": "quantitative", "format": ".4f"},
            ],
        },
        "height": 260,
    }


def throughput(df: pd.DataFrame) -> pd.DataFrame:
    """Model traffic per round and client, Mbit/s: the bytes that made a round trip
    (``bytes_sent`` - ``bytes_lost`` + ``bytes_received``) x 8 over the round trips.

    Per (round, node) the observer records ``bytes_sent`` and ``bytes_lost`` once, but
    ``bytes_received`` and ``round_trip_s`` once per reply: a user's Flower App may send
    a node several messages a round (quickstart-numpy: train, then evaluate; the
    testbed's FL app: train, and evaluate under ``separate`` and in its last round), so
    the replies are summed.
    """
    names = ["bytes_sent", "bytes_received", "round_trip_s", "bytes_lost"]
    sel = df[df["name"].isin(names) & df["round"].notna() & df["node"].notna()]
    wide = sel.pivot_table(
        index=["round", "node"], columns="name", values="value", aggfunc="sum"
    ).reset_index()
    if wide.empty or not {"bytes_sent", "bytes_received", "round_trip_s"} <= set(wide.columns):
        return pd.DataFrame(columns=["round", "series", "value"])
    lost = wide["bytes_lost"].fillna(0.0) if "bytes_lost" in wide else 0.0
    moved = wide["bytes_sent"] - lost + wide["bytes_received"]
    wide["value"] = moved * 8 / 1e6 / wide["round_trip_s"]
    wide = wide.dropna(subset=["value"])
    return wide.rename(columns={"node": "series"})[["round", "series", "value"]]


#: The series the testbed itself records of an FL run: its own FL app's accuracies and
#: losses, the observer's bytes and times per (round, node), the simulation's clock, the
#: fleet's counters. Every other name is the app's own (a user's Flower App: its
#: MetricRecord keys, ``key[i]`` for a list). Pages list the app's first; an ordering
#: hint, never a filter (a name missing here is only listed earlier).
TESTBED_SERIES = frozenset({
    "global_acc", "global_loss", "federated_acc", "eval_acc", "eval_loss", "train_loss",
    "silo_acc", "contribution", "shapley", "shapley_se", "staleness", "stale_accepted",
    "bytes_sent", "bytes_received", "bytes_lost", "round_trip_s", "round_duration_s",
    "compute_s", "cpu_s", "device_time_s", "participation", "wall_time_s",
    "virtual_client_s", "virtual_round_s", "virtual_time_s",
    "peak_rss_mb", "mean_cpu_pct", "link_bytes_up", "link_bytes_down",
})  # fmt: skip
#: Flower's weighting key: a user's app reports it beside its metrics, listed after them.
FLOWER_KEYS = frozenset({"num-examples"})


def series_names(df: pd.DataFrame) -> list[str]:
    """Names of the series in ``df`` that have a round: the app's own first (not in
    :data:`TESTBED_SERIES`; Flower's ``num-examples`` last of them), then the
    testbed's, each group sorted by name."""
    names = set(df.loc[df["round"].notna(), "name"])
    return sorted(names, key=lambda n: (n in TESTBED_SERIES, n in FLOWER_KEYS, n))


def app_series(names: Iterable[str]) -> list[str]:
    """The names in ``names`` that are not the testbed's (:data:`TESTBED_SERIES`)."""
    return [n for n in names if n not in TESTBED_SERIES]


def _natural(name: str) -> tuple[Any, ...]:
    """Sort key: ``edge-2`` before ``edge-10``."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name))


STATUS_COLOURS = {
    "completed": "#1a7f37",
    "failed": "#cf222e",
    "late": "#bc4c00",
    "excluded": "#6e7781",
}


def status_grid(rows: pd.DataFrame) -> pd.DataFrame:
    """Per-(round, node) statuses (``GET /runs/{id}/status``: round, node, status,
    reason) as a grid: one row per node (natural order), one column per round (its
    number as text), ``-`` where the node has no status in that round."""
    grid = rows.pivot_table(index="node", columns="round", values="status", aggfunc="last")
    grid = grid.reindex(sorted(grid.index, key=_natural))
    grid.columns = [str(int(c)) for c in grid.columns]
    return grid.fillna("-")


def status_style(status: str) -> str:
    """CSS of a status cell (its colour; bold when it is not ``completed``)."""
    colour = STATUS_COLOURS.get(status)
    if colour is None:
        return ""
    return f"color: {colour}" + ("" if status == "completed" else "; font-weight: bold")


def event_category(kind: str, effects: Iterable[str] = ()) -> str:
    """``fault``, ``effect`` (what a fault did), ``round`` or ``lifecycle``; ``effects``
    adds the effect events of registered fault kinds (``GET /faults``)."""
    if kind in FAULT_EVENTS:
        return "fault"
    if kind in EFFECT_EVENTS or kind in effects:
        return "effect"
    return "round" if kind.startswith("round_") else "lifecycle"


CATEGORY_MARKERS = {
    "fault": "diamond",
    "effect": "square",
    "round": "circle",
    "lifecycle": "circle",
}


def _markers(kinds: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Fault kind and effect event name -> (marker, label) of the fault kind."""
    out: dict[str, tuple[str, str]] = {}
    for name, about in kinds.items():
        for key in (name, *about.get("effects", [])):
            out.setdefault(key, (about["marker"], about["label"]))
    return out


def event_frame(
    events: pd.DataFrame, kinds: dict[str, dict[str, Any]] | None = None
) -> pd.DataFrame:
    """Events with seconds since the first one, category, a one-line description and
    the timeline marker: a fault and its effects get their kind's ``marker`` and
    ``label`` from ``kinds`` (the ``details`` of ``GET /faults``)."""
    if events.empty:
        return events.assign(t_s=[], category=[], what=[], marker=[])
    kinds = kinds or {}
    marks = _markers(kinds)
    effects = {e for about in kinds.values() for e in about.get("effects", [])}
    t0 = events["ts"].min()
    out = events.copy()
    out["t_s"] = (out["ts"] - t0).round(2)
    out["category"] = out["kind"].map(lambda k: event_category(k, effects))

    def data_of(row: pd.Series) -> dict[str, Any]:
        return row["data"] if isinstance(row["data"], dict) else json.loads(row["data"] or "{}")

    def key_of(row: pd.Series) -> str:
        return str(data_of(row).get("kind")) if row["kind"] in FAULT_EVENTS else str(row["kind"])

    def what(row: pd.Series) -> str:
        data = data_of(row)
        detail = ", ".join(f"{k}={v}" for k, v in data.items() if k not in ("spec",))
        where = f" {row['node']}" if isinstance(row["node"], str) else ""
        rnd = f" (round {int(row['round'])})" if pd.notna(row["round"]) else ""
        label = (
            marks[key_of(row)][1] if row["kind"] in FAULT_EVENTS and key_of(row) in marks else ""
        )
        return (
            f"{row['kind']}{where}{rnd}"
            + (f": {detail}" if detail else "")
            + (f" — {label}" if label else "")
        )

    out["what"] = out.apply(what, axis=1)
    out["marker"] = out.apply(
        lambda r: marks.get(key_of(r), (CATEGORY_MARKERS[r["category"]], ""))[0], axis=1
    )
    return out


def latest_events(events: pd.DataFrame, n: int = 4) -> str:
    """The last ``n`` events of an :func:`event_frame`, bookkeeping left out:
    ``round_end (round 2) (41.3 s) · run_end (41.4 s) · ...``."""
    shown = events[~events["kind"].isin(BOOKKEEPING_EVENTS)].tail(n)
    return " · ".join(f"{r.what.split(':')[0]} ({r.t_s:.1f} s)" for r in shown.itertuples())


def timeline(events: pd.DataFrame) -> dict[str, Any]:
    """Vega-Lite spec: events over time, one row per kind; faults and effects stand out."""
    return {
        "mark": {"type": "point", "filled": True, "size": 90},
        "encoding": {
            "x": {"field": "t_s", "type": "quantitative", "title": "seconds since the run started"},
            "y": {"field": "kind", "type": "nominal", "title": None, "sort": {"field": "id"}},
            "color": {
                "field": "category",
                "type": "nominal",
                "title": None,
                "scale": {
                    "domain": ["fault", "effect", "round", "lifecycle"],
                    "range": ["#f85149", "#f0883e", "#0969da", "#8c959f"],
                },
            },
            "shape": (  # each fault kind's marker (GET /faults), else the category's
                {"field": "marker", "type": "nominal", "scale": None, "legend": None}
                if "marker" in events
                else {"field": "category", "type": "nominal", "title": None}
            ),
            "tooltip": [{"field": f, "type": "nominal"} for f in ("t_s", "kind", "node", "what")],
        },
        "height": max(160, 22 * int(events["kind"].nunique())),
    }


def overlay(frames: dict[str, pd.DataFrame], metric: str) -> pd.DataFrame:
    """Metric ``metric`` of several runs, per round (averaged over nodes), one series each."""
    parts = []
    for run_id, df in frames.items():
        sel = df[(df["name"] == metric) & df["round"].notna()]
        if not sel.empty:
            mean = sel.groupby("round", as_index=False)["value"].mean()
            parts.append(mean.assign(series=run_id))
    if not parts:
        return pd.DataFrame(columns=["round", "value", "series"])
    return pd.concat(parts, ignore_index=True)


def kind_label(rows: pd.DataFrame) -> str:
    """``measured``, ``modelled`` or both, as the rows' ``kind`` tags say."""
    kinds = sorted({str(k) for k in rows["kind"].dropna()})
    return " + ".join(kinds) if kinds else "kind not recorded"


def axis_title(rows: pd.DataFrame, name: str) -> str:
    """``latency_s (modelled, s)``: a metric's name with its kind and unit tags."""
    units = sorted({str(u) for u in rows["unit"].dropna()})
    return f"{name} ({', '.join([kind_label(rows), *units[:1]])})"


def xy_chart(
    x: str, x_title: str, y_title: str, colour: str = "series", log_y: bool = False
) -> dict[str, Any]:
    """Vega-Lite spec: ``value`` against a numeric ``x``, one line per ``colour`` value."""
    return {
        "mark": {"type": "line", "point": True},
        "encoding": {
            "x": {"field": x, "type": "quantitative", "title": x_title},
            "y": {
                "field": "value",
                "type": "quantitative",
                "title": y_title,
                "scale": {"type": "log"} if log_y else {"zero": False},
            },
            "color": {"field": colour, "type": "nominal", "legend": {"title": None}},
            "tooltip": [
                {"field": colour, "type": "nominal"},
                {"field": x, "type": "quantitative"},
                {"field": "value", "type": "quantitative", "format": ".4g"},
            ],
        },
        "height": 280,
    }
