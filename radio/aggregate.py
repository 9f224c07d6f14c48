"""Mean and spread over training seeds of the semantic-multiplexing metric rows.

A per-seed row is ``{"name", "value", "kind", "unit", "scheme", "num_tasks", "snr_db",
"task", "seed"}``. Rows that differ only in ``seed`` (and ``value``) form one group; its
aggregate row keeps the other fields and has ``value`` = mean over the seeds, ``std`` =
sample standard deviation (ddof = 1; ``None`` with one seed), ``num_seeds`` and
``seed = None``.
"""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["GROUP_KEYS", "aggregate_rows"]

#: The fields that identify one quantity across seeds.
GROUP_KEYS: tuple[str, ...] = ("name", "scheme", "num_tasks", "snr_db", "task")


def aggregate_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Aggregate per-seed rows into one row per quantity, in first-seen order.

    Parameters
    ----------
    rows : list of dict
        Per-seed metric rows (each with a ``seed``).

    Returns
    -------
    list of dict
        One row per quantity: mean ``value``, ``std`` (None for a single seed),
        ``num_seeds`` and ``seed = None``.
    """
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in GROUP_KEYS), []).append(r)
    out = []
    for members in groups.values():
        values = [float(m["value"]) for m in members]
        std = statistics.stdev(values) if len(values) > 1 else None
        out.append({**members[0], "value": statistics.fmean(values), "seed": None,
                    "std": std, "num_seeds": len(values)})
    return out
