"""Run store: rows written as they happen survive; stale runs become interrupted."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from testbed.store import RunStore


def test_store_roundtrip(tmp_path: Path) -> None:
    s = RunStore(tmp_path)
    d = s.create_run("r1", "demo", seed=1, backend="local")
    assert d.is_dir()
    s.ingest(
        "r1",
        [
            {
                "kind": "metric",
                "name": "train_loss",
                "value": 0.5,
                "round": 1,
                "node": "e1",
                "t": 1.0,
            },
            {"kind": "status", "round": 1, "node": "e1", "status": "completed", "t": 1.0},
            {"kind": "event", "name": "round_end", "round": 1, "data": {"replies": 1}, "t": 1.0},
        ],
    )
    s.finish_run("r1", "completed", {"final_global_acc": 0.9})
    r = RunStore(tmp_path).run("r1")
    assert r.status == "completed" and r.summary_dict["final_global_acc"] == 0.9
    assert s.metrics("r1", "train_loss") == [(1, "e1", "train_loss", 0.5, 1.0)]
    assert s.round_status("r1") == [(1, "e1", "completed", "")]
    assert [e[2] for e in s.events("r1")] == ["round_end"]


def test_killed_writer_keeps_rows_and_is_marked_interrupted(tmp_path: Path) -> None:
    code = (
        "import os, sys; from testbed.store import RunStore\n"
        f"s = RunStore({str(tmp_path)!r})\n"
        "s.create_run('r2', 'demo', seed=0, backend='local', pid=os.getpid())\n"
        "for r in range(1, 4): s.add_metric('r2', 'global_acc', r / 10, round=r)\n"
        "os._exit(9)\n"  # dies without finishing the run
    )
    subprocess.run([sys.executable, "-c", code], check=False)
    s = RunStore(tmp_path)
    assert [m[0] for m in s.metrics("r2", "global_acc")] == [1, 2, 3]
    assert s.mark_stale() == ["r2"] and s.run("r2").status == "interrupted"


def test_metric_tags_and_migration_of_an_old_store(tmp_path: Path) -> None:
    import sqlite3

    db = sqlite3.connect(tmp_path / "testbed.db")  # a store from before tags existed
    db.execute(
        "CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT,"
        " ts REAL, round INTEGER, node TEXT, name TEXT NOT NULL, value REAL)"
    )
    db.execute("INSERT INTO metrics (run_id, ts, name, value) VALUES ('old', 1, 'acc', 0.5)")
    db.commit()
    db.close()
    s = RunStore(tmp_path)
    s.add_metric("r", "accuracy", 0.9, round=2, tags={"scheme": "mux", "snr_db": 10})
    assert s.tagged_metrics("r") == [(2, None, "accuracy", 0.9, {"scheme": "mux", "snr_db": 10})]
    assert s.tagged_metrics("old") == [(None, None, "acc", 0.5, {})]


def _open_store(root: str) -> str:
    store = RunStore(root)
    store.create_run(uuid.uuid4().hex, "x", seed=0, backend="local")
    store.close()
    return "ok"


def test_runs_opening_a_fresh_store_at_once_do_not_see_a_locked_database(
    tmp_path: Path,
) -> None:
    """Two `testbed run`s started together on a new --out folder (CI found this)."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(6) as pool:
        for i in range(4):
            root = str(tmp_path / f"fresh{i}")
            # a timeout, not a hang, when the pool's workers cannot start
            opened = pool.map_async(_open_store, [root] * 6).get(timeout=120)
            assert opened == ["ok"] * 6
            assert len(RunStore(root).runs()) == 6


def test_run_folder_is_found_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run recorded through a relative ``--out`` is read from another folder (the
    report, the controller): its ``artifact_dir`` is the folder under the store read."""
    monkeypatch.chdir(tmp_path)
    writer = RunStore("runs")
    (writer.create_run("r1", "x", seed=1, backend="local") / "meta.json").write_text("{}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    reader = RunStore(tmp_path / "runs")
    for row in (reader.run("r1"), reader.runs()[0]):
        assert (Path(row.artifact_dir) / "meta.json").read_text() == "{}"


def test_rows_are_typed_records_read_back_from_sqlite(tmp_path: Path) -> None:
    """Every read gives a named, immutable row: fields by name, same values by position."""
    from testbed.store import (
        EventRow,
        InjectionRow,
        MetricCursorRow,
        MetricRow,
        PendingInjection,
        StatusRow,
        TaggedMetricRow,
        TimedStatusRow,
    )

    s = RunStore(tmp_path)
    s.create_run("r1", "demo", seed=3, backend="local", sweep_id="sw", variant="v1")
    s.add_metric("r1", "train_loss", 0.25, round=2, node="e1", ts=10.0, tags={"kind": "fit"})
    s.add_event("r1", "node_killed", round=2, node="e1", ts=11.0, signal="SIGKILL")
    s.set_status("r1", 2, "e1", "failed", "killed", ts=12.0)
    inj = s.add_injection("r1", {"kind": "kill", "target": "e1"})
    reader = RunStore(tmp_path)  # a second connection: values come back from the file

    [m] = reader.metrics("r1", "train_loss")
    assert isinstance(m, MetricRow)
    assert (m.round, m.node, m.name, m.value, m.ts) == (2, "e1", "train_loss", 0.25, 10.0)
    rnd, node, name, value, ts = m  # positional unpacking keeps working
    assert (rnd, node, name, value, ts) == tuple(m) and m._fields[3] == "value"

    [c] = reader.metrics_since("r1", 0)
    assert isinstance(c, MetricCursorRow) and c.id >= 1 and c[1:] == tuple(m)
    assert reader.metrics_since("r1", c.id) == []

    [t] = reader.tagged_metrics("r1")
    assert isinstance(t, TaggedMetricRow) and t.tags == {"kind": "fit"} and t.value == 0.25

    [e] = reader.events("r1")
    assert isinstance(e, EventRow)
    assert (e.kind, e.round, e.node, e.ts) == ("node_killed", 2, "e1", 11.0)
    assert e.data_dict == {"signal": "SIGKILL"} and e[2] == e.kind

    [st] = reader.round_status("r1")
    assert isinstance(st, StatusRow) and st == (2, "e1", "failed", "killed")
    assert (st.round, st.node, st.status, st.reason) == (2, "e1", "failed", "killed")
    [tst] = reader.round_status("r1", with_ts=True)
    assert isinstance(tst, TimedStatusRow) and tst.ts == 12.0 and tst[:4] == st

    [p] = reader.pending_injections("r1")
    assert isinstance(p, PendingInjection) and p.id == inj and p.spec["kind"] == "kill"
    reader.mark_injection(inj, "applied")
    assert reader.pending_injections("r1") == []
    [i] = reader.injections("r1")
    assert isinstance(i, InjectionRow) and (i.id, i.status) == (inj, "applied")
    assert json.loads(i.spec) == {"kind": "kill", "target": "e1"}

    run = reader.run("r1")
    assert (run.sweep_id, run.variant, run.seed, run.status) == ("sw", "v1", 3, "running")
    with pytest.raises(AttributeError):
        m.value = 1.0  # type: ignore[misc]  # rows are immutable: this must fail
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.status = "completed"  # type: ignore[misc]  # likewise for a run


def test_rows_of_an_empty_event_and_an_unknown_injection(tmp_path: Path) -> None:
    s = RunStore(tmp_path)
    s._db.execute(  # an event row without data (NULL), as an old store could hold
        "INSERT INTO events (run_id, ts, kind) VALUES ('r', 1.0, 'fleet_ready')"
    )
    [e] = s.events("r")
    assert e.data is None and e.data_dict == {} and e.round is None and e.node is None
    assert s.injection_status(12345) == "unknown"
