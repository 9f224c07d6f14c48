"""The wall clock of a bench/diloco.py run: per round, and to a target accuracy.

All from the run store (measured), in seconds after the server sent round 1's models.
A result is bench/diloco.py's per-run dict (``global_acc``, ``round_clock``,
``not_completed``, ``rounds``, ``edge_mbps``, ``edge_latency_ms``).
"""

from __future__ import annotations

from typing import Any

from testbed.rows import EventRow, MetricRow

Result = dict[str, Any]


def first_round(global_acc: dict[str, float | None], target: float) -> int | None:
    """The first round (``global_acc`` keyed by round as text) with accuracy >= target."""
    for rnd, acc in sorted((int(k), v) for k, v in global_acc.items()):
        if acc is not None and acc >= target:
            return rnd
    return None


def round_clock(events: list[EventRow], metrics: list[MetricRow]) -> dict[str, dict[str, float]]:
    """Per round: when it started and ended and when its global accuracy was recorded.

    Seconds after round 1's ``round_start`` event (the server sending round 1's models;
    the fleet's start-up and the initial evaluation come before it). ``start_s`` and
    ``end_s`` are the server's ``round_start`` (models sent) and ``round_end`` (replies
    aggregated) events, ``acc_s`` the ``global_acc`` metric (the aggregate evaluated on
    the server's test set). A round missing an event lacks that key; no round 1 start:
    an empty clock.
    """
    t0 = next((e.ts for e in events if e.kind == "round_start" and e.round == 1), None)
    if t0 is None:
        return {}
    out: dict[str, dict[str, float]] = {}
    for e in events:
        key = {"round_start": "start_s", "round_end": "end_s"}.get(e.kind)
        if key and e.round is not None and e.round >= 1:
            out.setdefault(str(e.round), {})[key] = round(e.ts - t0, 3)
    for m in metrics:
        if m.name == "global_acc" and m.round is not None and m.round >= 1:
            out.setdefault(str(m.round), {})["acc_s"] = round(m.ts - t0, 3)
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def time_to(r: Result, target: float) -> tuple[int, float] | None:
    """First round whose global accuracy >= target, and the wall seconds from round 1's
    start to that round's end (measured, :func:`round_clock`). None: not reached, or the
    run has no clock for that round (results recorded before the clock was)."""
    rnd = first_round(r["global_acc"], target)
    if rnd is None:
        return None
    if rnd == 0:
        return 0, 0.0
    end = (r.get("round_clock") or {}).get(str(rnd), {}).get("end_s")
    return None if end is None else (rnd, float(end))


def round_seconds(r: Result) -> dict[int, float]:
    """Per round, the wall seconds from its models being sent to its replies aggregated
    (``end_s - start_s``; rounds missing either event are left out)."""
    out = {}
    for k, c in (r.get("round_clock") or {}).items():
        if "start_s" in c and "end_s" in c:
            out[int(k)] = c["end_s"] - c["start_s"]
    return out


def fault_rounds(r: Result) -> set[int]:
    """Rounds in which a silo did not complete (the outage, or a missed deadline)."""
    return {int(miss[0]) for miss in r.get("not_completed", [])}


def time_to_clear(r: Result, target: float) -> float | None:
    """:func:`time_to`'s seconds less the start-to-end time of every round up to it in
    which a silo did not complete (:func:`fault_rounds`): the time the same rounds took
    without their faulty rounds, from the measured clock (not a run without the fault)."""
    hit = time_to(r, target)
    if hit is None:
        return None
    secs = round_seconds(r)
    return hit[1] - sum(secs.get(k, 0.0) for k in fault_rounds(r) if k <= hit[0])


def cycle_seconds(r: Result) -> float | None:
    """Wall seconds per round over the whole run: the last round's end / rounds (each
    round's training, the evaluation after it and the wait for the next round)."""
    end = (r.get("round_clock") or {}).get(str(r["rounds"]), {}).get("end_s")
    return None if end is None else float(end) / r["rounds"]


def link_of(results: list[Result]) -> str:
    """The edge-cloud link the results share, e.g. ``1 Mbit/s, 30 ms``.

    Raises
    ------
    ValueError
        The results come from different edge links (one JSON per link).
    """
    links = {(r.get("edge_mbps"), r.get("edge_latency_ms")) for r in results}
    if len(links) > 1:
        raise ValueError(f"results from several edge links {sorted(links, key=str)}: "
                         "keep one JSON per link")  # fmt: skip
    mbps, lat = links.pop() if links else (None, None)
    if mbps is None and lat is None:
        return "the experiment's (not recorded)"
    return f"{'unlimited' if mbps is None else f'{mbps:g} Mbit/s'}, {lat:g} ms"
