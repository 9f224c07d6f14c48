"""Mean and spread over training seeds of the semantic-multiplexing metric rows.

A per-seed row is ``{"name", "value", "kind", "unit", "scheme", "num_tasks", "snr_db",
"task", "seed"}``. Rows that differ only in ``seed`` (and ``value``) form one group; its
aggregate row keeps the other fields and has ``value`` = mean over the seeds, ``std`` =
sample standard deviation (ddof = 1; ``None`` with one seed), ``num_seeds`` and
``seed = None``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

__all__ = ["GROUP_KEYS", "aggregate_rows", "combine_seed_files"]

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


def combine_seed_files(folder: str | Path) -> dict[str, Any]:
    """A ``results.json``-shaped document from the ``results_seed<N>.json`` files of a run
    folder: what a run that was stopped before its last seed leaves.

    Returns
    -------
    dict
        ``meta`` (the last seed's, with ``seeds`` = the seeds found and
        ``tasks_from_seed``), ``rows`` (aggregates) and ``seed_rows``.

    Raises
    ------
    FileNotFoundError
        If the folder holds no per-seed file.
    """
    files = sorted(Path(folder).glob("results_seed*.json"),
                   key=lambda f: int(f.stem.removeprefix("results_seed")))
    if not files:
        raise FileNotFoundError(f"{folder}: no results_seed<N>.json")
    docs = [json.loads(f.read_text()) for f in files]
    seed_rows = [r for d in docs for r in d["rows"]]
    seeds = [d["meta"]["seed"] for d in docs]
    meta = {**docs[-1]["meta"], "seeds": seeds, "tasks_from_seed": seeds[-1],
            "seed_wall_time_s": {str(s): d.get("wall_time_s") for s, d in zip(seeds, docs,
                                                                                strict=True)}}
    return {"meta": meta, "rows": aggregate_rows(seed_rows), "seed_rows": seed_rows}
