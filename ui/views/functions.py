"""Functions page sections (serverless functions runs, Gaia): the per-function outcome from
the run summary, end-to-end latency over time coloured by the backend that served each
request (the mode timeline), the dynamic runtime's decisions, and why each function got
its execution mode and node.

Every latency is network time measured through the emulated link plus the server's device
time, whose ``timing`` tag says how it was obtained: ``stretched`` (a device slower than
this host, waited for: measured wall time), ``modelled`` (a faster CPU or an emulated GPU,
on a virtual clock) or ``measured`` (a real CUDA GPU). Tables and axes carry those labels.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from ui import client

BACKEND_COLOURS = {"cpu": "#0969da", "gpu-emulated": "#f0883e", "gpu-cuda": "#3fb950"}
SLO_COLOUR = "#f85149"
TIMING_NOTE = (
    "Latency = network (measured through the emulated link) + server device time, labelled"
    " per request: `stretched` (a device slower than this host, waited for: measured wall"
    " time), `modelled` (a faster CPU or an emulated GPU: virtual clock), `measured` (real"
    " CUDA)."
)


def function_metrics(run_id: str) -> pd.DataFrame:
    """A run's metric rows with their tags; ``function`` is the row's ``node`` column.

    The functions workload records each row under its function's name (``node``) and the
    node that served it as the ``site`` tag.
    """
    df = client.tagged_metrics(run_id)
    df["function"] = df["node"] if "node" in df else pd.Series(dtype=object)
    return df


def _timing(df: pd.DataFrame, function: str | None = None) -> str:
    """``modelled + stretched``: the ``timing`` tags of a function's ``e2e_ms`` rows."""
    rows = df[df["name"] == "e2e_ms"]
    if function is not None:
        rows = rows[rows["function"] == function]
    kinds = sorted({str(t) for t in rows.get("timing", pd.Series(dtype=object)).dropna()})
    return " + ".join(kinds) if kinds else "not recorded"


def _num(value: Any, digits: int = 1) -> float | None:
    return None if value is None else round(float(value), digits)


def function_table(summary: dict[str, Any], df: pd.DataFrame) -> pd.DataFrame:
    """One row per function of the run summary, columns labelled with how they were got.

    Parameters
    ----------
    summary : dict
        The run's summary (``functions``: per-function outcome).
    df : pandas.DataFrame
        The run's rows from :func:`function_metrics` (for the latency ``timing`` tags).

    Returns
    -------
    pandas.DataFrame
        Indexed by function: node / tier, mode, backend start -> end, requests, p50 and p95
        ms, SLO ms, SLO miss %, GPU-seconds, switches, latency timing.
    """
    rows = []
    for name, f in (summary.get("functions") or {}).items():
        rows.append(
            {
                "function": name,
                "node / tier": f"{f.get('node')} / {f.get('tier')}",
                "mode": f.get("mode"),
                "backend start → end": f"{f.get('start_backend')} → {f.get('end_backend')}",
                "requests": f.get("requests"),
                "p50 ms": _num(f.get("p50_ms")),
                "p95 ms": _num(f.get("p95_ms")),
                "SLO ms": f.get("slo_ms"),
                "SLO miss %": _num(f.get("slo_violation_pct")),
                "GPU-s (wall, measured)": _num(f.get("gpu_seconds")),
                "switches": f.get("switches"),
                "latency timing": _timing(df, name),
            }
        )
    return pd.DataFrame(rows).set_index("function") if rows else pd.DataFrame()


def gpu_caption(summary: dict[str, Any]) -> str:
    """``GPU backends: emulated (modelled from profile) · policy gaia · host ...``."""
    parts = [f"GPU backends: {summary.get('gpu_timing') or 'none used in this run'}"]
    if summary.get("policy"):
        parts.append(f"placement policy `{summary['policy']}`")
    if summary.get("host_gflops"):
        parts.append(
            f"host {summary['host_gflops']:.0f} GFLOPS (measured, single-thread FP32 matmul)"
        )
    return " · ".join(parts)


def per_function(summary: dict[str, Any], df: pd.DataFrame) -> None:
    """The per-function table, with the GPU timing label and what the latencies are."""
    table = function_table(summary, df)
    if table.empty:
        st.caption("no summary yet: the per-function table is written when the run finishes")
        return
    st.caption(gpu_caption(summary))
    st.dataframe(table)
    st.caption(
        TIMING_NOTE + " p50 / p95 / SLO miss are over the end-to-end latencies; GPU-seconds"
        " are the wall seconds a GPU backend existed (cold start included)."
    )


def latency_spec(slo_ms: float | None, switches: list[dict[str, Any]], y_title: str) -> dict:
    """Vega-Lite spec: e2e latency per request against time, coloured by backend, with the
    SLO as a dashed red line and the applied switches as grey rules.

    Parameters
    ----------
    slo_ms : float or None
        The function's SLO (no line when None).
    switches : list of dict
        Applied decisions: ``t_s`` and ``what`` (``old → new``).
    y_title : str
        The latency axis title (with its timing label).

    Returns
    -------
    dict
        The spec (data: rows with ``t_s``, ``value``, ``backend``, ``timing``).
    """
    points = {
        "mark": {"type": "point", "filled": True, "size": 28, "opacity": 0.7},
        "encoding": {
            "x": {"field": "t_s", "type": "quantitative", "title": "seconds into the load"},
            "y": {
                "field": "value",
                "type": "quantitative",
                "title": y_title,
                "scale": {"type": "log"},
            },
            "color": {
                "field": "backend",
                "type": "nominal",
                "title": "backend",
                "scale": {
                    "domain": list(BACKEND_COLOURS),
                    "range": list(BACKEND_COLOURS.values()),
                },
            },
            "tooltip": [
                {"field": "t_s", "type": "quantitative", "format": ".1f"},
                {"field": "value", "type": "quantitative", "format": ".1f", "title": "e2e ms"},
                {"field": "backend", "type": "nominal"},
                {"field": "timing", "type": "nominal"},
            ],
        },
    }
    layers: list[dict[str, Any]] = [points]
    if slo_ms is not None:
        layers.append(
            {
                "data": {"values": [{"slo_ms": slo_ms}]},
                "mark": {"type": "rule", "color": SLO_COLOUR, "strokeDash": [6, 4]},
                "encoding": {"y": {"field": "slo_ms", "type": "quantitative"}},
            }
        )
    if switches:
        layers.append(
            {
                "data": {"values": switches},
                "mark": {"type": "rule", "color": "#8c959f"},
                "encoding": {
                    "x": {"field": "t_s", "type": "quantitative"},
                    "tooltip": [{"field": "what", "type": "nominal", "title": "switch"}],
                },
            }
        )
    return {"layer": layers, "height": 240}


def latency_timeline(summary: dict[str, Any], df: pd.DataFrame) -> None:
    """Per function: e2e latency over time coloured by backend (two charts per row)."""
    e2e = df[df["name"] == "e2e_ms"]
    if e2e.empty:
        st.caption("this run recorded no e2e_ms rows (yet)")
        return
    decided = decisions_frame(df)
    fns = summary.get("functions") or {}
    names = list(fns) + sorted(set(e2e["function"].dropna()) - set(fns))
    cols = st.columns(2)
    for i, name in enumerate(names):
        rows = e2e[e2e["function"] == name]
        if rows.empty:
            continue
        data = rows.assign(t_s=pd.to_numeric(rows["t_s"], errors="coerce"))
        data = data[["t_s", "value", "backend", "timing"]]
        applied = decided[(decided["function"] == name) & decided["applied"]]
        switches = [
            {"t_s": t, "what": w}
            for t, w in zip(applied["t (s)"], applied["old → new"], strict=True)
        ]
        slo = (fns.get(name) or {}).get("slo_ms")
        with cols[i % 2]:
            st.markdown(f"**{name}**" + (f" · SLO {slo:g} ms" if slo is not None else ""))
            st.vega_lite_chart(
                data, latency_spec(slo, switches, f"e2e ms ({_timing(df, name)})"), width="stretch"
            )
    st.caption(
        "Each point is a request (its scheduled time); colour: the backend that served it;"
        " dashed red: the SLO; grey rules: mode switches the runtime applied. " + TIMING_NOTE
    )


def decisions_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The runtime's ``mode_decision`` rows as a table, in time order.

    Parameters
    ----------
    df : pandas.DataFrame
        The run's rows from :func:`function_metrics`.

    Returns
    -------
    pandas.DataFrame
        Columns ``t (s)``, ``function``, ``old → new``, ``applied`` (bool), ``outcome``
        (applied / blocked), ``reason``, ``p95 ms``, ``rate rps``.
    """
    cols = ["t (s)", "function", "old → new", "applied", "outcome", "reason", "p95 ms", "rate rps"]
    rows = df[df["name"] == "mode_decision"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    out = pd.DataFrame(
        {
            "t (s)": pd.to_numeric(rows["t_s"], errors="coerce").round(1),
            "function": rows["function"],
            "old → new": rows["old"].astype(str) + " → " + rows["new"].astype(str),
            "applied": rows["value"] >= 0.5,
            "reason": rows["reason"],
            "p95 ms": pd.to_numeric(rows["p95_ms"], errors="coerce").round(1),
            "rate rps": pd.to_numeric(rows["rate_rps"], errors="coerce").round(2),
        }
    )
    out["outcome"] = out["applied"].map({True: "applied", False: "blocked"})
    return out[cols].sort_values("t (s)", kind="stable").reset_index(drop=True)


def decisions(df: pd.DataFrame) -> None:
    """The table of the runtime's decisions (time, function, old -> new, outcome, reason)."""
    table = decisions_frame(df)
    if table.empty:
        st.caption("the dynamic runtime made no decisions in this run (static policy, or none)")
        return
    n_applied = int(table["applied"].sum())
    st.caption(
        f"{n_applied} applied, {len(table) - n_applied} blocked (no GPU slot free) · p95 is the"
        " latency the runtime judged (server-side for `gaia`, end-to-end for `link-aware`)"
    )
    st.dataframe(table.drop(columns="applied"), hide_index=True)


def reasons(summary: dict[str, Any], df: pd.DataFrame) -> None:
    """Per function: the mode the identifier found and why, the mode used, and why the
    placement put it where it is."""
    ident = df[df["name"] == "identified_mode"]
    fns = summary.get("functions") or {}
    names = list(fns) + sorted(set(ident["function"].dropna()) - set(fns))
    if not names:
        st.caption("no identifier rows in this run")
        return
    for name in names:
        rows = ident[ident["function"] == name]
        row = rows.iloc[-1] if not rows.empty else None
        f = fns.get(name) or {}
        found = row["mode"] if row is not None else None
        used = (row["used"] if row is not None else None) or f.get("mode")
        why = f.get("mode_reasons") or (row["reasons"] if row is not None else None)
        head = f"**{name}**: identified `{found or '?'}`, used `{used or '?'}`"
        lines = [head] + [f"- {r}" for r in (why if isinstance(why, list) else [])]
        if f.get("placement"):
            lines.append(f"- placement: {f['placement']}")
        st.markdown("\n".join(lines))
