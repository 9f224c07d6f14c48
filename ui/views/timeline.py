"""The Timeline page's parts: each workload's key metrics (a summary and one chart per
metric over a shared time axis), the swimlanes (one lane per node with its states, one
per workload, events as markers), the event list, and what each node ran.

A simulation run has two clocks: the page draws on its virtual clock (modelled) by
default, labelled ``virtual``, and on the wall clock on request.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from ui import charts, client

#: Colour of each swimlane state (node states, then a workload's rounds / active span).
STATE_COLOURS = {
    "down": "#f85149",
    "paused": "#a371f7",
    "partitioned": "#8250df",
    "no contact": "#d0d7de",
    "degraded": "#f0883e",
    "straggling": "#d29922",
    "misconfigured": "#bc4c00",
    "in pass": "#0969da",
    "up": "#3fb950",
    "round": "#54aeff",
    "active": "#54aeff",
}
LANE_STEP_PX = 14  # height of one lane: 60 nodes fit in ~900 px
CLOCKS = {"virtual": "virtual (modelled clock)", "wall": "wall"}


def frames(tl: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metrics, events) of a timeline as data frames (columns even when empty)."""
    mcols = ["t_s", "vt_s", "workload", "name", "node", "round", "value"]
    ecols = ["t_s", "vt_s", "kind", "node", "round", "workload", "detail"]
    m = pd.DataFrame(tl["metrics"], columns=mcols)
    e = pd.DataFrame(tl["events"], columns=ecols)
    e["workload"] = e["workload"].fillna("fleet")
    e["category"] = e["kind"].map(charts.event_category)
    return m, e


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON-safe dicts (NaN -> None)."""
    return list(df.astype(object).where(df.notna(), None).to_dict("records"))


def _tips(*fields: tuple[str, str]) -> list[dict[str, str]]:
    return [{"field": f, "type": t} for f, t in fields]


def axis(clock: str, domain: tuple[float, float]) -> dict[str, Any]:
    """The shared x axis: wall or virtual seconds after the fleet was ready."""
    title = ("virtual s after the fleet was ready (modelled clock)" if clock == "virtual"
             else "s after the fleet was ready (wall)")  # fmt: skip
    return {"field": "t", "type": "quantitative", "title": title,
            "scale": {"domain": list(domain)}}  # fmt: skip


def panels(
    metrics: pd.DataFrame, x: dict[str, Any], clock: str = "wall"
) -> list[tuple[str, dict[str, Any]]]:
    """One Vega-Lite chart per (workload, key metric), all on the same time axis ``x``
    (the events are markers on the swimlanes, not rules across these)."""
    out = []
    col = "vt_s" if clock == "virtual" else "t_s"
    for (wl, name), rows in metrics.groupby(["workload", "name"], sort=False):
        series = rows.assign(series=rows["node"].fillna(wl).astype(str), t=rows[col])
        step = name == "on_gpu"
        points = {
            "data": {"values": _records(series)},
            "mark": {"type": "line", "point": True, "interpolate": "step-after"}
            if step
            else {"type": "point", "filled": True, "size": 18},
            "encoding": {
                "x": x,
                "y": {"field": "value", "type": "quantitative", "title": name},
                "color": {"field": "series", "type": "nominal", "legend": {"title": wl}},
                "tooltip": _tips(("series", "nominal"), ("t_s", "quantitative"),
                                 ("vt_s", "quantitative"), ("value", "quantitative"),
                                 ("round", "quantitative")),  # fmt: skip
            },
        }
        out.append((f"{wl}: {name}", {"height": 150, "layer": [points]}))
    return out


def summary_table(tl: dict[str, Any]) -> pd.DataFrame:
    """One row per (workload, key metric): rows, p50, p95, mean, last, rows/s (per
    emulated second under time dilation), kind."""
    tdf = float(tl.get("time_dilation") or 1.0)
    per_s = "rows/s (first to last row)" + (f", emulated (TDF {tdf:g})" if tdf != 1.0 else "")
    rows = [
        {"workload": s["workload"], "metric": s["name"], "rows": s["rows"],
         "p50": s["p50"], "p95": s["p95"], "mean": s["mean"], "last": s["last"],
         per_s: s["per_s"], "kind": s["kind"] or "not tagged",
         **({f"within {s['bound']} %": s["within_bound_pct"]} if s.get("bound") else {})}
        for s in tl["summary"]
    ]  # fmt: skip
    return pd.DataFrame(rows)


def lane_label(lane: dict[str, Any]) -> str:
    """``edge · edge-1`` (a node, by tier), ``workload · fl``, ``fleet``."""
    if lane["kind"] == "node":
        return f"{lane['group']} · {lane['lane']}"
    return lane["lane"].replace("workload ", "workload · ")


def swimlane_chart(lanes: dict[str, Any], x: dict[str, Any]) -> dict[str, Any]:
    """Vega-Lite spec of the swimlanes: a bar per interval coloured by state, a marker
    per event (faults, effects, the rest), one compact lane per node grouped by tier."""
    labels = {lane["lane"]: lane_label(lane) for lane in lanes["lanes"]}
    order = list(labels.values())
    y = {"field": "label", "type": "nominal", "title": None, "sort": order,
         "scale": {"domain": order}, "axis": {"labelLimit": 220}}  # fmt: skip
    bars = [{**i, "t": i["start_s"], "t2": i["end_s"], "label": labels[i["lane"]]}
            for i in lanes["intervals"]]  # fmt: skip
    marks = [{**m, "t": m["t_s"], "label": labels[m["lane"]],
              "category": charts.event_category(m["kind"])} for m in lanes["markers"]]  # fmt: skip
    states = [s for s in STATE_COLOURS if any(b["state"] == s for b in bars)]
    layers: list[dict[str, Any]] = [{
        "data": {"values": bars},
        "mark": {"type": "bar", "height": {"band": 0.8}},
        "encoding": {
            "x": x, "x2": {"field": "t2"}, "y": y,
            "color": {"field": "state", "type": "nominal", "legend": {"title": "state"},
                      "scale": {"domain": states,
                                "range": [STATE_COLOURS[s] for s in states]}},
            "tooltip": _tips(("label", "nominal"), ("state", "nominal"),
                             ("start_s", "quantitative"), ("end_s", "quantitative"),
                             ("detail", "nominal")),
        },
    }]  # fmt: skip
    if marks:
        layers.append({
            "data": {"values": marks},
            "mark": {"type": "point", "filled": True, "size": 36, "stroke": "#1f2328",
                     "strokeWidth": 0.5},
            "encoding": {
                "x": x, "y": y,
                "shape": {"field": "category", "type": "nominal", "legend": {"title": "event"},
                          "scale": {"domain": ["fault", "effect", "round", "lifecycle"],
                                    "range": ["diamond", "square", "circle", "triangle-up"]}},
                "fill": {"field": "category", "type": "nominal", "legend": None,
                         "scale": {"domain": ["fault", "effect", "round", "lifecycle"],
                                   "range": ["#f85149", "#f0883e", "#57606a", "#57606a"]}},
                "tooltip": _tips(("label", "nominal"), ("kind", "nominal"),
                                 ("t_s", "quantitative"), ("detail", "nominal")),
            },
        })  # fmt: skip
    return {"height": {"step": LANE_STEP_PX}, "layer": layers,
            "resolve": {"scale": {"color": "independent"}}}  # fmt: skip


def ran_table(tl: dict[str, Any]) -> pd.DataFrame:
    """One row per node: the workloads the spec placed on it and the rows it recorded
    of each (text, never empty)."""
    ran = tl.get("ran", {})
    rows = []
    for node, placed in tl["hosts"].items():
        seen = ran.get(node, {})
        rows.append({
            "node": node,
            "workloads": " + ".join(placed) or "none placed by the spec",
            "ran (rows recorded)": ", ".join(f"{w} ({n})" for w, n in seen.items())
            or "no rows recorded on this node",
        })  # fmt: skip
    return pd.DataFrame(rows)


def _clock(tl: dict[str, Any]) -> str:
    """``virtual`` for a run with a virtual clock (unless the user picks wall)."""
    if not tl.get("virtual"):
        return "wall"
    st.session_state.setdefault("timeline_clock", "virtual")
    return str(st.radio("time axis", list(CLOCKS), format_func=CLOCKS.__getitem__,
                        key="timeline_clock", horizontal=True))  # fmt: skip


def _missing_keys(tl: dict[str, Any], metrics: pd.DataFrame, events: pd.DataFrame) -> None:
    """Say which declared key metrics have no rows (a user's Flower App records its own
    series, not the testbed's ``global_acc``: where those are)."""
    declared = [m for w in tl["workloads"] for m in w["key_metrics"]]
    missing = [m for m in declared if m not in set(metrics["name"])]
    if not missing:
        return
    user_app = bool((events["kind"] == "user_app").any())
    st.caption(
        f"no rows of {', '.join(missing)} in this run"
        + (": its app (a user's Flower App) records its own metric series; the Live run"
           " page plots them by name" if user_app else "")
    )  # fmt: skip


def draw(run_id: str, running: bool) -> None:
    """The whole page body for one run (redrawn every 2 s while it runs)."""
    clock = _clock(client.timeline(run_id))

    def body() -> None:
        tl = client.timeline(run_id)
        if tl.get("cause"):  # a failed run: its first error, the node and log it came from
            st.error(f"cause: {tl['cause']}", icon=":material/error:")
        metrics, events = frames(tl)
        names = ", ".join(
            f"{w['section']} ({', '.join(w['key_metrics']) or 'no key metrics'})"
            for w in tl["workloads"]
        )
        on = "virtual clock (modelled)" if clock == "virtual" else "wall clock"
        st.caption(f"workloads: {names} · {len(events)} events · {len(metrics)} metric rows"
                   f" · times on the {on}")  # fmt: skip
        col = "vt_s" if clock == "virtual" else "t_s"
        times = pd.concat([metrics[col], events[col]]).dropna()
        domain = (min(0.0, float(times.min())), float(times.max())) if len(times) else (0, 1)
        x = axis(clock, domain)
        st.subheader("Key metrics")
        if metrics.empty:
            declared = [m for w in tl["workloads"] for m in w["key_metrics"]]
            st.info(f"No rows of the key metrics ({', '.join(declared) or 'none declared'})"
                    " recorded yet.")  # fmt: skip
        else:
            st.dataframe(summary_table(tl), hide_index=True)
            _missing_keys(tl, metrics, events)
        for title, spec in panels(metrics, x, clock):
            st.markdown(f"**{title}**")
            st.vega_lite_chart(spec, width="stretch")
        st.subheader("Swimlanes")
        lanes = tl["swimlanes"][clock]
        st.caption(f"{sum(lane['kind'] == 'node' for lane in lanes['lanes'])} node lanes"
                   " grouped by tier (states from the run's events), one lane per workload;"
                   " events are markers")  # fmt: skip
        st.vega_lite_chart(swimlane_chart(lanes, x), width="stretch")
        st.subheader("Events")
        shown = events[events["kind"] != "round_end"].rename(columns={"t_s": "wall s"})
        cols = ["wall s", "kind", "node", "workload", "detail"]
        if tl.get("virtual"):
            shown, cols = shown.rename(columns={"vt_s": "virtual s"}), ["virtual s", *cols]
        st.table(shown[cols].round({"wall s": 1, "virtual s": 1}))
        st.subheader("What each node ran")
        st.table(ran_table(tl))

    st.fragment(body, run_every=2.0 if running else None)()
