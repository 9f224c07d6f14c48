"""Sections several pages share: controller status, run picker, fleet picture."""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from ui import charts, client, group_charts

STATUS_ICONS = {
    "running": ":material/play_circle:",
    "completed": ":material/check_circle:",
    "failed": ":material/error:",
    "interrupted": ":material/stop_circle:",
}


def controller_status() -> None:
    """Sidebar line: which controller the dashboard talks to, and whether it answers."""
    with st.sidebar:
        try:
            h = client.health()
            st.caption(f"controller {client.base_url()} · store `{h['store']}`")
        except client.ControllerError as e:
            st.error(e.message)
            st.stop()


def run_label(run: dict[str, Any]) -> str:
    """``name · status · when · run id`` for pickers."""
    when = time.strftime("%H:%M:%S", time.localtime(run["created_at"]))
    return f"{run['name']} · {run['status']} · {when} · {run['run_id']}"


def pick_run(
    runs: list[dict[str, Any]], label: str = "Run", key: str = "run_id", prefer_running: bool = True
) -> str | None:
    """A run picker remembered across pages (session state ``key``); ``None`` if no runs.

    Without a remembered choice it picks the newest running run (``prefer_running``),
    else the newest run.
    """
    if not runs:
        return None
    ids = [r["run_id"] for r in runs]
    by_id = {r["run_id"]: r for r in runs}
    chosen = st.session_state.setdefault(key, None)
    if chosen not in by_id:
        running = [r for r in runs if r["status"] == "running"]
        chosen = (running[0] if running and prefer_running else runs[0])["run_id"]
    # keyed: the widget keeps its identity when ``index`` changes (an unkeyed one would be
    # rebuilt at the remembered run and drop every second pick)
    picked = st.selectbox(
        label,
        ids,
        index=ids.index(chosen),
        format_func=lambda r: run_label(by_id[r]),
        key=f"{key}__picker",
    )
    st.session_state[key] = picked
    return picked


def _legend(links: str = "links: solid ok, dashed partitioned, bold degraded") -> None:
    legend = " ".join(
        f"<span style='background:{c};padding:1px 6px;border-radius:4px'>{s}</span>"
        for s, c in charts.NODE_COLOURS.items()
    )
    st.markdown(f"{legend} · {links}", unsafe_allow_html=True)


def fleet_picture(fleet: dict[str, Any]) -> None:
    """The continuum: tiers as layers, nodes by state, labelled links; then tables (a
    large fleet: by group, :func:`grouped_picture`)."""
    if fleet.get("grouped"):
        grouped_picture(fleet)
        return
    st.graphviz_chart(charts.fleet_dot(fleet), width="stretch")
    _legend()
    nodes, links = st.tabs(["Nodes", "Links"])
    nodes.dataframe(charts.node_table(fleet), hide_index=True)
    links.dataframe(charts.link_table(fleet), hide_index=True)


def grouped_picture(fleet: dict[str, Any]) -> None:
    """A large fleet: a box per tier/profile group with its nodes counted per state,
    a row per group, the nodes sampled per round, and, in an expander, only the nodes
    that failed or were faulted."""
    st.caption(
        f"{fleet['node_count']:,} nodes in {len(fleet['groups'])} groups by tier/profile"
        f" (over {fleet['grouped_above']} nodes: counts per state, not a box per node)"
    )
    st.graphviz_chart(group_charts.group_dot(fleet), width="stretch")
    _legend("fill: the state most of a group's nodes are in; red outline: some are down,"
            " straggling or misconfigured; link: the one most of the group has")  # fmt: skip
    st.dataframe(group_charts.group_table(fleet), hide_index=True)
    rounds = group_charts.round_table(fleet)
    if not rounds.empty:
        st.markdown("**Sampled nodes per round** — counts, not a row per node")
        st.dataframe(rounds, hide_index=True)
    listed = len(fleet["nodes"]) + fleet.get("listed_more", 0)
    with st.expander(f"Nodes that failed or were faulted: {listed:,}"):
        if not listed:
            st.caption("none: no node was faulted, went down or failed a round")
            return
        st.dataframe(group_charts.listed_table(fleet), hide_index=True)
        if fleet["links"]:
            st.dataframe(charts.link_table(fleet), hide_index=True)
        if fleet.get("listed_more"):
            st.caption(f"... and {fleet['listed_more']:,} more not listed")


def not_up(fleet: dict[str, Any]) -> str:
    """`` · not up: edge-2`` (a large fleet: the count per state), or nothing."""
    if fleet.get("grouped"):
        counts: dict[str, int] = {}
        for g in fleet["groups"]:
            for s, k in g["states"].items():
                if s != "up":
                    counts[s] = counts.get(s, 0) + k
        return f" · not up: {group_charts.states_text(counts, ', ')}" if counts else ""
    down = [n["name"] for n in fleet["nodes"] if n["state"] != "up"]
    return f" · not up: {', '.join(down)}" if down else ""


def live_fleet(run_id: str, running: bool) -> None:
    """The fleet of a run, redrawn every second while the run runs."""

    def draw() -> None:
        fleet = client.fleet(run_id)
        st.caption(
            f"round {fleet['round']} · run {fleet['run_status']}"
            + (f" · on `{fleet['backend']}`" if fleet.get("backend") else "")
            + not_up(fleet)
        )
        fleet_picture(fleet)

    st.fragment(draw, run_every=1.0 if running else None)()


def wait_for_runs(message: str) -> None:
    """Say there is nothing to show yet, and rerun the page once a run appears."""
    st.info(message)

    @st.fragment(run_every=2.0)
    def poll() -> None:
        client.runs.clear()
        if client.runs():
            st.rerun(scope="app")

    poll()
    st.stop()


def runs_of(workload: str) -> list[dict[str, Any]]:
    """Runs with a workload of one kind (``fl``, ``semantic_mux``, ``compress``,
    ``functions``; a run of several workloads counts for each), newest first."""
    return [r for r in client.runs() if workload in (r.get("workloads") or [r["workload"]])]


def plots(run_id: str) -> None:
    """The PNG plots the run wrote into its folder, two per row."""
    names = [n for n in client.artifacts(run_id) if n.endswith(".png")]
    if not names:
        st.caption("this run wrote no plots (yet)")
        return
    cols = st.columns(2)
    for i, name in enumerate(names):
        cols[i % 2].image(client.artifact(run_id, name), caption=name)
