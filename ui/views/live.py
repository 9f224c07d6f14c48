"""Live run sections: status and progress, learning curves, any metric series by name,
throughput, statuses per round and node, event timeline.

The curves refresh every 2 s and the timeline every 0.5 s while the run runs; both
fetch only the rows added since their last refresh (see ``client.live_*``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from ui import charts, client, group_charts

HEADER_EVERY_S = 1.0
CURVES_EVERY_S = 2.0
TIMELINE_EVERY_S = 0.5
#: A large fleet's failed or late (round, node) pairs listed at most.
NOT_COMPLETED_ROWS = 200
MARKS = {"fault": ":red[**fault**]", "effect": ":orange[**effect**]"}


def header(run_id: str, running: bool) -> None:
    """Status, rounds done over rounds planned, and a Stop button while it runs.

    Refreshed every second while the run runs; when it ends the whole page reruns so
    the live panels stop refreshing.
    """

    def draw() -> None:
        run = client.run(run_id)
        if running and run["status"] != "running":
            st.rerun(scope="app")
        cols = st.columns([4, 1])
        acc = run.get("final_global_acc")
        cols[0].markdown(
            f"**{run['name']}** · `{run['run_id']}` · on `{run['backend']}` · "
            f"status **{run['status']}**"
            + (f" · final global accuracy **{acc:.3f}**" if acc is not None else "")
            + (f" · {run['wall_s']:.0f} s" if run.get("wall_s") else "")
        )
        if run.get("virtual_time_s") is not None:  # --backend simulation: its own clock
            st.markdown(
                f"virtual clock **{run['virtual_time_s']:.1f} s** (modelled) after round "
                f"{run['virtual_round']} (the Timeline draws this run on its virtual clock)"
            )
        if run.get("cause"):  # a failed run: its first error, the node and log it came from
            st.error(f"cause: {run['cause']}", icon=":material/error:")
        if run["status"] == "running" and cols[1].button("Stop run", icon=":material/stop:"):
            try:
                client.stop_run(run_id)
                st.toast("stop requested: the run will be marked interrupted")
            except client.ControllerError as e:
                st.error(e.message)
        total = run.get("rounds_total")
        if total:
            done = run["rounds_done"]
            phase = "" if run["fleet_ready"] else " (fleet starting)"
            st.progress(min(done / total, 1.0), text=f"round {done}/{total}{phase}")

    st.fragment(draw, run_every=HEADER_EVERY_S if running else None)()


def _chart(where: Any, df: pd.DataFrame, y_title: str, colour: str = "series") -> None:
    if df.empty:
        where.caption("not recorded yet")
    else:
        where.vega_lite_chart(df, charts.line_chart(y_title, colour), width="stretch")


#: What the testbed's own FL app records of learning (the four charts of the Learning
#: section); a user's Flower App records its own metrics instead (*Metric series*).
LEARNING = ("global_acc", "federated_acc", "global_loss", "eval_acc", "train_loss")


def _learning(df: pd.DataFrame) -> None:
    """Accuracy and loss per round: global, federated, per silo (the testbed's FL app)."""
    left, right = st.columns(2)
    left.markdown("**Accuracy per round** — global (server test set) and federated")
    acc = charts.per_round(df[df["node"].isna()], ["global_acc", "federated_acc"])
    _chart(left, acc, "accuracy")
    right.markdown("**Loss per round** — global")
    loss = charts.per_round(df[df["node"].isna()], ["global_loss"])
    _chart(right, loss, "loss")
    left, right = st.columns(2)
    left.markdown("**Per silo** — local evaluation accuracy")
    silo = charts.per_round(df, ["eval_acc"]).dropna(subset=["node"])
    _chart(left, silo, "accuracy", "node")
    right.markdown("**Per silo** — training loss")
    tl = charts.per_round(df, ["train_loss"]).dropna(subset=["node"])
    _chart(right, tl, "loss", "node")


def _series(df: pd.DataFrame, run_id: str) -> None:
    """Any series the run recorded per round, picked by name, one line per node: the
    app's own first (a user's Flower App: its MetricRecord keys), then the testbed's."""
    names = charts.series_names(df)
    if not names:
        return
    own = charts.app_series(names)
    st.markdown("**Metric series** — per round, one line per node (server: no node)")
    theirs = [n for n in names if n not in own]
    parts = [f"by the app: {', '.join(own)}"] if own else []
    parts += [f"by the testbed: {', '.join(theirs)}"] if theirs else []
    st.caption("recorded " + " · ".join(parts))
    key = f"series-{run_id}"
    st.session_state.setdefault(key, names[0])
    name = st.selectbox("Metric series", names, key=key)
    _chart(st, charts.per_round(df, [name]), name)


def curves(run_id: str, running: bool) -> None:
    """Accuracy and loss per round (global, federated, per silo) where the testbed's
    FL app recorded them, any metric series by name, and link throughput."""

    def draw() -> None:
        df = client.live_metrics(run_id)
        if df.empty:
            st.caption("no metrics yet")
            return
        if df["name"].isin(LEARNING).any():
            _learning(df)
        else:
            st.caption(
                f"no accuracy or loss of the testbed's FL app recorded ({', '.join(LEARNING)}):"
                " a user's Flower App reports its own metrics, under *Metric series*"
            )
        _series(df, run_id)
        st.markdown(
            "**Link throughput** — the model bytes of a round that made a round trip (down"
            " + up) over its round trips, Mbit/s, per client (payload; the wire counters are"
            " on the Fleet page)"
        )
        _chart(st, charts.throughput(df), "Mbit/s")

    st.fragment(draw, run_every=CURVES_EVERY_S if running else None)()


def statuses(run_id: str, running: bool) -> None:
    """Each node's status in each round (completed, failed, late, excluded) as a grid,
    then the ones not completed with their reasons (refreshed with the curves); a fleet
    the controller sends by group: counts per round (:func:`_status_counts`)."""

    def draw() -> None:
        rows = client.round_status(run_id)
        if rows.empty:
            st.caption("no per-round statuses recorded (yet): no FL round has ended")
            return
        try:
            fleet = client.fleet(run_id)
        except client.ControllerError:  # (no plan to draw: the grid, as before)
            fleet = {}
        if fleet.get("grouped"):  # too many nodes for a grid (as the Fleet page draws it)
            _status_counts(fleet, rows)
            return
        grid = charts.status_grid(rows)
        counts = rows["status"].value_counts()
        st.caption(
            f"{len(grid)} nodes × {len(grid.columns)} rounds: "
            + ", ".join(f"{n} {status}" for status, n in counts.items())
        )
        st.dataframe(grid.style.map(charts.status_style))
        other = rows[rows["status"] != "completed"].sort_values(["round", "node"])
        if not other.empty:
            st.markdown("**Not completed** — the round, the node and why")
            st.dataframe(other[["round", "node", "status", "reason"]], hide_index=True)

    st.fragment(draw, run_every=CURVES_EVERY_S if running else None)()


def _status_counts(fleet: dict[str, Any], rows: pd.DataFrame) -> None:
    """A fleet too large for a grid (the controller sends it by group; a simulation's
    sampled clients): per round, the nodes sampled and how they ended; then the failed
    or late ones (the first :data:`NOT_COMPLETED_ROWS`)."""
    counts = group_charts.round_table(fleet)
    st.caption(
        f"{rows['node'].nunique():,} nodes have a status: counts per round, not a row per"
        " node (the Fleet page counts them per tier/profile)"
    )
    st.dataframe(counts, hide_index=True)
    bad = rows[~rows["status"].isin(["completed", "excluded"])].sort_values(["round", "node"])
    if not bad.empty:
        st.markdown(f"**Failed or late** — {len(bad):,} (round, node) pairs, and why")
        st.dataframe(bad[["round", "node", "status", "reason"]].head(NOT_COMPLETED_ROWS),
                     hide_index=True)  # fmt: skip


def timeline(run_id: str, running: bool) -> None:
    """Events over time with faults and their effects marked (a chart, refreshed with the
    curves), then a ticker of faults, effects and the latest events (every 0.5 s)."""

    def chart() -> None:
        ev = charts.event_frame(client.live_events(run_id), client.fault_schema()["details"])
        if not ev.empty:
            cols = ["id", "t_s", "kind", "node", "what", "category", "marker"]
            st.vega_lite_chart(ev[cols], charts.timeline(ev), width="stretch")

    def ticker() -> None:
        ev = charts.event_frame(client.live_events(run_id), client.fault_schema()["details"])
        if ev.empty:
            st.caption("no events yet")
            return
        marked = ev[ev["category"].isin(["fault", "effect"])]
        if not marked.empty:
            st.markdown("**Faults and effects**")
            st.markdown(
                "\n".join(
                    f"- `{r.t_s:7.2f} s` {MARKS[r.category]} {r.what}" for r in marked.itertuples()
                )
            )
        st.caption(f"{len(ev)} events · latest: {charts.latest_events(ev)}")

    st.fragment(chart, run_every=CURVES_EVERY_S if running else None)()
    st.fragment(ticker, run_every=TIMELINE_EVERY_S if running else None)()
