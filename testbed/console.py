"""Rich terminal display of a run: a round progress bar, node states, a final summary."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from testbed.cause import Cause
from testbed.planner import Plan
from testbed.runner import RunResult
from testbed.workload_tables import SHOWN, workload_tables

#: A fleet larger than this is shown grouped by tier and profile while it runs (the
#: summary groups when the FL workload gave it ``node_groups``, the same threshold).
GROUP_OVER = 24
#: At most this many nodes with a failure are listed under the groups.
FAILED_ROWS = 20
#: A fleet of more clients than this is followed live by group counts: a node gets a
#: row of its own state once a record names it (a simulation's million virtual clients);
#: a round's start cannot mark them training (which are sampled is not known here).
LIVE_NODES_MAX = 1000
#: The live table is rebuilt at most this often, seconds (Live redraws 4 times a second).
REDRAW_S = 0.25

STATE_STYLE = {
    "completed": "green",
    "failed": "red",
    "late": "yellow",
    "excluded": "dim",
    "waiting": "cyan",
    "training": "cyan",
}


class ConsoleObserver:
    """Draws progress live; prints the summary table when the run ends."""

    def __init__(self, console: Console | None = None, label: str = "") -> None:
        self.console = console or Console()
        self.label = label
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=self.console,
        )
        self.task: TaskID | None = None
        self.live: Live | None = None
        self.nodes: dict[str, dict[str, Any]] = {}
        #: a large fleet: client nodes per (tier, profile); ``nodes`` then holds only
        #: the nodes a record named (the others are counted as waiting)
        self.group_sizes: dict[tuple[str, str], int] = {}
        self._node_pid: Callable[[str], int | None] | None = None
        self.plan: Plan | None = None
        self._drawn = 0.0  # when the live table was last rebuilt (monotonic s)
        self.virtual = False  # the fleet's clock is virtual (simulation backend)
        self._handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            "progress": self._progress,
            "event": self._event,
            "metric": self._metric,
            "status": self._status,
        }

    def _table(self) -> Table:
        title = "nodes (virtual clock)" if self.virtual else "nodes"
        if self.group_sizes or len(self.nodes) > GROUP_OVER:
            return self._group_table(title)
        t = Table(title=title, expand=False, show_edge=False)
        for col in ("node", "tier", "profile", "state", "round", "train loss", "local acc"):
            t.add_column(col)
        for name, s in self.nodes.items():
            st = s.get("state", "waiting")
            t.add_row(
                name,
                s["tier"],
                s["profile"],
                f"[{STATE_STYLE.get(st, '')}]{st}",
                str(s.get("round", "-")),
                _f(s.get("train_loss")),
                _f(s.get("eval_acc")),
            )
        return t

    def _group_table(self, title: str) -> Table:
        """A large fleet: one row per (tier, profile), with its nodes' states counted."""
        groups: dict[tuple[str, str], Counter[str]] = {}
        for st in self.nodes.values():
            group = groups.setdefault((st["tier"], st["profile"]), Counter())
            group[st.get("state", "waiting")] += 1
        for key, size in self.group_sizes.items():  # (nodes no record named yet)
            group = groups.setdefault(key, Counter())
            if size > sum(group.values()):
                group["waiting"] += size - sum(group.values())
        total = sum(self.group_sizes.values()) or len(self.nodes)
        t = Table(title=f"{title}: {total}, by tier and profile", show_edge=False)
        for col in ("tier", "profile", "nodes", "states"):
            t.add_column(col)
        for (tier, profile), states in sorted(groups.items()):
            text = ", ".join(
                f"[{STATE_STYLE.get(k, '')}]{k} {n}" for k, n in sorted(states.items())
            )
            t.add_row(tier, profile, str(sum(states.values())), text)
        return t

    def _render(self) -> RenderableType:
        if self.nodes or self.group_sizes:
            return Group(self.progress, self._table())
        return self.progress

    def started(self, run_id: str, plan: Plan) -> None:
        self.plan = plan
        fl = plan.experiment.workload.fl
        total = fl.rounds if fl else 100
        desc = f"{self.label}[bold]{plan.name}[/] {'rounds' if fl else 'progress'}"
        self.task = self.progress.add_task(desc, total=total, info="starting fleet")
        if fl and plan.num_clients > LIVE_NODES_MAX:  # (counted by group, not one by one)
            self.group_sizes = plan.client_counts()
            names = plan.client_names()
            find = getattr(names, "find", None)
            self._node_pid = find if find is not None else {n: i for i, n in enumerate(names)}.get
            self.nodes = {}
        else:
            self.nodes = (
                {
                    n.name: {"tier": n.tier, "profile": n.profile_name, "state": "starting"}
                    for n in plan.clients
                }
                if fl
                else {}
            )
        self.console.print(f"run [bold]{run_id}[/]")
        # transient: once the run ends, the live view gives way to the summary, which
        # shows every node's recorded statuses (the live view only guesses them)
        self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=True)
        self.live.start()

    def record(self, rec: dict[str, Any]) -> None:
        """Update the live view from one store record (progress, event, metric, status)."""
        handler = self._handlers.get(str(rec.get("kind")))
        if handler is not None:
            handler(rec)
        now = time.monotonic()
        if self.live and now - self._drawn >= REDRAW_S:  # (a table per record: O(records x nodes))
            self._drawn = now
            self.live.update(self._render())

    def _progress(self, rec: dict[str, Any]) -> None:
        self._update(completed=100 * float(rec["value"]), info=rec.get("name"))

    def _event(self, rec: dict[str, Any]) -> None:
        if rec.get("name") == "round_start":
            self._update(info=f"round {rec['round']} training")
            # (a large fleet's sampled nodes are not known here: they show as they reply)
            state = "waiting" if self.group_sizes else "training"
            for s in self.nodes.values():
                if s.get("state") != "failed":  # a node that failed shows it until it replies
                    s["state"], s["round"] = state, rec["round"]
        elif rec.get("name") == "round_end":
            self._update(completed=rec["round"], info=f"round {rec['round']} done")
        elif rec.get("name") == "fleet_ready" and rec.get("clock") == "virtual":
            self.virtual = True
            if self.task is not None:
                desc = self.progress.tasks[0].description
                self._update(description=f"{desc} (simulation: virtual clock)")
        elif rec.get("name") == "links_fallback":  # said as it happens, not only at the end
            self.console.print(
                f"[yellow]links:[/] {escape(str(rec.get('used')))} instead of "
                f"{escape(str(rec.get('asked')))}: {escape(str(rec.get('why')))}",
                highlight=False,
            )

    def _known(self, node: Any) -> bool:
        """Whether ``node`` is a client shown (a large fleet's: added on first record)."""
        if node in self.nodes:
            return True
        if self._node_pid is None or self.plan is None or not isinstance(node, str):
            return False
        pid = self._node_pid(node)
        if pid is None:
            return False
        n = self.plan.clients[pid]
        self.nodes[node] = {"tier": n.tier, "profile": n.profile_name, "state": "waiting"}
        return True

    def _metric(self, rec: dict[str, Any]) -> None:
        name, node = rec.get("name"), rec.get("node")
        if isinstance(node, str) and self._known(node):
            if name in ("train_loss", "eval_acc"):
                self.nodes[node][name] = rec["value"]
        elif name == "global_acc" and rec.get("round"):
            self._update(info=f"global acc {rec['value']:.3f}")
        elif name == "virtual_time_s" and rec.get("round"):  # simulation: its own clock
            self._update(info=f"round {rec['round']} done, virtual t {rec['value']:.1f} s")

    def _status(self, rec: dict[str, Any]) -> None:
        if self._known(rec.get("node")):
            self.nodes[rec["node"]]["state"] = rec["status"]

    def _update(self, **fields: Any) -> None:
        """Move the progress bar (``completed``) and its text (``info``), once started."""
        if self.task is not None:
            self.progress.update(self.task, **fields)

    def finished(self, result: RunResult) -> None:
        if self.live:
            self.live.stop()
            self.console.print()
        print_summary(self.console, result)


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"


#: Summary keys shown as tables (or not at all), not as ``key: value`` lines.
_TABLE_KEYS = frozenset(
    {
        "global_acc",
        "federated_acc",
        "round_duration_s",
        "node_status",
        "node_groups",
        "peak_rss_mb",
        "wall_s",
        "rounds",
        "virtual_round_s",
        "virtual_time_s",
        "clock",
        "links_mode",
        "link_kinds",
        "links_fallback",
        "links_modelled",
        "ignored",
        "ray",
    }
)


def print_summary(console: Console, result: RunResult) -> None:
    """Each workload's tables (FL: accuracy per round, per-node status; functions,
    offload, LLM pipeline, compression, semantic mux), the summary's scalars, the status,
    wall time and where the run is stored, and the cause of a failed run."""
    s = result.summary
    style = {"completed": "green", "failed": "red", "interrupted": "yellow"}.get(result.status, "")
    for part in workload_summaries(s):
        tables = (_accuracy_table(part), _node_table(part), _functions_table(part))
        for table in (*tables, *workload_tables(part)):
            if table is not None:
                console.print(table)
        for line in (*memory_lines(part), *fleet_lines(part)):
            console.print(line, highlight=False)
    for k, v in s.items():
        if k == "final_global_acc" and v is None and not s.get("global_acc"):
            continue  # (an app that records no accuracy, e.g. a user's: nothing to say)
        if k not in _TABLE_KEYS | SHOWN and not isinstance(v, dict | list):
            console.print(f"{k}: {escape(str(v))}", highlight=False)
    console.print(
        f"[{style}]{result.status}[/] in {result.wall_s:.1f} s wall; "
        f"stored in {result.artifact_dir} (run {result.run_id})"
    )
    if isinstance(s.get("cause"), dict):
        print_cause(console, Cause.from_dict(s["cause"]))


def workload_summaries(s: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary of each workload of a run: ``s["workloads"]``'s (several workloads
    ran together: :mod:`testbed.workloads.together`), else ``s`` itself."""
    parts = s.get("workloads")
    if isinstance(parts, dict) and parts:
        return [p for p in parts.values() if isinstance(p, dict)]
    return [s]


def print_cause(console: Console, cause: Cause) -> None:
    """``cause: <error line>`` and, under it, what wrote it and where (node, log, frame)."""
    console.print(f"[bold red]cause:[/] {escape(cause.message)}", highlight=False)
    at = f" (at {cause.where})" if cause.where else ""
    console.print(f"  from {escape(cause.origin)}{escape(at)}", highlight=False)


def virtual(s: dict[str, Any]) -> bool:
    """Whether the run's round times are on a virtual clock (simulation backend)."""
    return s.get("clock") == "virtual" or "virtual_round_s" in s


def _accuracy_table(s: dict[str, Any]) -> Table | None:
    """Global and federated accuracy and duration of each round (None without rounds);
    a simulation's round times are its virtual clock's (modelled), beside the wall's."""
    if not s.get("global_acc"):
        return None
    on_virtual = virtual(s)
    kind = "simulation: virtual clock" if on_virtual else "measured"
    t = Table(title=f"accuracy per round ({kind})")
    cols = ("virtual round s", "wall round s") if on_virtual else ("round time s",)
    for col in ("round", "global acc", "federated acc", *cols):
        t.add_column(col, justify="right")
    for r in sorted(s["global_acc"]):
        times = (s.get("virtual_round_s", {}).get(r),) if on_virtual else ()
        t.add_row(
            str(r),
            _f(s["global_acc"].get(r)),
            _f(s.get("federated_acc", {}).get(r)),
            *(_f(v) for v in (*times, s.get("round_duration_s", {}).get(r))),
        )
    return t


def fleet_lines(s: dict[str, Any]) -> list[str]:
    """What the fleet chose, as lines: the clock (simulation: virtual, with the total
    virtual time), the links in force (mode, kinds, a fallback and why, or that they
    are modelled) and what of the spec the backend ignored; none for a summary that
    recorded none of them."""
    lines = []
    if virtual(s):
        total = s.get("virtual_time_s")
        at = "" if total is None else f", {total:.1f} s virtual in all"
        ray = f"; Ray: {s['ray']}" if s.get("ray") else ""
        lines.append(escape(f"clock: virtual (modelled, docs/simulation.md){at}{ray}"))
        lines.append(
            "  wall round times are measured (round 1 includes starting Ray); memory is "
            "measured for the whole simulation process tree, not per node"
        )
    if "links_mode" in s:
        kinds = s.get("link_kinds") or {}
        each = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())) or "no emulated links"
        line = f"links: {s['links_mode']} ({each})"
        if s.get("links_fallback"):
            line += f"; fell back: {s['links_fallback']}"
        if s.get("links_modelled"):
            line += f"; {s['links_modelled']}"
        lines.append(escape(line))
    capped = s.get("limits_capped") or {}
    if capped:  # profiles above the host (docker): what each container got instead
        from testbed.backends.host_limits import grouped

        lines.append(escape(f"limits: {len(capped)} node(s) above this host"))
        lines += [escape(f"  {line}") for line in grouped(capped)]
    if s.get("in_process"):
        lines.append(escape(f"where: {s['in_process']}"))
    if s.get("ignored"):
        lines.append(escape(f"ignored: {s['ignored']}"))
    return lines


def _counts(rounds: dict[Any, str]) -> tuple[int, int, int]:
    """Rounds completed, failed and otherwise ended, of one node's statuses."""
    vals = list(rounds.values())
    done, failed = vals.count("completed"), vals.count("failed")
    return done, failed, len(vals) - done - failed


def _node_table(s: dict[str, Any]) -> Table | None:
    """Rounds each node completed, failed or otherwise ended, and its peak memory; a
    large fleet (the summary has ``node_groups``: tier/profile by node): one row per
    group, then the nodes with a failure only (at most :data:`FAILED_ROWS`)."""
    if not s.get("node_status"):
        return None
    statuses: dict[str, dict[Any, str]] = s["node_status"]
    groups: dict[str, str] = s.get("node_groups") or {}
    if groups:
        return _grouped_node_table(
            statuses, groups, s.get("group_nodes") or {}, s.get("not_sampled") or {}
        )
    peak = s.get("peak_rss_mb") or {}
    t = Table(title="nodes")
    for col in ("node", "completed", "failed", "other", "peak RSS MB"):
        t.add_column(col, justify="right")
    for node, rounds in sorted(statuses.items()):
        mb = peak.get(node)
        t.add_row(
            node,
            *(str(n) for n in _counts(rounds)),
            "-" if mb is None else f"{mb:.0f}",  # not measured is not 0
        )
    return t


def _grouped_node_table(
    statuses: dict[str, dict[Any, str]],
    groups: dict[str, str],
    sizes: dict[str, int] | None = None,
    not_sampled: dict[str, int] | None = None,
) -> Table:
    """Per group: nodes and their rounds completed, failed, other; then failed nodes.

    ``sizes``: client nodes per group in the whole fleet (a fleet whose statuses cover
    only the sampled nodes); ``not_sampled``: (round, node) pairs per group that were
    not sampled and have no row (counted under ``other``)."""
    total: dict[str, list[int]] = {}
    for node, rounds in statuses.items():
        row = total.setdefault(groups.get(node, "other"), [0, 0, 0, 0])
        row[0] += 1
        for i, n in enumerate(_counts(rounds)):
            row[i + 1] += n
    for group, k in (sizes or {}).items():
        total.setdefault(group, [0, 0, 0, 0])[0] = k
    for group, k in (not_sampled or {}).items():
        total.setdefault(group, [0, 0, 0, 0])[3] += k
    n_nodes = sum(sizes.values()) if sizes else len(statuses)
    t = Table(title=f"nodes: {n_nodes}, by tier/profile (rounds per status)")
    if not_sampled:
        t.caption = "other: includes the rounds a node was not sampled in (counted per group)"
    for col in ("tier/profile", "nodes", "completed", "failed", "other"):
        t.add_column(col, justify="right")
    for group, row in sorted(total.items()):
        t.add_row(group, *(str(n) for n in row))
    failed = sorted(n for n, rounds in statuses.items() if "failed" in rounds.values())
    for node in failed[:FAILED_ROWS]:
        t.add_row(f"  {node}", "", *(str(n) for n in _counts(statuses[node])))
    if len(failed) > FAILED_ROWS:
        t.add_row(f"  ... {len(failed) - FAILED_ROWS} more nodes with a failure", "", "", "", "")
    return t


def memory_lines(s: dict[str, Any]) -> list[str]:
    """Under the nodes table: what its "-" means (not measured, never 0), and the peaks
    measured beside the client nodes (the server; a simulation's one process tree)."""
    nodes, peak = s.get("node_status") or {}, s.get("peak_rss_mb") or {}
    lines = []
    if any(peak.get(node) is None for node in nodes):
        lines.append("peak RSS -: not measured for the node")
    beside = [f"{k} {v:.0f}" for k, v in peak.items() if k not in nodes and v is not None]
    if nodes and beside:
        lines.append(escape(f"peak RSS MB, not client nodes: {', '.join(beside)}"))
    return lines


def _functions_table(s: dict[str, Any]) -> Table | None:
    """Latency, SLO misses, GPU time and backend switches per function (functions runs)."""
    if not isinstance(s.get("functions"), dict):
        return None
    timing = s.get("gpu_timing") or "no GPU used"
    t = Table(title=f"functions, policy {s.get('policy')} (GPU: {timing})")
    cols = ("function", "node", "mode", "backend", "req", "p50 ms", "p95 ms", "SLO ms")
    for col in (*cols, "miss %", "GPU-s", "switch"):
        t.add_column(col, justify="right")
    nums = ("p50_ms", "p95_ms", "slo_ms", "slo_violation_pct", "gpu_seconds")
    for name, f in s["functions"].items():
        t.add_row(
            name,
            f["node"],
            f["mode"].replace("_preferred", "_pref"),
            f"{f['start_backend']}>{f['end_backend']}",
            str(f["requests"]),
            *("-" if f[k] is None else f"{f[k]:.1f}" for k in nums),
            str(f["switches"]),
        )
    return t
