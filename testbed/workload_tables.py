"""Terminal tables of the non-FL workloads' run summaries (semantic offload, LLM
pipeline, TT-Edge compression, semantic multiplexing).

Each function takes one workload's summary (the dict its ``run`` returned, as stored in
the run's summary) and returns a table, or None when the summary is not of its workload.
:func:`testbed.console.print_summary` draws them after a run and for ``testbed show``;
every figure is one the summary holds (nothing is recomputed here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.table import Table

__all__ = [
    "SHOWN",
    "compress_table",
    "llm_table",
    "mux_table",
    "offload_table",
    "workload_tables",
]

#: Scalar summary keys these tables show (not repeated as ``key: value`` lines).
SHOWN = frozenset(
    {"throughput_rps", "completed", "failed_attempts", "requests_lost"}
    | {f"{kind}_{k}" for kind in ("short", "long") for k in ("n", "p50_ms", "p95_ms")}
)


def _n(v: Any, fmt: str = ".3f", scale: float = 1.0) -> str:
    """A number as text (``-`` when missing)."""
    return "-" if v is None else format(float(v) * scale, fmt)


def offload_table(s: dict[str, Any]) -> Table | None:
    """Semantic offload (``schemes`` in the summary): per scheme the answers, accuracy
    per task measured on the fleet, median end-to-end and link time, and bytes up."""
    schemes = s.get("schemes")
    if not isinstance(schemes, dict):
        return None
    snr = s.get("snr_db")
    title = f"semantic offload, SNR {_n(snr, '.1f')} dB ({s.get('snr_source', '?')})"
    t = Table(title=title)
    for col in ("scheme", "answers", "accuracy (measured)", "e2e ms", "link ms", "bytes up"):
        t.add_column(col, justify="right")
    for name, sc in schemes.items():
        acc = sc.get("accuracy") or {}
        t.add_row(
            name,
            str(sc.get("answers", "-")),
            ", ".join(f"{task} {v:.3f}" for task, v in acc.items()) or "-",
            _n(sc.get("e2e_s"), ".1f", 1e3),
            _n(sc.get("link_s"), ".1f", 1e3),
            _n(sc.get("bytes_up"), ".0f"),
        )
    return t


def llm_table(s: dict[str, Any]) -> Table | None:
    """LLM pipeline (``throughput_rps`` in the summary): throughput, completed requests,
    failed attempts, lost requests and p50/p95 latency per request kind."""
    if "throughput_rps" not in s:
        return None
    t = Table(title=f"LLM pipeline, policy {s.get('policy')}")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_row("throughput req/s", _n(s["throughput_rps"], ".2f"))
    for key in ("completed", "failed_attempts", "requests_lost"):
        t.add_row(key.replace("_", " "), str(s.get(key, "-")))
    for kind in ("short", "long"):
        if f"{kind}_n" in s:
            n = s[f"{kind}_n"]
            t.add_row(f"{kind} p50 ms (n={n})", _n(s.get(f"{kind}_p50_ms"), ".1f"))
            t.add_row(f"{kind} p95 ms (n={n})", _n(s.get(f"{kind}_p95_ms"), ".1f"))
    return t


def compress_table(s: dict[str, Any]) -> Table | None:
    """TT-Edge compression (``per_eps`` in the summary): per tolerance the compression
    ratio, accuracy before, after and fine-tuned (measured) and the modelled speed-up."""
    rows = s.get("per_eps")
    if not isinstance(rows, list):
        return None
    t = Table(title=f"TT-Edge compression, {s.get('model')} on {s.get('dataset')}")
    cols = ("eps", "ratio", "acc before", "acc after", "acc tuned", "compress s")
    for col in (*cols, "speed-up x (modelled)"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            _n(r.get("eps"), "g"),
            _n(r.get("ratio"), ".2f"),
            _n(r.get("acc_before")),
            _n(r.get("acc_after")),
            _n(r.get("acc_finetuned")),
            _n(r.get("compress_seconds"), ".2f"),
            _n(r.get("modelled_speedup_x"), ".2f"),
        )
    return t


def mux_table(s: dict[str, Any]) -> Table | None:
    """Semantic multiplexing (``ratios`` in the summary): each headline ratio (baseline
    over semantic mux, mean over seeds) and the first task's accuracy drop per SNR."""
    ratios = s.get("ratios")
    if not isinstance(ratios, dict):
        return None
    t = Table(title=f"semantic multiplexing, seeds {s.get('seeds')} (baseline / semantic mux)")
    t.add_column("figure")
    t.add_column("value", justify="right")
    for name, v in ratios.items():
        t.add_row(f"ratio {name}", _n(v, ".2f"))
    for snr, v in (s.get("first_task_accuracy_drop") or {}).items():
        t.add_row(f"first task accuracy drop, SNR {snr} dB", _n(v))
    return t


#: Every table, in the order drawn.
TABLES: tuple[Callable[[dict[str, Any]], Table | None], ...] = (
    offload_table,
    llm_table,
    compress_table,
    mux_table,
)


def workload_tables(s: dict[str, Any]) -> list[Table]:
    """The tables of the workloads whose summary ``s`` is."""
    return [t for table in TABLES if (t := table(s)) is not None]
