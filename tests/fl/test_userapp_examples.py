"""Two more of Flower's own apps, unmodified, on the emulated fleet (issue 28).

* ``federated-analytics`` (Flower's ``examples/federated-analytics``, Message API, one
  ``query`` message per node): each SuperNode queries its own SQL database, named by its
  node config's ``db-url``. The README's PostgreSQL containers cannot run here, so each
  node gets an SQLite file the test writes with the README's table (``db_init.sh``'s
  columns and value ranges), through ``workload.fl.node_config`` (the app's own hook;
  its code is unchanged).
* ``e2e-bare`` (Flower's ``framework/e2e/e2e-bare``, the legacy API: ``NumPyClient``,
  ``DefaultWorkflow``): no data at all. No other app of ``examples/`` runs here: each
  downloads its data through ``flwr-datasets`` or needs a framework that is not installed
  (tests/data/apps/SOURCES.md).

Each runs on ``--backend local`` (real SuperLink and SuperNodes on loopback) with a
crash and a partition, and on ``--backend simulation``.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path

import numpy as np
import pytest

from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.conftest import processes_under
from tests.fl.test_userapp import spec_yaml, statuses

pytestmark = pytest.mark.slow

APPS = Path(__file__).resolve().parents[1] / "data" / "apps"
ANALYTICS, BARE = APPS / "federated-analytics", APPS / "e2e-bare"
NODES = ("e-1", "e-2", "e-3")
#: The app's statistics are sums over rows: equal to numpy's up to float rounding.
FLOAT_REL = 1e-9
#: README's db_init.sh: column -> (low, span, integer), value = low + random() * span.
COLUMNS = {
    "age": (20, 60, True),
    "bmi": (18, 15, False),
    "systolic_bp": (100, 40, True),
    "diastolic_bp": (60, 25, True),
    "ldl_cholesterol": (70, 120, False),
    "hba1c": (4.5, 4, False),
}
ROWS = 25


def write_databases(folder: Path) -> dict[str, dict[str, np.ndarray]]:
    """One SQLite database per node (``<node>.db``), the README's ``person_measurements``
    table with ``ROWS`` rows each (a different seed per node); returns the columns."""
    folder.mkdir()
    data = {}
    for i, node in enumerate(NODES):
        rng = np.random.default_rng(i + 1)
        cols = {}
        for col, (low, span, integer) in COLUMNS.items():
            values = low + rng.random(ROWS) * span
            cols[col] = np.round(values) if integer else values
        con = sqlite3.connect(folder / f"{node}.db")
        types = ", ".join(f"{c} {'INTEGER' if COLUMNS[c][2] else 'FLOAT'}" for c in COLUMNS)
        con.execute(f"CREATE TABLE person_measurements (person_id INTEGER PRIMARY KEY, {types})")
        rows = [
            (k, *(int(cols[c][k]) if COLUMNS[c][2] else float(cols[c][k]) for c in COLUMNS))
            for k in range(ROWS)
        ]
        con.executemany(f"INSERT INTO person_measurements VALUES ({', '.join('?' * 7)})", rows)
        con.commit()
        con.close()
        data[node] = cols
    return data


def analytics_spec(db_folder: Path, timeout_s: float, faults: str) -> str:
    # the app reads its node config's db-url (README: flower-supernode --node-config)
    fl = (
        f"round_timeout_s: {timeout_s}\n"
        f"node_config: {{db-url: 'sqlite:///{db_folder}/{{node}}.db'}}\n"
    )
    return spec_yaml(str(ANALYTICS), fl=fl, extra="faults:\n" + textwrap.indent(faults, "  "))


def check_analytics(store: RunStore, run_id: str, run_dir: Path, data: dict) -> list[str]:
    """What a federated-analytics run must record whatever its faults; returns the nodes
    whose query completed (the app's own statistics are over their rows only)."""
    st = statuses(store, run_id)
    assert {r for r, _n in st} == {1}  # one query, one round
    done = sorted(n for n in NODES if st.get((1, n)) == "completed")
    # the app's MetricRecord keys, per node: each its own database's sums ({node})
    for key, col in (("age_mean_sum", "age"), ("hba1c_std_sum_sqd", "hba1c")):
        rows = {n: v for _r, n, _k, v, _t in store.metrics(run_id, key)}
        assert sorted(rows) == done, (key, rows)
        for n in done:
            want = float(np.sum(data[n][col] ** (2 if "sqd" in key else 1)))
            assert rows[n] == pytest.approx(want, rel=FLOAT_REL), (key, n)
    assert {n for _r, n, *_ in store.metrics(run_id, "age_std_count")} == set(done)
    # the app's own result, written to its working directory: the server node's folder
    stats = json.loads((Path(run_dir) / "nodes" / "cloud" / "aggregated_stats.json").read_text())
    for col in COLUMNS:
        pooled = np.concatenate([data[n][col] for n in done])
        assert stats[col]["mean"] == pytest.approx(pooled.mean(), rel=FLOAT_REL), col
        assert stats[col]["std"] == pytest.approx(pooled.std(ddof=1), rel=FLOAT_REL), col
    return done


def test_federated_analytics_with_a_crash_and_a_partition(tmp_path: Path) -> None:
    """e-2 crashes and e-1's link is cut (longer than the app's timeout) before the
    app's only round: e-3's database alone makes the app's statistics."""
    data = write_databases(tmp_path / "db")
    store = RunStore(tmp_path / "runs")
    text = analytics_spec(tmp_path / "db", 6, textwrap.dedent("""\
        - {kind: crash, node: e-2, at_round: 1}
        - {kind: partition, node: e-1, at_round: 1, duration_s: 20}
        """))  # fmt: skip
    res = run_experiment(parse_spec(text), store, spec_path="inline")
    assert res.status == "completed", res.summary
    assert check_analytics(store, res.run_id, res.artifact_dir, data) == ["e-3"]
    st = statuses(store, res.run_id)
    assert st[(1, "e-1")] in ("failed", "late")  # cut off for the app's timeout
    assert st[(1, "e-2")] in ("failed", "excluded")  # sent and lost, or not listed
    assert processes_under(tmp_path) == []


def test_federated_analytics_on_the_simulation_backend(tmp_path: Path) -> None:
    """The same app and faults on Flower's Simulation Engine: its ``query`` round is
    timed on the virtual clock, so e-1's reply, past the deadline behind its cut link,
    never reaches the app; e-2, down when the app samples, is not sampled
    (``excluded``); e-3's database alone makes the statistics."""
    data = write_databases(tmp_path / "db")
    store = RunStore(tmp_path / "runs")
    text = analytics_spec(tmp_path / "db", 6, textwrap.dedent("""\
        - {kind: crash, node: e-2, at_round: 1}
        - {kind: partition, node: e-1, at_round: 1, duration_s: 20}
        """))  # fmt: skip
    res = run_experiment(parse_spec(text), store, spec_path="inline", backend="simulation")
    assert res.status == "completed", res.summary
    assert check_analytics(store, res.run_id, res.artifact_dir, data) == ["e-3"]
    st = statuses(store, res.run_id)
    assert st[(1, "e-1")] == "failed" and st[(1, "e-2")] == "excluded"
    assert processes_under(tmp_path) == []


def bare_spec(timeout_s: float, faults: str) -> str:
    # e2e-bare declares no run config: its 3 rounds are in its code
    return spec_yaml(str(BARE), fl=f"round_timeout_s: {timeout_s}\n",
                     extra="faults:\n" + textwrap.indent(faults, "  "))  # fmt: skip


def check_bare(store: RunStore, run_id: str) -> dict[tuple[int, str], str]:
    """What an e2e-bare run must record whatever its faults (its ServerApp asserts its
    own loss, so a completed run has passed the app's check)."""
    st = statuses(store, run_id)
    # DefaultWorkflow: the initial parameters from one client (group id 0), 3 rounds
    assert [s for (r, _n), s in st.items() if r == 0] == ["completed"]
    assert {r for r, _n in st} == {0, 1, 2, 3}
    assert {st[(1, n)] for n in NODES} == {"completed"}  # before the faults
    assert all(st[(r, "e-3")] == "completed" for r in (1, 2, 3))  # untouched
    # the app's MetricRecords (Flower's compat layer: evaluateres.loss, *.num_examples)
    loss = {(r, n) for r, n, *_ in store.metrics(run_id, "loss")}
    assert {(r, "e-3") for r in (1, 2, 3)} <= loss
    examples = {(r, n) for r, n, *_ in store.metrics(run_id, "num_examples")}
    assert {(r, "e-3") for r in (1, 2, 3)} <= examples
    # its metrics dict (evaluate's ``accuracy``, 1 - loss) travels in a ConfigRecord
    # (evaluateres.metrics); its string ``timestamp`` and Flower's status are no metrics
    losses = {(r, n): v for r, n, _k, v, _t in store.metrics(run_id, "loss")}
    accuracy = {(r, n): v for r, n, _k, v, _t in store.metrics(run_id, "accuracy")}
    assert {(r, "e-3") for r in (1, 2, 3)} <= set(accuracy)
    assert set(accuracy) == set(losses)
    for key, acc in accuracy.items():
        assert acc == pytest.approx(1 - losses[key], abs=FLOAT_REL), key
    assert store.metrics(run_id, "timestamp") == store.metrics(run_id, "code") == []
    return st


def test_e2e_bare_with_a_crash_and_a_partition(tmp_path: Path) -> None:
    """Flower's legacy-API app on 3 edge nodes: e-2 crashes before round 2, e-1's link
    is cut before round 2 for longer than the round deadline."""
    store = RunStore(tmp_path)
    text = bare_spec(6, textwrap.dedent("""\
        - {kind: crash, node: e-2, at_round: 2}
        - {kind: partition, node: e-1, at_round: 2, duration_s: 8}
        """))  # fmt: skip
    res = run_experiment(parse_spec(text), store, spec_path="inline")
    assert res.status == "completed", res.summary
    st = check_bare(store, res.run_id)
    assert all(st.get((r, "e-2")) not in (None, "completed") for r in (2, 3))  # crashed
    assert st[(2, "e-1")] in ("failed", "late")  # cut off for the round's deadline
    why = {(r, n): w for r, n, _s, w in store.round_status(res.run_id)}
    assert why[(2, "e-1")].startswith("train: ")  # (its evaluate may come after the cut)
    assert (2, "e-2") not in {(r, n) for r, n, *_ in store.metrics(res.run_id, "loss")}
    assert processes_under(tmp_path) == []


def test_e2e_bare_on_the_simulation_backend(tmp_path: Path) -> None:
    """The legacy app on Flower's Simulation Engine with e-2 crashed before round 2:
    its train messages carry no ``server-round`` but their group id is the round, so
    the virtual clock times them and fires the fault at round 2 (Ray's start, on the
    wall clock, counts against no deadline)."""
    store = RunStore(tmp_path)
    text = bare_spec(6, "- {kind: crash, node: e-2, at_round: 2}\n")
    res = run_experiment(parse_spec(text), store, spec_path="inline", backend="simulation")
    assert res.status == "completed", res.summary
    st = check_bare(store, res.run_id)
    assert processes_under(tmp_path) == []
    assert all(st.get((r, "e-2")) not in (None, "completed") for r in (2, 3))
    virtual = [row[3] for row in store.metrics(res.run_id, "virtual_round_s")]
    assert len(virtual) == 3, virtual  # its three train rounds, timed
