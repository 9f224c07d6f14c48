"""``testbed show RUN``: one run as the store recorded it, in the terminal.

In order: the run summary (each workload's tables, the summary's scalars, status, wall
time and, for a failed run, its cause: :mod:`testbed.cause`), what a workload recorded
beside its summary (functions: SLO attainment, promotions and demotions; LLM pipeline:
the partition's cuts), every metric series by name (a user's Flower App's MetricRecord
keys as the testbed's own), the per-(round, node) statuses, the events, and the row
counts.
Long lists are cut with a line that says how much was left out; nothing is estimated.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from testbed.cause import failure_cause
from testbed.console import STATE_STYLE, print_summary, workload_summaries
from testbed.controller.timeline import QUIET
from testbed.rows import EventRow, MetricRow, RunRow, StatusRow
from testbed.runner import RunResult
from testbed.store import RunStore

__all__ = ["events_table", "series_table", "show_run", "statuses_table"]

#: Node rows (groups of nodes with the same statuses) and round columns drawn at most.
MAX_NODE_ROWS = 20
MAX_ROUNDS = 20
#: Events listed at most: the first ``EVENTS_HEAD`` and the last ``EVENTS_TAIL``.
EVENTS_HEAD, EVENTS_TAIL = 20, 10
#: Distinct (status, reason) lines under the statuses table, at most.
MAX_REASONS = 8
#: Events counted but not listed: per-round bookkeeping and per-node set-up.
ROUTINE = QUIET | {"round_start", "round_end"}
#: Short cell text of each round status.
CELL = {"completed": "ok", "failed": "FAIL", "late": "late", "excluded": "excl"}
#: Events of the chaos engine: a fault, or what a fault did.
FAULT_EVENTS = frozenset({"fault_injected", "fault_rejected"})
LINK_EVENTS = frozenset({"link_changed", "link_radio"})  # schedules: satellite passes
#: Metric series listed at most, and rounds spelt out per series (the first
#: ``SERIES_HEAD`` and the last ``SERIES_TAIL``).
MAX_SERIES = 40
SERIES_HEAD, SERIES_TAIL = 4, 2
#: Summary keys keyed by round (JSON object keys: text once stored).
ROUND_KEYS = ("global_acc", "federated_acc", "round_duration_s", "virtual_round_s")


def show_run(console: Console, store: RunStore, run: RunRow) -> None:
    """Print everything the store holds of ``run`` (see the module's docstring)."""
    s = run.summary_dict
    for part in workload_summaries(s):
        _int_keys(part)
    cause = failure_cause(store, run)
    if cause is not None:
        s["cause"] = cause.as_dict()
    if s.get("final_global_acc", 0) is None:  # a user's Flower App: none (its series below)
        del s["final_global_acc"]
    wall = float(s.get("wall_s", 0.0))
    print_summary(console, RunResult(run.run_id, run.status, Path(run.artifact_dir or ""), wall, s))
    for part in workload_summaries(s):
        _functions_line(console, store, run, part)
    _llm_cuts(console, store.events(run.run_id))
    metrics = store.metrics(run.run_id)
    if metrics:
        console.print(series_table(metrics))
    statuses = store.round_status(run.run_id)
    if statuses:
        console.print(statuses_table(statuses))
        for line in reason_lines(statuses):
            console.print(line, highlight=False)
    else:
        console.print("statuses: none recorded (no FL rounds)")
    events = store.events(run.run_id)
    console.print(events_table(events, run.created_at))
    hidden = Counter(e.kind for e in events if e.kind in ROUTINE)
    if hidden:
        listed = ", ".join(f"{k} x{n}" for k, n in sorted(hidden.items()))
        console.print(f"  not listed: {listed}", highlight=False)
    console.print(f"{len(events)} events, {len(metrics)} metric rows")


def _int_keys(s: dict[str, Any]) -> None:
    """Round numbers (JSON object keys, text once stored) back to ints, in place."""
    for key in (*ROUND_KEYS, "node_status"):
        if isinstance(s.get(key), dict):
            if key == "node_status":
                s[key] = {
                    node: {int(r): st for r, st in v.items()} if isinstance(v, dict) else v
                    for node, v in s[key].items()
                }
            else:
                s[key] = {int(r): v for r, v in s[key].items()}


def _natural(name: str) -> list[Any]:
    """Sort key: ``edge-2`` before ``edge-10``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def statuses_table(rows: list[StatusRow]) -> Table:
    """Round x node statuses; nodes with the same status in every round share a row
    (largest groups first, then by node name); at most :data:`MAX_NODE_ROWS` rows and
    :data:`MAX_ROUNDS` round columns (the totals cover every round)."""
    rounds = sorted({r.round for r in rows})
    by_node: dict[str, dict[int, str]] = {}
    for r in rows:
        by_node.setdefault(r.node, {})[r.round] = r.status
    groups: dict[tuple[str, ...], list[str]] = {}
    for node in sorted(by_node, key=_natural):
        key = tuple(by_node[node].get(k, "") for k in rounds)
        groups.setdefault(key, []).append(node)
    shown = rounds[:MAX_ROUNDS]
    t = Table(title=f"statuses per round ({len(by_node)} nodes, {len(rounds)} rounds)")
    t.add_column("node")
    for k in shown:
        t.add_column(str(k), justify="center")
    if len(rounds) > len(shown):
        t.add_column(f"+{len(rounds) - len(shown)} rounds")
    for col in ("ok", "failed", "other"):
        t.add_column(col, justify="right")
    # the largest groups first (a big fleet's usual pattern, then its exceptions)
    items = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    for key, nodes in items[:MAX_NODE_ROWS]:
        cells = [_cell(st) for st in key[: len(shown)]]
        more = ["…"] if len(rounds) > len(shown) else []
        done, failed = key.count("completed"), key.count("failed")
        other = len([x for x in key if x]) - done - failed
        t.add_row(_label(nodes), *cells, *more, str(done), str(failed), str(other))
    if len(items) > MAX_NODE_ROWS:
        rest = sum(len(n) for _k, n in items[MAX_NODE_ROWS:])
        t.add_row(f"... {rest} more nodes ({len(items) - MAX_NODE_ROWS} more rows)")
    return t


def series_table(rows: list[MetricRow]) -> Table:
    """One line per metric series, by name (the testbed's and the app's alike: a user's
    Flower App's MetricRecord keys, ``key[i]`` for a list): its rows, nodes, rounds and
    the mean of its rows in each round (the first :data:`SERIES_HEAD` and last
    :data:`SERIES_TAIL` rounds); at most :data:`MAX_SERIES` series."""
    by_name: dict[str, list[MetricRow]] = {}
    for m in rows:
        by_name.setdefault(m.name, []).append(m)
    t = Table(title=f"metric series ({len(by_name)} names, {len(rows)} rows)")
    for col in ("series", "rows", "nodes", "rounds"):
        t.add_column(col, justify="left" if col == "series" else "right")
    t.add_column("mean of the rows per round (round: mean)")
    names = sorted(by_name, key=_natural)
    for name in names[:MAX_SERIES]:
        ms = by_name[name]
        nodes = {m.node for m in ms if m.node is not None}
        rounds = sorted({m.round for m in ms if m.round is not None})
        span = f"{rounds[0]}-{rounds[-1]}" if len(rounds) > 1 else "".join(map(str, rounds))
        cells = (str(len(ms)), str(len(nodes)), span or "-", _per_round(ms, rounds))
        t.add_row(escape(name), *cells)
    if len(names) > MAX_SERIES:
        t.add_row(f"... {len(names) - MAX_SERIES} more series")
    return t


def _per_round(ms: list[MetricRow], rounds: list[int]) -> str:
    """``1: 0.52 · 2: 0.31 · … · 9: 0.77``: the mean of the rows of each round (a
    series without rounds: the mean of all its rows)."""

    def mean(vs: list[float]) -> str:
        return f"{sum(vs) / len(vs):.4g}" if vs else "-"

    if not rounds:
        return f"mean {mean([m.value for m in ms if m.value is not None])} (no round)"
    cut = len(rounds) > SERIES_HEAD + SERIES_TAIL
    shown = [*rounds[:SERIES_HEAD], None, *rounds[-SERIES_TAIL:]] if cut else rounds
    parts = [
        f"… {len(rounds) - SERIES_HEAD - SERIES_TAIL} rounds …"
        if r is None
        else f"{r}: {mean([m.value for m in ms if m.round == r and m.value is not None])}"
        for r in shown
    ]
    return " · ".join(parts)


def _cell(status: str) -> str:
    if not status:
        return "-"
    style = STATE_STYLE.get(status, "")
    text = escape(CELL.get(status, status))
    return f"[{style}]{text}[/]" if style else text


def _label(nodes: list[str]) -> str:
    if len(nodes) <= 2:
        return ", ".join(nodes)
    return f"{nodes[0]} … {nodes[-1]} ({len(nodes)} nodes)"


def reason_lines(rows: list[StatusRow]) -> list[str]:
    """One line per distinct (status, reason) of the rounds a node did not complete:
    how many, and the first (node, round)s."""
    seen: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r.status != "completed":
            seen.setdefault((r.status, r.reason or ""), []).append(f"{r.node} r{r.round}")
    lines = []
    for (status, reason), where in list(seen.items())[:MAX_REASONS]:
        at = ", ".join(where[:3]) + (f", +{len(where) - 3}" if len(where) > 3 else "")
        lines.append(f"  {status} x{len(where)}: {escape(reason or '(no reason)')} ({at})")
    if len(seen) > MAX_REASONS:
        lines.append(f"  ... {len(seen) - MAX_REASONS} more (status, reason) pairs")
    return lines


def _category(kind: str, effects: frozenset[str]) -> str:
    if kind in FAULT_EVENTS:
        return "[red]fault[/]"
    if kind in effects:
        return "[yellow]effect[/]"
    if kind in LINK_EVENTS:
        return "[cyan]link[/]"
    return "[red]error[/]" if kind == "error" else "run"


def _effects() -> frozenset[str]:
    """Event names that registered fault kinds (and the chaos engine) record as effects."""
    from testbed.faults import FAULT_KINDS
    from testbed.faults.node import DOWN_EFFECTS

    return frozenset(DOWN_EFFECTS).union(*(FAULT_KINDS[k].effects for k in FAULT_KINDS))


def excerpt(data: dict[str, Any], width: int = 90) -> str:
    """``key=value`` pairs of an event's data, each value cut, the whole cut to ``width``."""
    parts = []
    for k, v in data.items():
        text = v if isinstance(v, str) else json.dumps(v, default=str, separators=(",", ":"))
        parts.append(f"{k}={text if len(text) <= 40 else text[:39] + '…'}")
    out = " ".join(parts)
    return out if len(out) <= width else out[: width - 1] + "…"


def events_table(events: list[EventRow], t0: float) -> Table:
    """The run's events but the routine ones (:data:`ROUTINE`), in time order, with the
    time since the run started; the first :data:`EVENTS_HEAD` and last
    :data:`EVENTS_TAIL` of a longer list, with a line counting the ones between."""
    listed = sorted((e for e in events if e.kind not in ROUTINE), key=lambda e: (e.ts, e.id))
    effects = _effects()
    t = Table(title=f"events ({len(listed)} listed of {len(events)})")
    for col in ("t s", "round"):
        t.add_column(col, justify="right")
    for col in ("node", "what", "event", "data"):
        t.add_column(col)
    cut = len(listed) > EVENTS_HEAD + EVENTS_TAIL
    head = listed[:EVENTS_HEAD] if cut else listed
    for e in head:
        t.add_row(*_event_cells(e, t0, effects))
    if cut:
        t.add_row("", "", "", "", f"... {len(listed) - EVENTS_HEAD - EVENTS_TAIL} more events")
        for e in listed[-EVENTS_TAIL:]:
            t.add_row(*_event_cells(e, t0, effects))
    return t


def _event_cells(e: EventRow, t0: float, effects: frozenset[str]) -> tuple[str, ...]:
    return (
        f"{e.ts - t0:.1f}",
        "-" if e.round is None else str(e.round),
        escape(e.node or "-"),
        _category(e.kind, effects),
        escape(e.kind),
        escape(excerpt(e.data_dict)),
    )


def _functions_line(console: Console, store: RunStore, run: RunRow, s: dict[str, Any]) -> None:
    """A functions run: SLO attainment over all requests, promotions and demotions per
    function (the runtime's applied ``mode_decision`` rows)."""
    if not isinstance(s.get("functions"), dict):
        return
    from testbed.functions.seeds import RunFigures, decision_of

    decisions = tuple(
        decision_of(str(m.node), m.value, m.tags)
        for m in store.tagged_metrics(run.run_id)
        if m.name == "mode_decision"
    )
    fig = RunFigures(str(s.get("policy")), int(run.seed or 0), run.run_id, s, decisions)
    attain = fig.total("attain_pct")
    n = sum(int(f.get("requests") or 0) for f in s["functions"].values())
    moves = ", ".join(
        f"{name} +{fig.fn(name, 'promotions'):.0f}/-{fig.fn(name, 'demotions'):.0f}"
        for name in fig.functions
    )
    att = "-" if attain is None else f"{attain:.1f}%"
    console.print(
        f"functions: SLO attainment {att} of {n} requests; promotions/demotions: {moves}",
        highlight=False,
    )


def _llm_cuts(console: Console, events: list[EventRow]) -> None:
    """An LLM pipeline run: each replica's partition (nodes and cut), as recorded."""
    parts = [e.data_dict for e in events if e.kind == "llm_partition"]
    if not parts:
        return
    t = Table(title=f"LLM pipeline partition, policy {parts[0].get('policy')}")
    for col in ("replica", "nodes", "cut (units per node)", "bottleneck ms (modelled)"):
        t.add_column(col)
    for d in parts:
        b = d.get("modelled_bottleneck_ms")
        t.add_row(
            str(d.get("replica")),
            " > ".join(map(str, d.get("nodes", []))),
            " | ".join(f"{a}-{b}" for a, b in d.get("cut", [])),
            "-" if b is None else f"{b:.1f}",
        )
    console.print(t)
