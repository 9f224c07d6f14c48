"""The Grid's observer (nodes/fl/grid_observer.py) as a foreign app meets it: nobody
tells it when a round is over, so it closes a round when the next one starts (or the
app ends). Real ClientApp replies in process (``tests/fl/federation.py``), Flower's
FedAvg making the messages, and Flower's own ``send_and_receive`` shape (a silent node
holds the call until its timeout)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from federation import LoopbackGrid
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.app.error import Error
from flwr.serverapp.strategy import FedAvg

from nodes.fl import task
from nodes.fl.config import FLSpec
from nodes.fl.grid_observer import GridObserver
from nodes.fl.telemetry import Telemetry

SPEC = FLSpec.model_validate({"rounds": 3, "local_epochs": 1})
TIMEOUT_S = 0.3


def records(path: Path, kind: str, name: str | None = None) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind and (name is None or r.get("name") == name)]


def statuses(path: Path) -> dict[tuple[int, str], tuple[str, str]]:
    """(round, node) -> (status, reason), the last one written (as the store keeps it)."""
    return {(r["round"], r["node"]): (r["status"], r["reason"]) for r in records(path, "status")}


def test_a_round_closes_when_the_next_starts_and_a_late_reply_is_late(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    grid = LoopbackGrid(SPEC, 3, 3)
    observer = GridObserver(Telemetry(path), ["a", "b", "c"])
    observer.attach(grid)
    strategy = FedAvg(min_available_nodes=3)
    arrays = ArrayRecord(task.make_model(SPEC, task.get_splits(SPEC, 3, 3)).state_dict())
    config = ConfigRecord({"lr": SPEC.lr})
    grid.silent = {1002}
    sent = list(strategy.configure_train(1, arrays, config, grid))
    t0 = time.time()
    assert len(list(grid.send_and_receive(sent, timeout=TIMEOUT_S))) == 2
    call_s = time.time() - t0  # the call: training (in process), then the wait
    assert records(path, "status") == []  # round 1 not closed yet: the app may pull more
    grid.silent = set()
    grid.send_and_receive(strategy.configure_train(2, arrays, config, grid), timeout=TIMEOUT_S)
    st = statuses(path)
    assert st[(1, "node-1000")] == st[(1, "node-1001")] == ("completed", "")
    assert st[(1, "node-1002")] == (
        "failed",
        f"train: no reply within the app's timeout ({TIMEOUT_S} s)",
    )
    (dur,) = records(path, "metric", "round_duration_s")  # round 1's, held by the silent node
    # from the first push (after the test's t0) to the call's return (before its end),
    # across the wait for the silent node: within the call, and at least the timeout
    assert TIMEOUT_S <= dur["value"] <= call_s, (dur, call_s)
    nbytes = float(task.array_nbytes(arrays))
    sent1 = {r["node"]: r["value"] for r in records(path, "metric", "bytes_sent")}
    assert sent1 == {f"node-{i}": nbytes for i in (1000, 1001, 1002)}
    lost = [(r["round"], r["node"]) for r in records(path, "metric", "bytes_lost")]
    assert lost == [(1, "node-1002")]
    # the reply reaches the SuperLink now; the app pulls it during round 2: late, round 1
    grid.release()
    to_1002 = next(m for m in sent if m.metadata.dst_node_id == 1002)
    assert len(list(grid.pull_messages([to_1002.metadata.message_id]))) == 1
    status, reason = statuses(path)[(1, "node-1002")]
    assert status == "late" and "pulled in round 2" in reason
    got = [(r["round"], r["node"]) for r in records(path, "metric", "bytes_received")]
    assert got.count((1, "node-1002")) == 1
    # the app ends: round 2 closed, every round started and ended once
    observer.finish()
    assert [e["round"] for e in records(path, "event", "round_start")] == [1, 2]
    assert [e["round"] for e in records(path, "event", "round_end")] == [1, 2]
    assert {k: v for k, v in statuses(path).items() if k[0] == 2} == {
        (2, f"node-{i}"): ("completed", "") for i in (1000, 1001, 1002)
    }


def test_an_error_pulled_after_its_round_closed_is_an_event(tmp_path: Path) -> None:
    """A message that failed (no reply) and then gets Flower's error: still failed, the
    error is recorded as an event; an error reply is no round trip."""
    path = tmp_path / "t.jsonl"
    grid = LoopbackGrid(SPEC, 3, 2)
    observer = GridObserver(Telemetry(path), ["a", "b"])
    observer.attach(grid)
    arrays = ArrayRecord(task.make_model(SPEC, task.get_splits(SPEC, 3, 2)).state_dict())
    grid.silent = {1001}
    msgs = list(FedAvg(min_available_nodes=2).configure_train(1, arrays, ConfigRecord(), grid))
    grid.send_and_receive(msgs, timeout=0.05)
    observer.close_round(1)
    to_1001 = next(m for m in msgs if m.metadata.dst_node_id == 1001)
    grid._replies[to_1001.metadata.message_id] = Message(
        Error(0, "objects missing"), reply_to=to_1001
    )
    grid.pull_messages([to_1001.metadata.message_id])
    assert statuses(path)[(1, "node-1001")][0] == "failed"
    (ev,) = records(path, "event", "late_reply")
    assert (ev["round"], ev["node"]) == (1, "node-1001")
    assert "objects missing (Flower error 0)" in str(ev["data"]["error"])  # type: ignore[index]
    trips = {r["node"] for r in records(path, "metric", "round_trip_s")}
    assert trips == {"node-1000"}


def test_on_the_dilated_clock_a_timeout_is_named_in_emulated_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under time dilation (``TESTBED_TDF``) the app's timeout is wall seconds; the
    failure names it in emulated seconds too, as every figure of the run is."""
    monkeypatch.setenv("TESTBED_TDF", "2")
    path = tmp_path / "t.jsonl"
    grid = LoopbackGrid(SPEC, 3, 2)
    GridObserver(Telemetry(path), ["a", "b"]).attach(grid)
    arrays = ArrayRecord(task.make_model(SPEC, task.get_splits(SPEC, 3, 2)).state_dict())
    grid.silent = {1001}
    msgs = FedAvg(min_available_nodes=2).configure_train(1, arrays, ConfigRecord(), grid)
    grid.send_and_receive(msgs, timeout=0.2)
    grid.send_and_receive(
        FedAvg(min_available_nodes=2).configure_train(2, arrays, ConfigRecord(), grid)
    )
    assert statuses(path)[(1, "node-1001")] == (
        "failed",
        "train: no reply within the app's timeout (0.1 s emulated, 0.2 s wall)",
    )
