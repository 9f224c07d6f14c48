"""Markdown tables from a semantic-multiplexing ``results.json`` (for docs/results).

Usage::

    python -m radio.report runs/<run-id>/results.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["results_markdown"]


def _get(rows, name, **kw):
    for r in rows:
        if r["name"] == name and all(r.get(k) == v for k, v in kw.items()):
            return r["value"]
    raise KeyError((name, kw))


def results_markdown(path: str | Path) -> str:
    """Render the accuracy, cost and ratio tables of one run as Markdown."""
    doc = json.loads(Path(path).read_text())
    rows, meta = doc["rows"], doc["meta"]
    spec = meta["spec"]
    ks, snrs = spec["num_tasks_list"], spec["snr_db_list"]
    schemes = ("semantic_mux", "orthogonal", "bit_level")
    first = meta["tasks"][0]["name"]
    out = []

    out.append(f"### Mean accuracy over the K tasks (measured) | task '{first}' in brackets\n")
    out.append("| scheme | K | " + " | ".join(f"{s:g} dB" for s in snrs) + " |")
    out.append("|---|---|" + "---|" * len(snrs))
    for k in ks:
        for sc in schemes:
            cells = [
                f"{_get(rows, 'mean_accuracy', scheme=sc, num_tasks=k, snr_db=s):.3f} "
                f"({_get(rows, 'accuracy', scheme=sc, num_tasks=k, snr_db=s, task=first):.3f})"
                for s in snrs
            ]
            out.append(f"| {sc} | {k} | " + " | ".join(cells) + " |")

    out.append("\n### Per-task accuracy at the highest SNR (measured)\n")
    k_hi, s_hi = max(ks), max(snrs)
    names = [t["name"] for t in meta["tasks"]][:k_hi]
    out.append(f"| scheme (K={k_hi}, {s_hi:g} dB) | " + " | ".join(names) + " |")
    out.append("|---|" + "---|" * len(names))
    out.append("| chance (majority class) | "
               + " | ".join(f"{t['chance_accuracy']:.3f}" for t in meta["tasks"][:k_hi]) + " |")
    for sc in schemes:
        cells = [f"{_get(rows, 'accuracy', scheme=sc, num_tasks=k_hi, snr_db=s_hi, task=n):.3f}"
                 for n in names]
        out.append(f"| {sc} | " + " | ".join(cells) + " |")

    out.append("\n### Cost per inference (all K tasks)\n")
    out.append("| scheme | K | channel uses (measured) | load [complex symbols] (measured) "
               "| airtime [us] (modelled) | compute [ms] (measured) | latency [ms] (modelled) "
               "| energy [mJ] (modelled) |")
    out.append("|---|---|---|---|---|---|---|---|")
    for k in ks:
        for sc in schemes:
            g = lambda n, sc=sc, k=k: _get(rows, n, scheme=sc, num_tasks=k, snr_db=None)  # noqa: E731
            out.append(
                f"| {sc} | {k} | {g('channel_uses'):.0f} | {g('communication_load_symbols'):.0f} "
                f"| {g('airtime_s') * 1e6:.3f} | {g('compute_latency_s') * 1e3:.2f} "
                f"| {g('latency_s') * 1e3:.2f} | {g('energy_j') * 1e3:.2f} |"
            )

    out.append("\n### Ratios baseline / semantic_mux (> 1: the multiplexer is cheaper)\n")
    keys = ("channel_uses", "load_symbols", "airtime_s", "compute_s", "latency_s", "energy_j")
    out.append("| baseline | K | " + " | ".join(keys) + " |")
    out.append("|---|---|" + "---|" * len(keys))
    for k in ks:
        for base in ("orthogonal", "bit_level"):
            cells = [f"{_get(rows, 'ratio_' + key, scheme=base, num_tasks=k):.2f}" for key in keys]
            out.append(f"| {base} | {k} | " + " | ".join(cells) + " |")

    out.append(f"\n### Drop of task '{first}' accuracy from K={min(ks)} to K={max(ks)} "
               "(semantic_mux, measured)\n")
    out.append("| " + " | ".join(f"{s:g} dB" for s in snrs) + " |")
    out.append("|" + "---|" * len(snrs))
    out.append("| " + " | ".join(
        f"{_get(rows, 'first_task_accuracy_drop', snr_db=s) * 100:.1f} pt" for s in snrs) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(results_markdown(sys.argv[1]))
