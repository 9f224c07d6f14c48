"""Sections several pages share: controller status, run picker, fleet picture."""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from ui import charts, client

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


def fleet_picture(fleet: dict[str, Any]) -> None:
    """The continuum: tiers as layers, nodes by state, labelled links; then tables."""
    st.graphviz_chart(charts.fleet_dot(fleet), width="stretch")
    legend = " ".join(
        f"<span style='background:{c};padding:1px 6px;border-radius:4px'>{s}</span>"
        for s, c in charts.NODE_COLOURS.items()
    )
    st.markdown(
        f"{legend} · links: solid ok, dashed partitioned, bold degraded",
        unsafe_allow_html=True,
    )
    nodes, links = st.tabs(["Nodes", "Links"])
    nodes.dataframe(charts.node_table(fleet), hide_index=True)
    links.dataframe(charts.link_table(fleet), hide_index=True)


def live_fleet(run_id: str, running: bool) -> None:
    """The fleet of a run, redrawn every second while the run runs."""

    def draw() -> None:
        fleet = client.fleet(run_id)
        down = [n["name"] for n in fleet["nodes"] if n["state"] != "up"]
        st.caption(
            f"round {fleet['round']} · run {fleet['run_status']}"
            + (f" · on `{fleet['backend']}`" if fleet.get("backend") else "")
            + (f" · not up: {', '.join(down)}" if down else "")
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
