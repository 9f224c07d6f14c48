"""Run store: SQLite (stdlib ``sqlite3``, WAL) under the output folder.

Tables: ``runs`` (one row per run), ``events`` (timestamped, typed), ``metrics``
(long format: run, round, node, name, value) and ``round_status`` (per (round, node):
completed | failed | excluded | late, with reason). Rows are written as they happen;
each write commits, so a killed run keeps everything it wrote.
"""

from __future__ import annotations

import fcntl
import json
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from kernel.dilation import CLOCK_METRICS
from testbed.rows import (
    EventRow,
    InjectionRow,
    MetricCursorRow,
    MetricRow,
    PendingInjection,
    RunRow,
    StatusRow,
    TaggedMetricRow,
    TimedStatusRow,
    WorkloadMetricRow,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "RUN_STATES",
    "SCHEMA",
    "EventRow",
    "InjectionRow",
    "MetricCursorRow",
    "MetricRow",
    "PendingInjection",
    "RunRow",
    "RunStore",
    "StatusRow",
    "TaggedMetricRow",
    "TimedStatusRow",
    "WorkloadMetricRow",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    sweep_id TEXT,
    variant TEXT,
    status TEXT NOT NULL,
    backend TEXT,
    seed INTEGER,
    spec_path TEXT,
    artifact_dir TEXT,
    pid INTEGER,
    created_at REAL NOT NULL,
    finished_at REAL,
    summary TEXT
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    round INTEGER,
    node TEXT,
    data TEXT,
    workload TEXT
);
CREATE TABLE IF NOT EXISTS metrics (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    ts REAL NOT NULL,
    round INTEGER,
    node TEXT,
    name TEXT NOT NULL,
    value REAL,
    tags TEXT,
    workload TEXT
);
CREATE TABLE IF NOT EXISTS round_status (
    run_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    node TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    ts REAL NOT NULL,
    PRIMARY KEY (run_id, round, node)
);
CREATE TABLE IF NOT EXISTS injections (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    ts REAL NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS metrics_run ON metrics(run_id, name);
CREATE INDEX IF NOT EXISTS events_run ON events(run_id, id);
"""

RUN_STATES = ("running", "completed", "failed", "interrupted")


def migrate_workload_column(db: sqlite3.Connection) -> None:
    """Add the ``workload`` column to the metrics and events of a store written before
    several workloads could share a run; its old rows keep NULL (readers take them as
    the run's one workload)."""
    for table in ("metrics", "events"):
        cols = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        if "workload" not in cols:
            db.execute(f"ALTER TABLE {table} ADD COLUMN workload TEXT")


class RunStore:
    """The SQLite run store at ``root / 'testbed.db'``; artifacts at ``root / run_id``.

    Parameters
    ----------
    root : pathlib.Path
        Output folder (default ``runs/``); created if missing.
    """

    def __init__(self, root: str | Path = "runs", workload: str | None = None) -> None:
        self.root = Path(root)
        self.workload = workload
        self._tdf: dict[str, float] = {}  # run -> time-dilation factor (read once)
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / "testbed.db"
        self._db = sqlite3.connect(
            self.path, timeout=30, isolation_level=None, check_same_thread=False
        )
        # Switching a new file to WAL takes an exclusive lock and SQLite does not run the
        # busy handler for it, so two runs opening a fresh store at once would see
        # "database is locked". Set-up is serialised across processes by a file lock.
        with open(self.root / ".testbed.db.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            cols = {r[1] for r in self._db.execute("PRAGMA table_info(metrics)")}
            if "tags" not in cols:  # stores written before tags existed
                self._db.execute("ALTER TABLE metrics ADD COLUMN tags TEXT")
            migrate_workload_column(self._db)

    def close(self) -> None:
        self._db.close()

    def tagged(self, workload: str | None) -> RunStore:
        """A new connection to this store whose metric and event rows are tagged with
        ``workload`` (a section of the spec's ``workload:``; None: the fleet's own)."""
        return RunStore(self.root, workload)

    def artifact_dir(self, run_id: str) -> Path:
        return self.root / run_id

    # -- writes ---------------------------------------------------------------------
    def create_run(
        self,
        run_id: str,
        name: str,
        *,
        seed: int,
        backend: str,
        spec_path: str | None = None,
        sweep_id: str | None = None,
        variant: str | None = None,
        pid: int | None = None,
    ) -> Path:
        """Insert a ``running`` run and create its artifact folder."""
        d = self.artifact_dir(run_id)
        d.mkdir(parents=True, exist_ok=True)
        self._db.execute(
            "INSERT INTO runs (run_id, name, sweep_id, variant, status, backend, seed, spec_path,"
            " artifact_dir, pid, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                run_id,
                name,
                sweep_id,
                variant,
                "running",
                backend,
                seed,
                spec_path,
                str(d),
                pid,
                time.time(),
            ),
        )
        return d

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any] | None = None) -> None:
        """Set the final status (and summary) of a run."""
        if status not in RUN_STATES:
            raise ValueError(f"status must be one of {RUN_STATES}, got {status!r}")
        self._db.execute(
            "UPDATE runs SET status=?, finished_at=?, summary=? WHERE run_id=?",
            (status, time.time(), json.dumps(summary or {}, default=str), run_id),
        )

    def reopen_run(self, run_id: str, pid: int) -> None:
        """Set a run ``running`` again under process ``pid`` (``testbed resume``)."""
        self._db.execute(
            "UPDATE runs SET status='running', pid=?, finished_at=NULL, summary=NULL"
            " WHERE run_id=?",
            (pid, run_id),
        )

    def drop_after(self, run_id: str, ts: float, keep_kinds: Iterable[str] = ()) -> dict[str, int]:
        """Delete the run's metrics, round statuses and events newer than ``ts`` (except
        events of ``keep_kinds``), in one transaction; return the counts per table."""
        keep = list(keep_kinds)
        marks = ",".join("?" * len(keep)) or "''"
        counts: dict[str, int] = {}
        self._db.execute("BEGIN")
        try:
            for table, extra, args in (
                ("metrics", "", ()),
                ("round_status", "", ()),
                ("events", f" AND kind NOT IN ({marks})", tuple(keep)),
            ):
                cur = self._db.execute(
                    f"DELETE FROM {table} WHERE run_id=? AND ts>?{extra}", (run_id, ts, *args)
                )
                counts[table] = cur.rowcount
        finally:
            self._db.execute("COMMIT")
        return counts

    def add_event(
        self,
        run_id: str,
        name: str,
        *,
        round: int | None = None,
        node: str | None = None,
        ts: float | None = None,
        **data: Any,
    ) -> None:
        self._db.execute(
            "INSERT INTO events (run_id, ts, kind, round, node, data, workload)"
            " VALUES (?,?,?,?,?,?,?)",
            (
                run_id,
                ts or time.time(),
                name,
                round,
                node,
                json.dumps(data, default=str),
                self.workload,
            ),
        )

    def add_metric(
        self,
        run_id: str,
        name: str,
        value: float,
        *,
        round: int | None = None,
        node: str | None = None,
        ts: float | None = None,
        tags: dict[str, Any] | None = None,
    ) -> None:
        """One metric value; ``tags`` (JSON) qualify it (e.g. scheme, SNR, kind); the row
        is tagged with this connection's workload (:meth:`tagged`). A metric measured on
        the run's clock (:data:`kernel.dilation.CLOCK_METRICS`) is recorded in emulated
        time: divided by the run's time-dilation factor (its ``time_dilation`` event)."""
        if name in CLOCK_METRICS:
            value = float(value) / self.time_dilation(run_id)
        self._db.execute(
            "INSERT INTO metrics (run_id, ts, round, node, name, value, tags, workload)"
            " VALUES (?,?,?,?,?,?,?,?)",
            (
                run_id,
                ts or time.time(),
                round,
                node,
                name,
                float(value),
                json.dumps(tags, default=str) if tags else None,
                self.workload,
            ),
        )

    def time_dilation(self, run_id: str) -> float:
        """The run's time-dilation factor (its first ``time_dilation`` event; 1 without
        one), read once per connection."""
        cache = self._tdf
        if run_id not in cache:
            row = self._db.execute(
                "SELECT data FROM events WHERE run_id=? AND kind='time_dilation' ORDER BY id"
                " LIMIT 1",
                (run_id,),
            ).fetchone()
            cache[run_id] = float(json.loads(row[0])["tdf"]) if row else 1.0
        return float(cache[run_id])

    def set_time_dilation(self, run_id: str, **record: Any) -> float:
        """Record the run's time dilation (a ``time_dilation`` event with ``tdf``) unless
        it has one (a resumed run keeps its first); return the factor in force."""
        self._tdf.pop(run_id, None)
        if not self._db.execute(
            "SELECT 1 FROM events WHERE run_id=? AND kind='time_dilation'", (run_id,)
        ).fetchone():
            self.add_event(run_id, "time_dilation", **record)
        return self.time_dilation(run_id)

    def set_status(
        self,
        run_id: str,
        round: int,
        node: str,
        status: str,
        reason: str = "",
        ts: float | None = None,
    ) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO round_status (run_id, round, node, status, reason, ts)"
            " VALUES (?,?,?,?,?,?)",
            (run_id, round, node, status, reason, ts or time.time()),
        )

    def delete_status(self, run_id: str, round: int, node: str) -> None:
        self._db.execute(
            "DELETE FROM round_status WHERE run_id=? AND round=? AND node=?", (run_id, round, node)
        )

    def metric_nodes(self, run_id: str, prefix: str = "") -> set[str]:
        """The distinct ``node`` values of the run's metrics that start with ``prefix``."""
        rows = self._db.execute(
            "SELECT DISTINCT node FROM metrics WHERE run_id=? AND substr(node, 1, ?) = ?",
            (run_id, len(prefix), prefix),
        ).fetchall()
        return {str(r[0]) for r in rows}

    def rename_metric_node(self, run_id: str, old: str, new: str) -> None:
        """Metrics recorded under node ``old`` (a Flower id) belong to node ``new``."""
        self._db.execute("UPDATE metrics SET node=? WHERE run_id=? AND node=?", (new, run_id, old))

    def ingest(self, run_id: str, records: Iterable[dict[str, Any]]) -> int:
        """Store node telemetry records (see ``nodes.fl.telemetry``); return the count."""
        n = 0
        self._db.execute("BEGIN")
        try:
            for r in records:
                kind, ts = r.get("kind"), r.get("t")
                if kind == "metric":
                    self.add_metric(
                        run_id,
                        r["name"],
                        r["value"],
                        round=r.get("round"),
                        node=r.get("node"),
                        ts=ts,
                    )
                elif kind == "status":
                    self.set_status(
                        run_id, r["round"], r["node"], r["status"], r.get("reason", ""), ts=ts
                    )
                elif kind == "event":
                    self.add_event(
                        run_id,
                        r["name"],
                        round=r.get("round"),
                        node=r.get("node"),
                        ts=ts,
                        **(r.get("data") or {}),
                    )
                n += 1
        finally:
            self._db.execute("COMMIT")
        return n

    def add_injection(self, run_id: str, spec: dict[str, Any]) -> int:
        """Queue a live fault for a running run (its chaos engine applies it)."""
        cur = self._db.execute(
            "INSERT INTO injections (run_id, ts, spec, status) VALUES (?,?,?,?)",
            (run_id, time.time(), json.dumps(spec), "pending"),
        )
        return int(cur.lastrowid or 0)

    def pending_injections(self, run_id: str) -> list[PendingInjection]:
        """The queued (``pending``) injections of a run, oldest first, specs decoded."""
        rows = self._db.execute(
            "SELECT id, spec FROM injections WHERE run_id=? AND status='pending' ORDER BY id",
            (run_id,),
        ).fetchall()
        return [PendingInjection(i, json.loads(s)) for i, s in rows]

    def mark_injection(self, inj_id: int, status: str) -> None:
        self._db.execute("UPDATE injections SET status=? WHERE id=?", (status, inj_id))

    def injection_status(self, inj_id: int) -> str:
        row = self._db.execute("SELECT status FROM injections WHERE id=?", (inj_id,)).fetchone()
        return str(row[0]) if row else "unknown"

    # -- reads ----------------------------------------------------------------------
    def _row(self, values: tuple[Any, ...]) -> RunRow:
        """A ``runs`` row whose ``artifact_dir`` is the run's folder under this store. The
        recorded path is where the writer saw it: relative to the folder ``testbed run``
        started in, or inside a container, so readers elsewhere could not open it."""
        row = RunRow(*values)
        if row.artifact_dir is None:
            return row
        return replace(row, artifact_dir=str(self.artifact_dir(row.run_id)))

    def runs(self, sweep_id: str | None = None) -> list[RunRow]:
        q = "SELECT * FROM runs" + (" WHERE sweep_id=?" if sweep_id else "")
        rows = self._db.execute(q + " ORDER BY created_at", (sweep_id,) if sweep_id else ())
        return [self._row(r) for r in rows]

    def completed_variant(self, sweep_id: str, variant: str) -> RunRow | None:
        """The completed run of ``variant`` in ``sweep_id``, if any (for resuming)."""
        row = self._db.execute(
            "SELECT * FROM runs WHERE sweep_id=? AND variant=? AND status='completed'",
            (sweep_id, variant),
        ).fetchone()
        return self._row(row) if row else None

    def run(self, run_id: str) -> RunRow:
        """A run by id or unique id prefix."""
        rows = self._db.execute(
            "SELECT * FROM runs WHERE run_id LIKE ?", (run_id + "%",)
        ).fetchall()
        if len(rows) != 1:
            raise KeyError(f"run {run_id!r}: {'no such run' if not rows else 'ambiguous prefix'}")
        return self._row(rows[0])

    def metrics(self, run_id: str, name: str | None = None) -> list[MetricRow]:
        """Rows ``(round, node, name, value, ts)`` ordered by time."""
        q = "SELECT round, node, name, value, ts FROM metrics WHERE run_id=?"
        args: tuple[str, ...] = (run_id,)
        if name:
            q, args = q + " AND name=?", (run_id, name)
        return [MetricRow(*r) for r in self._db.execute(q + " ORDER BY id", args)]

    def events(self, run_id: str, since_id: int = 0) -> list[EventRow]:
        """Rows ``(id, ts, kind, round, node, data)`` after ``since_id``."""
        rows = self._db.execute(
            "SELECT id, ts, kind, round, node, data FROM events WHERE run_id=? AND id>?"
            " ORDER BY id",
            (run_id, since_id),
        )
        return [EventRow(*r) for r in rows]

    def metrics_since(self, run_id: str, since_id: int = 0) -> list[MetricCursorRow]:
        """Rows ``(id, round, node, name, value, ts)`` after ``since_id`` (a cursor)."""
        rows = self._db.execute(
            "SELECT id, round, node, name, value, ts FROM metrics WHERE run_id=? AND id>?"
            " ORDER BY id",
            (run_id, since_id),
        )
        return [MetricCursorRow(*r) for r in rows]

    def injections(self, run_id: str) -> list[InjectionRow]:
        """Rows ``(id, ts, spec, status)`` of the live injections into a run."""
        rows = self._db.execute(
            "SELECT id, ts, spec, status FROM injections WHERE run_id=? ORDER BY id", (run_id,)
        )
        return [InjectionRow(*r) for r in rows]

    @overload
    def round_status(self, run_id: str, with_ts: Literal[False] = False) -> list[StatusRow]: ...

    @overload
    def round_status(self, run_id: str, with_ts: Literal[True]) -> list[TimedStatusRow]: ...

    def round_status(
        self, run_id: str, with_ts: bool = False
    ) -> list[StatusRow] | list[TimedStatusRow]:
        """Rows ``(round, node, status, reason[, ts])`` ordered by round and node."""
        q = "SELECT round, node, status, reason, ts FROM round_status WHERE run_id=?"
        rows = self._db.execute(q + " ORDER BY round, node", (run_id,)).fetchall()
        if with_ts:
            return [TimedStatusRow(*r) for r in rows]
        return [StatusRow(*r[:4]) for r in rows]

    def metric_names(self) -> set[str]:
        """Names of all metrics recorded so far (any run)."""
        return {r[0] for r in self._db.execute("SELECT DISTINCT name FROM metrics")}

    def tagged_metrics(self, run_id: str) -> list[TaggedMetricRow]:
        """Rows ``(round, node, name, value, tags dict)`` of a run, in order."""
        rows = self._db.execute(
            "SELECT round, node, name, value, tags FROM metrics WHERE run_id=? ORDER BY id",
            (run_id,),
        ).fetchall()
        return [TaggedMetricRow(r, n, k, v, json.loads(t) if t else {}) for r, n, k, v, t in rows]

    def workload_metrics(self, run_id: str) -> list[WorkloadMetricRow]:
        """Rows ``(ts, round, node, name, value, workload, tags)`` of a run, in order
        (``workload`` None: a fleet row, or a row of a store written before the tag)."""
        rows = self._db.execute(
            "SELECT ts, round, node, name, value, workload, tags FROM metrics WHERE run_id=?"
            " ORDER BY id",
            (run_id,),
        ).fetchall()
        return [
            WorkloadMetricRow(ts, rnd, node, name, value, wl, json.loads(tags) if tags else {})
            for ts, rnd, node, name, value, wl, tags in rows
        ]

    def event_workloads(self, run_id: str) -> dict[int, str | None]:
        """Event id -> the workload that recorded it (None: the fleet's, or untagged)."""
        rows = self._db.execute("SELECT id, workload FROM events WHERE run_id=?", (run_id,))
        return {int(i): w for i, w in rows}

    def metrics_frame(self, run_id: str) -> pd.DataFrame:
        """All metrics of a run as a pandas DataFrame."""
        import pandas as pd

        return pd.read_sql_query(
            "SELECT round, node, name, value, ts FROM metrics WHERE run_id=? ORDER BY id",
            self._db,
            params=(run_id,),
        )

    def mark_stale(self) -> list[str]:
        """Mark ``running`` runs whose process is gone as ``interrupted``."""
        import psutil

        stale = [
            r.run_id
            for r in self.runs()
            if r.status == "running" and (r.pid is None or not psutil.pid_exists(r.pid))
        ]
        for rid in stale:
            self.finish_run(rid, "interrupted", {"reason": "controller process gone"})
        return stale
