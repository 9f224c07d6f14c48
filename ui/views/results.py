"""Results page sections: runs side by side, a metric overlaid, config diff, CSV."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from ui import charts, client
from ui.views.common import run_label

PREFERRED_METRICS = ("global_acc", "federated_acc", "global_loss", "eval_acc", "train_loss")


def pick_runs(runs: list[dict[str, Any]]) -> list[str]:
    """Runs to compare (default: the two newest finished runs)."""
    by_id = {r["run_id"]: r for r in runs}
    finished = [r["run_id"] for r in runs if r["status"] != "running"]
    st.session_state.setdefault("compare", finished[:2])
    st.session_state["compare"] = [r for r in st.session_state["compare"] if r in by_id]
    return st.multiselect(
        "Runs", list(by_id), key="compare", format_func=lambda r: run_label(by_id[r])
    )


def side_by_side(cmp: dict[str, Any]) -> None:
    """One column per run: status, seed, final accuracy, wall time."""
    table = pd.DataFrame(
        {
            r["run_id"]: {
                "name": r["name"],
                "status": r["status"],
                "workload": r["workload"],
                "seed": r["seed"],
                "final global acc": (  # a user's Flower App records none: not invented
                    "not recorded"
                    if r["final_global_acc"] is None
                    else round(r["final_global_acc"], 4)
                ),
                "wall s": None if r["wall_s"] is None else round(r["wall_s"], 1),
                "sweep": r["sweep_id"] or "none",
                "cause": r.get("cause") or "",
            }
            for r in cmp["runs"]
        }
    ).astype(str)
    st.table(table)


def overlay(run_ids: list[str]) -> None:
    """A metric of every chosen run per round, on one chart."""
    frames = {r: client.metrics(r) for r in run_ids}
    # the app's own series first (a user's Flower App: its MetricRecord keys)
    names = charts.series_names(pd.concat(frames.values(), ignore_index=True))
    if not names:
        st.caption("these runs recorded no per-round metrics")
        return
    default = next((m for m in PREFERRED_METRICS if m in names), names[0])
    metric = st.selectbox(
        "Metric (per round; node metrics averaged)", names, index=names.index(default)
    )
    st.vega_lite_chart(
        charts.overlay(frames, metric),
        charts.line_chart(metric, legend_bottom=True),
        width="stretch",
    )


def config_diff(cmp: dict[str, Any]) -> None:
    """Keys of the resolved specs whose values differ between the runs."""
    if not cmp["diff"]:
        st.caption(f"same configuration ({cmp['same_keys']} keys)")
        return
    ids = [r["run_id"] for r in cmp["runs"]]
    st.table(
        pd.DataFrame(
            [[d["key"], *(str(v) for v in d["values"])] for d in cmp["diff"]],
            columns=["key", *ids],
        ).set_index("key")
    )
    st.caption(f"{len(cmp['diff'])} key(s) differ, {cmp['same_keys']} are the same")


def downloads(run_ids: list[str]) -> None:
    """A CSV download (metrics, long format) per run."""
    cols = st.columns(max(1, len(run_ids)))
    for col, rid in zip(cols, run_ids, strict=False):
        col.download_button(
            f"{rid}.csv",
            client.metrics_csv(rid),
            file_name=f"{rid}-metrics.csv",
            mime="text/csv",
            icon=":material/download:",
            key=f"csv-{rid}",
        )
