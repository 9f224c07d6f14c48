"""Compression page sections (TT-Edge runs): per eps, compression ratio, weight
reconstruction error and accuracy before / after / after fine-tuning (measured), and the
engine figures of the cost model (labelled modelled, with the device profile)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui import charts

MEASURED = ("ratio", "weight_rel_error", "acc_after", "acc_finetuned", "compress_seconds")
MODELLED = ("modelled_speedup_x", "modelled_energy_saving_pct")
ACCURACY = {"acc_after": "after TT", "acc_finetuned": "after fine-tune"}


def _per_eps(df: pd.DataFrame, names: tuple[str, ...]) -> pd.DataFrame:
    return df[df["name"].isin(names) & df["eps"].notna()]


def per_eps_table(df: pd.DataFrame) -> None:
    """One row per eps; every column says measured or modelled."""
    sel = _per_eps(df, MEASURED + MODELLED).copy()
    if sel.empty:
        st.caption("this run recorded no per-eps rows")
        return
    sel["column"] = sel["name"] + " (" + sel["kind"].fillna("?") + ")"
    table = sel.pivot_table(index="eps", columns="column", values="value", aggfunc="last")
    before = df.loc[df["name"] == "accuracy_before", "value"]
    if not before.empty:
        table.insert(0, "accuracy_before (measured)", before.iloc[-1])
    st.dataframe(table.round(4))


def accuracy(df: pd.DataFrame) -> None:
    """Test accuracy against eps: before compression, after TT, after fine-tuning."""
    sel = _per_eps(df, tuple(ACCURACY))[["eps", "name", "value"]].copy()
    if sel.empty:
        return
    sel["series"] = sel["name"].map(ACCURACY)
    before = df.loc[df["name"] == "accuracy_before", "value"]
    if not before.empty:
        eps = sorted(sel["eps"].unique())
        sel = pd.concat(
            [sel, pd.DataFrame({"eps": eps, "series": "before", "value": before.iloc[-1]})]
        )
    st.vega_lite_chart(
        sel[["eps", "series", "value"]],
        charts.xy_chart("eps", "eps (relative TT-SVD error bound)", "test accuracy (measured)"),
        width="stretch",
    )


def ratio_and_error(df: pd.DataFrame) -> None:
    """Compression ratio and weight reconstruction error against eps (log scale)."""
    sel = _per_eps(df, ("ratio", "weight_rel_error")).rename(columns={"name": "series"})
    if sel.empty:
        return
    st.vega_lite_chart(
        sel[["eps", "series", "value"]],
        charts.xy_chart(
            "eps", "eps", f"ratio / relative error ({charts.kind_label(sel)})", log_y=True
        ),
        width="stretch",
    )


def engine_modelled(df: pd.DataFrame) -> None:
    """The engine figures of the cost model against eps, labelled modelled."""
    sel = _per_eps(df, MODELLED)
    if sel.empty:
        st.caption("no modelled engine figures in this run (model_engine_cost off)")
        return
    profiles = ", ".join(sorted({str(p) for p in sel["profile"].dropna()})) or "unknown"
    st.caption(
        f"**{charts.kind_label(sel).upper()}**: cost model on profile `{profiles}`,"
        " not measured on a device"
    )
    cols = st.columns(2)
    for col, name in zip(cols, MODELLED, strict=True):
        part = sel[sel["name"] == name].rename(columns={"name": "series"})
        col.vega_lite_chart(
            part[["eps", "series", "value"]],
            charts.xy_chart("eps", "eps", charts.axis_title(part, name)),
            width="stretch",
        )
