"""bench/diloco.py and bench/diloco_clock.py: the round clock read from a real run store,
wall time to accuracy (with and without the faulty rounds), the edge link override."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from testbed.rows import EventRow
from testbed.store import RunStore

ROOT = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_diloco", ROOT / "bench" / "diloco.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_diloco"] = mod
    spec.loader.exec_module(mod)
    return mod


diloco = _load()  # puts the repository root on sys.path, so bench.diloco_clock imports
clock = importlib.import_module("bench.diloco_clock")

T0 = 1_000_000.0  # round 1 starts here (Unix s)


def _records() -> list[dict[str, Any]]:
    """What the server's telemetry writes for a 3-round run (round 0: the initial model)."""
    recs: list[dict[str, Any]] = [
        {"kind": "metric", "name": "global_acc", "value": 0.1, "round": 0, "t": T0 - 5.0},
        {"kind": "status", "round": 1, "node": "edge-2", "status": "failed", "reason": "down",
         "t": T0 + 9.0},
    ]  # fmt: skip
    for rnd, (start, end, acc) in enumerate(
        [(0.0, 10.0, 0.5), (10.5, 16.0, 0.86), (16.5, 30.0, 0.9)], start=1
    ):
        recs += [
            {"kind": "event", "name": "round_start", "round": rnd, "t": T0 + start,
             "data": {"sampled": 4}},
            {"kind": "metric", "name": "bytes_received", "value": 100.0, "round": rnd,
             "node": "edge-0", "t": T0 + end - 1.0},
            {"kind": "event", "name": "round_end", "round": rnd, "t": T0 + end,
             "data": {"replies": 4}},
            {"kind": "metric", "name": "global_acc", "value": acc, "round": rnd,
             "t": T0 + end + 0.25},
        ]  # fmt: skip
    return recs


@pytest.fixture
def stored(tmp_path: Path) -> dict[str, Any]:
    """The bench's per-run result for the 3 rounds above, collected from a real store."""
    store = RunStore(tmp_path / "runs")
    store.create_run("r1", "diloco", seed=1, backend="local")
    store.ingest("r1", _records())
    got: dict[str, Any] = diloco._collect(store, "r1")
    store.close()
    return {**got, "rounds": 3, "seed": 1, "strategy": "fedavg", "local_epochs": 4,
            "outer_lr": None, "edge_mbps": 1.0, "edge_latency_ms": 30.0}  # fmt: skip


def test_round_clock_is_relative_to_round_one_start(stored: dict[str, Any]) -> None:
    rc = stored["round_clock"]
    assert list(rc) == ["1", "2", "3"]  # round 0's accuracy has no round to belong to
    assert rc["1"] == {"start_s": 0.0, "end_s": 10.0, "acc_s": 10.25}
    assert rc["2"] == {"start_s": 10.5, "end_s": 16.0, "acc_s": 16.25}
    assert rc["3"]["end_s"] == 30.0


def test_round_clock_without_round_one_is_empty() -> None:
    ev = EventRow(1, T0, "round_end", 1, None, None)
    assert clock.round_clock([ev], []) == {}


def test_time_to_target(stored: dict[str, Any]) -> None:
    assert clock.time_to(stored, 0.85) == (2, 16.0)  # round 2's end, not its accuracy time
    assert clock.time_to(stored, 0.9) == (3, 30.0)
    assert clock.time_to(stored, 0.95) is None  # never reached
    assert clock.time_to(stored, 0.05) == (0, 0.0)  # the initial model already does
    no_clock = {k: v for k, v in stored.items() if k != "round_clock"}
    assert clock.time_to(no_clock, 0.85) is None  # results from before the clock


def test_time_to_target_less_faulty_rounds(stored: dict[str, Any]) -> None:
    assert stored["not_completed"] == [[1, "edge-2", "failed", "down"]]
    assert clock.fault_rounds(stored) == {1}
    assert clock.time_to_clear(stored, 0.85) == pytest.approx(6.0)  # 16 s less round 1's 10
    assert clock.time_to_clear(stored, 0.95) is None
    late = {**stored, "not_completed": [[3, "edge-2", "failed", "down"]]}
    assert clock.time_to_clear(late, 0.85) == pytest.approx(16.0)  # round 3 comes after


def test_first_round() -> None:
    acc = {"0": 0.1, "10": 0.9, "2": 0.86, "1": None}
    assert clock.first_round(acc, 0.85) == 2  # by round number, not by text order
    assert clock.first_round(acc, 0.88) == 10
    assert clock.first_round(acc, 0.95) is None


def test_seconds_per_round(stored: dict[str, Any]) -> None:
    assert clock.round_seconds(stored) == {1: 10.0, 2: 5.5, 3: 13.5}
    assert clock.cycle_seconds(stored) == pytest.approx(10.0)  # 30 s / 3 rounds
    del stored["round_clock"]["3"]["end_s"]
    assert clock.round_seconds(stored) == {1: 10.0, 2: 5.5}
    assert clock.cycle_seconds(stored) is None


def test_timing_table(stored: dict[str, Any]) -> None:
    other = {**stored, "seed": 2, "round_clock": {
        k: {kk: 2 * v for kk, v in c.items()} for k, c in stored["round_clock"].items()}}
    text = diloco.timing([stored, other], 0.85)
    assert text.startswith("edge-cloud link: 1 Mbit/s, 30 ms")
    row = text.splitlines()[-1]
    # wall s to 0.85: 16 and 32 (mean 24, std 11.3); less the failed round 1: 6 and 12;
    # per round: 10 and 20 s; median train phase: 10 and 20 s; payload: 2 rounds x 100 B
    assert row == (
        "| fedavg:4 | 24.0 +- 11.3 (2/2) | s1: 16.0 (r2), s2: 32.0 (r2) | "
        "9.0 +- 4.2 | 2.0 +- 0.0 | 15.0 +- 7.1 | 15.0 +- 7.1 | 0.00 +- 0.00 |"
    )


def test_link_of_refuses_mixed_links(stored: dict[str, Any]) -> None:
    assert clock.link_of([stored, stored]) == "1 Mbit/s, 30 ms"
    fast = {**stored, "edge_mbps": 20.0}
    with pytest.raises(ValueError, match="one JSON per link"):
        clock.link_of([stored, fast])
    old = {k: v for k, v in stored.items() if not k.startswith("edge_")}
    assert clock.link_of([old]) == "the experiment's (not recorded)"


def test_spec_for_overrides_only_the_edge_link() -> None:
    base = diloco.spec_for("fedavg", 4, 1, None)
    slow = diloco.spec_for("diloco", 4, 2, 0.7, (1.0, None))
    assert base.links.defaults["edge-cloud"].bandwidth_mbps == 20
    assert slow.links.defaults["edge-cloud"].bandwidth_mbps == 1.0
    assert slow.links.defaults["edge-cloud"].latency_ms == 30  # the experiment's
    assert slow.links.defaults["fog-cloud"] == base.links.defaults["fog-cloud"]
    assert slow.seed == 2 and not slow.sweep.grid
    both = diloco.spec_for("fedavg", 1, 1, None, (2.0, 80.0))
    assert both.links.defaults["edge-cloud"].latency_ms == 80.0
