"""The Timeline page's parts: one chart per workload key metric over a shared time axis
with the run's events as rules across all of them, the event list, and the hosts."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from ui import charts, client

#: Events drawn as rules on the charts (the others are listed only).
MARKED = (
    "fault_injected",
    "node_down",
    "node_restarted",
    "node_rejoined",
    "link_changed",
    "link_degraded",
    "link_restored",
    "link_partitioned",
    "round_end",
)


def frames(tl: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metrics, events) of a timeline as data frames (columns even when empty)."""
    m = pd.DataFrame(tl["metrics"], columns=["t_s", "workload", "name", "node", "round", "value"])
    e = pd.DataFrame(tl["events"], columns=["t_s", "kind", "node", "round", "workload", "detail"])
    e["workload"] = e["workload"].fillna("fleet")
    e["category"] = e["kind"].map(charts.event_category)
    return m, e


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON-safe dicts (NaN -> None)."""
    return list(df.astype(object).where(df.notna(), None).to_dict("records"))


def _tips(*fields: tuple[str, str]) -> list[dict[str, str]]:
    return [{"field": f, "type": t} for f, t in fields]


def panels(
    metrics: pd.DataFrame, events: pd.DataFrame, domain: tuple[float, float]
) -> list[tuple[str, dict[str, Any]]]:
    """One Vega-Lite chart per (workload, key metric), all on the same time axis
    (``domain``, s after the fleet was ready); the marked events are rules on each."""
    x = {"field": "t_s", "type": "quantitative", "title": "s after the fleet was ready",
         "scale": {"domain": list(domain)}}  # fmt: skip
    rules = events[events["kind"].isin(MARKED)]
    out = []
    for (wl, name), rows in metrics.groupby(["workload", "name"], sort=False):
        series = rows.assign(series=rows["node"].fillna(wl).astype(str))
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
                                 ("value", "quantitative"), ("round", "quantitative")),  # fmt: skip
            },
        }
        marks = {
            "data": {"values": _records(rules)},
            "mark": {"type": "rule", "strokeDash": [4, 3], "opacity": 0.7},
            "encoding": {
                "x": x,
                "stroke": {"field": "kind", "type": "nominal", "legend": {"title": "event"}},
                "tooltip": _tips(("kind", "nominal"), ("node", "nominal"),
                                 ("t_s", "quantitative"), ("detail", "nominal")),  # fmt: skip
            },
        }
        spec = {"height": 150, "layer": [points, marks] if len(rules) else [points],
                "resolve": {"scale": {"color": "independent"}}}  # fmt: skip
        out.append((f"{wl}: {name}", spec))
    return out


def hosts_table(tl: dict[str, Any]) -> pd.DataFrame:
    """One row per node: the workloads it hosts."""
    return pd.DataFrame(
        [{"node": n, "workloads": " + ".join(w) or "-"} for n, w in tl["hosts"].items()]
    )


def draw(run_id: str, running: bool) -> None:
    """The whole page body for one run (redrawn every 2 s while it runs)."""

    def body() -> None:
        tl = client.timeline(run_id)
        metrics, events = frames(tl)
        names = ", ".join(
            f"{w['section']} ({', '.join(w['key_metrics']) or 'no key metrics'})"
            for w in tl["workloads"]
        )
        st.caption(f"workloads: {names} · {len(events)} events · {len(metrics)} metric rows")
        if metrics.empty:
            st.info("No key-metric rows yet.")
        times = pd.concat([metrics["t_s"], events["t_s"]])
        domain = (min(0.0, float(times.min())), float(times.max())) if len(times) else (0, 1)
        for title, spec in panels(metrics, events, domain):
            st.markdown(f"**{title}**")
            st.vega_lite_chart(spec, width="stretch")
        st.subheader("Events")
        shown = events[events["kind"] != "round_end"]
        st.table(shown[["t_s", "kind", "node", "workload", "detail"]].round({"t_s": 1}))
        st.subheader("Which workloads each node hosts")
        st.table(hosts_table(tl))

    st.fragment(body, run_every=2.0 if running else None)()
