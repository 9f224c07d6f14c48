"""Rich terminal display of a run: a round progress bar, node states, a final summary."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from testbed.planner import Plan
from testbed.runner import RunResult

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
        self.task = None
        self.live: Live | None = None
        self.nodes: dict[str, dict[str, Any]] = {}
        self.plan: Plan | None = None

    def _table(self) -> Table:
        t = Table(title="nodes", expand=False, show_edge=False)
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

    def _render(self):
        return Group(self.progress, self._table()) if self.nodes else self.progress

    def started(self, run_id: str, plan: Plan) -> None:
        self.plan = plan
        fl = plan.experiment.workload.fl
        total = fl.rounds if fl else 100
        desc = f"{self.label}[bold]{plan.name}[/] {'rounds' if fl else 'progress'}"
        self.task = self.progress.add_task(desc, total=total, info="starting fleet")
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
        self.live = Live(
            self._render(), console=self.console, refresh_per_second=4, transient=True
        )
        self.live.start()

    def record(self, rec: dict[str, Any]) -> None:
        kind, name, node = rec.get("kind"), rec.get("name"), rec.get("node")
        if kind == "progress":
            self.progress.update(self.task, completed=100 * float(rec["value"]), info=name)
        elif kind == "event" and name == "round_start":
            self.progress.update(self.task, info=f"round {rec['round']} training")
            for s in self.nodes.values():
                if s.get("state") != "failed":  # a node that failed shows it until it replies
                    s["state"], s["round"] = "training", rec["round"]
        elif kind == "event" and name == "round_end":
            self.progress.update(
                self.task, completed=rec["round"], info=f"round {rec['round']} done"
            )
        elif kind == "metric" and node in self.nodes:
            if name in ("train_loss", "eval_acc"):
                self.nodes[node][name] = rec["value"]
        elif kind == "metric" and name == "global_acc" and rec.get("round"):
            self.progress.update(self.task, info=f"global acc {rec['value']:.3f}")
        elif kind == "status" and node in self.nodes:
            self.nodes[node]["state"] = rec["status"]
        if self.live:
            self.live.update(self._render())

    def finished(self, result: RunResult) -> None:
        if self.live:
            self.live.stop()
            self.console.print()
        print_summary(self.console, result)


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"


def print_summary(console: Console, result: RunResult) -> None:
    """Accuracy per round, per-node status, wall time and where the run is stored."""
    s = result.summary
    style = {"completed": "green", "failed": "red", "interrupted": "yellow"}.get(result.status, "")
    if s.get("global_acc"):
        t = Table(title="accuracy per round (measured)")
        for col in ("round", "global acc", "federated acc", "round time s"):
            t.add_column(col, justify="right")
        for r in sorted(s["global_acc"]):
            t.add_row(
                str(r),
                _f(s["global_acc"].get(r)),
                _f(s.get("federated_acc", {}).get(r)),
                _f(s.get("round_duration_s", {}).get(r)),
            )
        console.print(t)
    if s.get("node_status"):
        t = Table(title="nodes")
        for col in ("node", "completed", "failed", "other", "peak RSS MB"):
            t.add_column(col, justify="right")
        for node, rounds in sorted(s["node_status"].items()):
            vals = list(rounds.values())
            t.add_row(
                node,
                str(vals.count("completed")),
                str(vals.count("failed")),
                str(len(vals) - vals.count("completed") - vals.count("failed")),
                f"{s.get('peak_rss_mb', {}).get(node, 0):.0f}",
            )
        console.print(t)
    if isinstance(s.get("functions"), dict):
        timing = s.get("gpu_timing") or "no GPU used"
        t = Table(title=f"functions, policy {s.get('policy')} (GPU: {timing})")
        cols = ("function", "node", "mode", "backend", "req", "p50 ms", "p95 ms", "SLO ms")
        for col in (*cols, "miss %", "GPU-s", "switch"):
            t.add_column(col, justify="right")
        for name, f in s["functions"].items():
            nums = ("p50_ms", "p95_ms", "slo_ms", "slo_violation_pct", "gpu_seconds")
            t.add_row(
                name,
                f["node"],
                f["mode"].replace("_preferred", "_pref"),
                f"{f['start_backend']}>{f['end_backend']}",
                str(f["requests"]),
                *("-" if f[k] is None else f"{f[k]:.1f}" for k in nums),
                str(f["switches"]),
            )
        console.print(t)
    extra = {
        k: v
        for k, v in s.items()
        if k
        not in {
            "global_acc",
            "federated_acc",
            "round_duration_s",
            "node_status",
            "peak_rss_mb",
            "wall_s",
            "rounds",
        }
        and not isinstance(v, dict | list)
    }
    for k, v in extra.items():
        console.print(f"{k}: {v}")
    console.print(
        f"[{style}]{result.status}[/] in {result.wall_s:.1f} s wall; "
        f"stored in {result.artifact_dir} (run {result.run_id})"
    )
