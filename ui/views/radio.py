"""Radio page sections (semantic multiplexing runs): accuracy against the number of tasks
K and against SNR per scheme, communication load and latency against K. Every axis says
whether its rows are measured or modelled, as their ``kind`` tags say."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui import charts

LOAD_LATENCY = ("communication_load_symbols", "latency_s", "airtime_s", "energy_j")


def _pick(label: str, values: pd.Series, key: str) -> float:
    """A value of a tag to fix (default: the largest)."""
    options = sorted(values.dropna().unique().tolist())
    return st.selectbox(label, options, index=len(options) - 1, key=key, format_func="{:g}".format)


def accuracy_vs_k(df: pd.DataFrame) -> None:
    """Mean accuracy over the K tasks per scheme, against K, at one SNR."""
    acc = df[df["name"] == "mean_accuracy"]
    if acc.empty:
        st.caption("this run recorded no mean_accuracy rows")
        return
    snr = _pick("SNR (dB)", acc["snr_db"], key="radio-snr")
    sel = acc[acc["snr_db"] == snr]
    st.vega_lite_chart(
        sel[["num_tasks", "scheme", "value"]],
        charts.xy_chart(
            "num_tasks", "K (tasks)", charts.axis_title(sel, "mean accuracy"), "scheme"
        ),
        width="stretch",
    )


def accuracy_vs_snr(df: pd.DataFrame) -> None:
    """Mean accuracy per scheme against SNR, for one K."""
    acc = df[df["name"] == "mean_accuracy"]
    if acc.empty:
        return
    k = _pick("K (tasks)", acc["num_tasks"], key="radio-k")
    sel = acc[acc["num_tasks"] == k]
    st.vega_lite_chart(
        sel[["snr_db", "scheme", "value"]],
        charts.xy_chart("snr_db", "SNR (dB)", charts.axis_title(sel, "mean accuracy"), "scheme"),
        width="stretch",
    )


def load_latency_vs_k(df: pd.DataFrame) -> None:
    """Load, latency, airtime and energy per scheme against K (two charts per row)."""
    names = [n for n in LOAD_LATENCY if n in set(df["name"])]
    if not names:
        st.caption("this run recorded no load or latency rows")
        return
    cols = st.columns(2)
    for i, name in enumerate(names):
        sel = df[df["name"] == name]
        cols[i % 2].vega_lite_chart(
            sel[["num_tasks", "scheme", "value"]],
            charts.xy_chart(
                "num_tasks", "K (tasks)", charts.axis_title(sel, name), "scheme", log_y=True
            ),
            width="stretch",
        )


def ratios(df: pd.DataFrame) -> None:
    """Baseline / semantic_mux ratios per K (> 1: the mux is better), kind per metric."""
    sel = df[df["name"].str.startswith("ratio_")].copy()
    if sel.empty:
        return
    sel["metric"] = sel["name"].str.removeprefix("ratio_") + " (" + sel["kind"].fillna("?") + ")"
    table = sel.pivot_table(
        index=["num_tasks", "scheme"], columns="metric", values="value", aggfunc="last"
    )
    table.index = table.index.set_names(["K", "baseline"])
    st.dataframe(table.round(3))
