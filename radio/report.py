"""Markdown tables from a semantic-multiplexing ``results.json`` (for docs/results).

Every cell is the mean over the run's training seeds followed by ``± sample std`` (no
spread is printed for a single seed). Usage::

    python -m radio.report runs/<run-id>/results.json
    python -m radio.report runs/<run-id>/   # a run stopped early: its results_seed<N>.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from radio.aggregate import combine_seed_files

__all__ = ["results_markdown"]

Row = dict[str, Any]


def _row(rows: list[Row], name: str, **kw: Any) -> Row:
    for r in rows:
        if r["name"] == name and all(r.get(k) == v for k, v in kw.items()):
            return r
    raise KeyError((name, kw))


def _cell(r: Row, fmt: str = ".3f", scale: float = 1.0) -> str:
    """``mean ± std`` of an aggregate row (mean only without a spread)."""
    text = f"{r['value'] * scale:{fmt}}"
    if r.get("std") is not None and not (fmt == ".0f" and r["std"] == 0):  # counts: no "± 0"
        text += f" ± {r['std'] * scale:{fmt}}"
    return text


def _header(cols: list[str]) -> list[str]:
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]


def _accuracy(rows: list[Row], schemes: list[str], ks: list[int], snrs: list[float],
              task: str | None) -> list[str]:
    name = "mean_accuracy" if task is None else "accuracy"
    out = _header(["scheme", "K", *(f"{s:g} dB" for s in snrs)])
    for k in ks:
        for sc in schemes:
            cells = [_cell(_row(rows, name, scheme=sc, num_tasks=k, snr_db=s, task=task))
                     for s in snrs]
            out.append(f"| {sc} | {k} | " + " | ".join(cells) + " |")
    return out


def _per_task(rows: list[Row], schemes: list[str], tasks: list[Row], k: int,
              snr: float, seed: int) -> list[str]:
    names = [t["name"] for t in tasks][:k]
    out = _header([f"scheme (K={k}, {snr:g} dB)", *names])
    out.append(f"| chance (majority class, seed {seed}'s test split) | "
               + " | ".join(f"{t['chance_accuracy']:.3f}" for t in tasks[:k]) + " |")
    for sc in schemes:
        cells = [_cell(_row(rows, "accuracy", scheme=sc, num_tasks=k, snr_db=snr, task=n))
                 for n in names]
        out.append(f"| {sc} | " + " | ".join(cells) + " |")
    return out


_COST = (  # (row name, column title, format, scale)
    ("channel_uses", "channel uses (measured)", ".0f", 1.0),
    ("communication_load_symbols", "load [complex symbols] (measured)", ".0f", 1.0),
    ("num_parameters", "parameters (measured)", ".0f", 1.0),
    ("airtime_s", "airtime [us] (modelled)", ".2f", 1e6),
    ("compute_latency_s", "compute [ms] (measured)", ".2f", 1e3),
    ("latency_s", "latency [ms] (modelled)", ".2f", 1e3),
    ("energy_j", "energy [mJ] (modelled)", ".2f", 1e3),
)


def _cost(rows: list[Row], schemes: list[str], ks: list[int]) -> list[str]:
    out = _header(["scheme", "K", *(c[1] for c in _COST)])
    for k in ks:
        for sc in schemes:
            cells = [_cell(_row(rows, n, scheme=sc, num_tasks=k, snr_db=None), f, m)
                     for n, _, f, m in _COST]
            out.append(f"| {sc} | {k} | " + " | ".join(cells) + " |")
    return out


def _ratios(rows: list[Row], schemes: list[str], ks: list[int]) -> list[str]:
    keys = ("channel_uses", "load_symbols", "airtime_s", "compute_s", "latency_s", "energy_j")
    out = _header(["baseline", "K", *keys])
    for k in ks:
        for base in (sc for sc in schemes if sc != "semantic_mux"):
            cells = [_cell(_row(rows, "ratio_" + key, scheme=base, num_tasks=k), ".2f")
                     for key in keys]
            out.append(f"| {base} | {k} | " + " | ".join(cells) + " |")
    return out


def results_markdown(path: str | Path) -> str:
    """Render the accuracy, cost and ratio tables of one run as Markdown.

    ``path`` is a ``results.json`` or a run folder; a folder without ``results.json`` (a
    run stopped before its last seed) is read from its ``results_seed<N>.json`` files.
    """
    path = Path(path)
    if path.is_dir() and not (path / "results.json").exists():
        doc = combine_seed_files(path)
    else:
        doc = json.loads((path / "results.json" if path.is_dir() else path).read_text())
    rows, meta = doc["rows"], doc["meta"]
    spec = meta["spec"]
    ks, snrs = spec["num_tasks_list"], spec["snr_db_list"]
    schemes = list(spec.get("schemes") or ("semantic_mux", "orthogonal", "bit_level"))
    seeds = meta.get("seeds", [meta["seed"]])
    first = meta["tasks"][0]["name"]
    spread = (f"mean ± sample std over {len(seeds)} training seeds {seeds}" if len(seeds) > 1
              else f"one training seed {seeds}, no spread")
    out = [f"### Mean accuracy over the K tasks (measured; {spread})\n",
           *_accuracy(rows, schemes, ks, snrs, None),
           f"\n### Accuracy of task '{first}' (measured; {spread})\n",
           *_accuracy(rows, schemes, ks, snrs, first),
           f"\n### Per-task accuracy at the highest SNR (measured; {spread})\n",
           *_per_task(rows, schemes, meta["tasks"], max(ks), max(snrs),
                     meta.get("tasks_from_seed", meta["seed"])),
           f"\n### Cost per inference, all K tasks ({spread})\n",
           *_cost(rows, schemes, ks),
           f"\n### Ratios baseline / semantic_mux (> 1: the multiplexer is cheaper; {spread})\n",
           *_ratios(rows, schemes, ks),
           f"\n### Drop of task '{first}' accuracy from K={min(ks)} to K={max(ks)} "
           f"(semantic_mux, measured, points; {spread})\n",
           *_header([f"{s:g} dB" for s in snrs]),
           "| " + " | ".join(_cell(_row(rows, "first_task_accuracy_drop", snr_db=s), ".1f", 100)
                            for s in snrs) + " |"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(results_markdown(sys.argv[1]))
