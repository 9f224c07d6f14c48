"""The recording strategy wrapper (nodes/fl/recording.py) on real replies of the real
ClientApp (in process, ``tests/fl/federation.py``): what it records, and that it leaves
aggregation to the strategy it holds; with the Grid's observer (nodes/fl/own_app.py,
nodes/fl/grid_observer.py), as the ServerApp runs them: one recording mechanism, every
status, byte, duration, round event and reply metric is the observer's record."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from federation import LoopbackGrid, run_federation
from flwr.app import Array, ArrayRecord, ConfigRecord, Message
from flwr.serverapp.strategy import FedAvg, FedMedian

from nodes.fl import task
from nodes.fl.config import FLSpec
from nodes.fl.late import StalePolicy
from nodes.fl.own_app import TRAIN_METRICS, OwnAppObserver
from nodes.fl.recording import RecordingStrategy
from nodes.fl.telemetry import Telemetry

SPEC = FLSpec.model_validate({"rounds": 3, "local_epochs": 1})
NAMES = ["silo-a", "silo-b", "silo-c"]


def records(path: Path, kind: str, name: str | None = None) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind and (name is None or r.get("name") == name)]


class Round:
    """Drive one round by hand: configure, deliver through the real ClientApp, reply."""

    def __init__(self, strategy: RecordingStrategy, grid: LoopbackGrid) -> None:
        self.strategy, self.grid = strategy, grid
        self.arrays = ArrayRecord(task.make_model(SPEC, task.get_splits(SPEC, 3, 3)).state_dict())

    def send(
        self, server_round: int, at_superlink: Callable[[list[Message]], None] | None = None
    ) -> list[Message]:
        """Configure and push a round; return the replies (not yet aggregated).
        ``at_superlink(messages)`` may change the replies waiting at the SuperLink
        (``grid._replies``, by message id) before they are pulled."""
        msgs = list(
            self.strategy.configure_train(
                server_round, self.arrays, ConfigRecord({"lr": SPEC.lr}), self.grid
            )
        )
        ids = list(self.grid.push_messages(msgs))
        if at_superlink is not None:
            at_superlink(msgs)
        return list(self.grid.pull_messages(ids))

    def aggregate(self, server_round: int, replies: list[Message]) -> ArrayRecord | None:
        """What Flower's ``Strategy.start`` does with a round's replies: aggregate them,
        then send and aggregate the round's evaluation (none under ``piggyback`` before
        the last round); the global model."""
        arrays, _metrics = self.strategy.aggregate_train(server_round, replies)
        msgs = self.strategy.configure_evaluate(
            server_round, self.arrays, ConfigRecord(), self.grid
        )
        self.strategy.aggregate_evaluate(server_round, self.grid.send_and_receive(msgs))
        return arrays


@pytest.fixture
def setup(tmp_path: Path) -> tuple[RecordingStrategy, LoopbackGrid, Path]:
    path = tmp_path / "telemetry.jsonl"
    strategy = RecordingStrategy(
        FedAvg(min_available_nodes=3), Telemetry(path), NAMES, SPEC.rounds, "piggyback"
    )
    return strategy, observed(strategy, LoopbackGrid(SPEC, 3, 3)), path


def observed(strategy: RecordingStrategy, grid: LoopbackGrid) -> LoopbackGrid:
    """``grid`` with the observer the ServerApp attaches (the strategy's node names)."""
    assert isinstance(strategy.observe(grid), OwnAppObserver)
    return grid


def statuses(path: Path) -> list[tuple[int, str, str]]:
    """(round, node, status) of every status record, in the order written."""
    return [(r["round"], r["node"], r["status"]) for r in records(path, "status")]


def test_names_statuses_and_bytes_of_a_round(setup) -> None:  # noqa: ANN001
    strategy, grid, path = setup
    rnd = Round(strategy, grid)
    assert rnd.aggregate(1, rnd.send(1)) is not None
    statuses = {(r["node"], r["status"]) for r in records(path, "status")}
    assert statuses == {(n, "completed") for n in NAMES}
    ids = {r["data"]["node_id"]: r["node"] for r in records(path, "event", "node_identified")}
    assert sorted(ids.values()) == NAMES and set(ids) == {"1000", "1001", "1002"}
    sent = {r["node"]: r["value"] for r in records(path, "metric", "bytes_sent")}
    assert sent == {n: float(task.array_nbytes(rnd.arrays)) for n in NAMES}
    got = {r["node"] for r in records(path, "metric", "bytes_received")}
    trips = {r["node"] for r in records(path, "metric", "round_trip_s")}
    assert got == trips == set(NAMES) and records(path, "metric", "bytes_lost") == []
    losses = {r["node"] for r in records(path, "metric", "train_loss")}
    assert losses == set(NAMES)
    # the round's events and duration, once each, by the observer
    starts, ends = records(path, "event", "round_start"), records(path, "event", "round_end")
    assert [(e["round"], e["data"]["sampled"]) for e in starts] == [(1, 3)]
    assert [(e["round"], e["data"]["replies"]) for e in ends] == [(1, 3)]
    assert [r["round"] for r in records(path, "metric", "round_duration_s")] == [1]


def test_silent_node_is_failed_then_late_and_aggregated_with_decay(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    stale = StalePolicy("accept", decay=0.5, max_staleness=2)
    strategy = RecordingStrategy(
        FedAvg(min_available_nodes=3), Telemetry(path), NAMES, 3, "piggyback", stale
    )
    grid = observed(strategy, LoopbackGrid(SPEC, 3, 3))
    grid.silent = {1002}  # silo-c's reply reaches the SuperLink after round 1 closed
    rnd = Round(strategy, grid)
    rnd.aggregate(1, rnd.send(1))
    assert ("silo-c", "failed") not in {(r["node"], r["status"]) for r in records(path, "status")}
    failed = [r for r in records(path, "status") if r["status"] == "failed"]
    assert [r["reason"] for r in failed] == ["train: no reply before its round ended"]
    assert failed[0]["node"] == "node-1002"  # never answered yet: no name
    # a failed node was sent the model too, and lost it
    sent = {r["node"]: r["value"] for r in records(path, "metric", "bytes_sent")}
    lost = {r["node"]: r["value"] for r in records(path, "metric", "bytes_lost")}
    assert sent["node-1002"] == lost["node-1002"] == float(task.array_nbytes(rnd.arrays))
    (late,) = grid._held.values()
    grid.silent = set()
    grid.release()
    rnd.aggregate(2, rnd.send(2))
    lates = [r for r in records(path, "status") if r["status"] == "late"]
    assert [(r["round"], r["node"]) for r in lates] == [(1, "silo-c")]
    assert "pulled in round 2" in lates[0]["reason"]
    # the app's own decision about it, and its reply's bytes for its own round
    (upd,) = records(path, "event", "stale_update")
    assert (upd["round"], upd["node"], upd["data"]["action"]) == (1, "silo-c", "aggregated")
    assert upd["data"]["staleness"] == 1 and upd["data"]["weight_factor"] == 0.5
    got = [(r["round"], r["node"]) for r in records(path, "metric", "bytes_received")]
    assert (1, "silo-c") in got
    accepted = records(path, "metric", "stale_accepted")
    assert [(r["round"], r["value"]) for r in accepted] == [(2, 1.0)]
    assert late.content["metrics"]["num-examples"] == pytest.approx(
        len(task.get_splits(SPEC, 3, 3).silo_train[2]) * 0.5
    )
    # round 2's statuses (at its aggregation), then round 1's late reply (pulled then)
    *round2, last = statuses(path)[-4:]
    assert sorted(round2) == [(2, n, "completed") for n in NAMES] and last == (1, "silo-c", "late")


def test_statuses_appear_at_aggregation_and_a_round_lasts_until_its_deadline(
    tmp_path: Path,
) -> None:
    """Through Flower's own call (``send_and_receive``): a silent node holds the round
    until the app's timeout, so ``round_duration_s`` includes the wait, and the failure
    names it; the round's records are written when the strategy aggregates, not when
    the next round's first message goes out."""
    path = tmp_path / "t.jsonl"
    strategy = RecordingStrategy(
        FedAvg(min_available_nodes=3), Telemetry(path), NAMES, 3, "piggyback"
    )
    grid = observed(strategy, LoopbackGrid(SPEC, 3, 3))
    grid.silent = {1001}
    arrays = Round(strategy, grid).arrays
    timeout_s = 0.6
    msgs = strategy.configure_train(1, arrays, ConfigRecord({"lr": SPEC.lr}), grid)
    t0 = time.time()
    replies = list(grid.send_and_receive(msgs, timeout=timeout_s))
    call_s = time.time() - t0  # the call: training (in process), then the wait
    assert len(replies) == 2 and records(path, "status") == []
    assert records(path, "event", "round_end") == []
    strategy.aggregate_train(1, replies)
    why = {r["node"]: r["reason"] for r in records(path, "status") if r["status"] == "failed"}
    assert why == {"node-1001": f"train: no reply within the app's timeout ({timeout_s} s)"}
    (dur,) = records(path, "metric", "round_duration_s")
    # from the first push (after the test's t0) to the call's return (before its end),
    # across the wait for the silent node: within the call, and at least the timeout
    assert timeout_s <= dur["value"] <= call_s, (dur, call_s)
    (end,) = records(path, "event", "round_end")
    assert end["data"]["duration_s"] == pytest.approx(dur["value"])


def test_error_reply_is_a_failed_status_with_its_reason(setup) -> None:  # noqa: ANN001
    from flwr.app.error import Error

    strategy, grid, path = setup
    rnd = Round(strategy, grid)

    def boom(msgs: list[Message]) -> None:  # the first node's reply: Flower's error
        grid._replies[msgs[0].metadata.message_id] = Message(
            Error(code=1, reason="boom"), reply_to=msgs[0]
        )

    rnd.aggregate(1, rnd.send(1, boom))
    failed = [r for r in records(path, "status") if r["status"] == "failed"]
    assert [r["reason"] for r in failed] == ["train: boom (Flower error 1)"]
    lost = records(path, "metric", "bytes_lost")
    assert [r["value"] for r in lost] == [float(task.array_nbytes(rnd.arrays))]
    sent = records(path, "metric", "bytes_sent")  # every node sent one, the failed one too
    assert sorted(r["node"] for r in sent) == sorted(n for _r, n, _s in statuses(path))
    assert len(sent) == 3


@pytest.mark.parametrize("ghost", ["silent", "error"])
def test_old_node_id_of_a_restarted_node_does_not_overwrite_its_reply(
    setup,
    ghost: str,  # noqa: ANN001
) -> None:
    """A restarted SuperNode registers a new Flower node id; its old id is still sampled
    until its heartbeat expires and fails. The node's own reply stands (soak finding)."""
    from flwr.app.error import Error
    from flwr.common import Context, RecordDict

    strategy, grid, path = setup
    rnd = Round(strategy, grid)
    rnd.aggregate(1, rnd.send(1))  # ids 1000-1002 learned
    old = grid.contexts[1002]
    grid.contexts[1003] = Context(  # silo-c again, under the id of its new registration
        run_id=1,
        node_id=1003,
        node_config=dict(old.node_config),
        state=RecordDict(),
        run_config=dict(old.run_config),
    )

    def ghost_of_1002(msgs: list[Message]) -> None:
        to_old = next(m for m in msgs if m.metadata.dst_node_id == 1002)
        del grid._replies[to_old.metadata.message_id]  # the old id never answers ...
        if ghost == "error":  # ... or the SuperLink answers for a node it lost, last
            grid._replies[to_old.metadata.message_id] = Message(
                Error(code=1, reason="node gone"), reply_to=to_old
            )

    rnd.aggregate(2, rnd.send(2, ghost_of_1002))
    round2 = [(r["node"], r["status"]) for r in records(path, "status") if r["round"] == 2]
    assert sorted(round2) == [(n, "completed") for n in NAMES]
    stale = records(path, "event", "stale_node_id")
    assert [(e["round"], e["node"], e["data"]["node_id"]) for e in stale] == [(2, "silo-c", "1002")]
    assert ("node gone" in stale[0]["data"]["reason"]) == (ghost == "error")
    lost = [r for r in records(path, "metric", "bytes_lost") if r["round"] == 2]
    assert lost == []
    sent = [r["node"] for r in records(path, "metric", "bytes_sent") if r["round"] == 2]
    assert sorted(sent) == NAMES  # silo-c's once: its old id is not the node
    assert strategy.late.pending == {}  # nor awaited as a late reply


def test_federated_accuracy_weighs_each_silo_by_its_evaluation_count(setup) -> None:  # noqa: ANN001
    strategy, grid, path = setup
    rnd = Round(strategy, grid)
    strategy.aggregate_train(1, rnd.send(1))
    replies = rnd.send(2)
    # what each silo reports about the round-1 model: accuracy and its test count;
    # training counts are deliberately far from proportional to the test counts
    reported = {0: (1.0, 10, 1000), 1: (0.0, 30, 10), 2: (0.5, 60, 10)}
    for r in replies:
        m = r.content["metrics"]
        acc, n_eval, n_train = reported[int(m["partition-id"])]
        m["eval-acc"], m["eval-examples"], m["num-examples"] = acc, n_eval, n_train
    strategy.aggregate_train(2, replies)
    fed = [(r["round"], r["value"]) for r in records(path, "metric", "federated_acc")]
    assert fed == [(1, pytest.approx((1.0 * 10 + 0.0 * 30 + 0.5 * 60) / 100))]


def test_piggyback_evaluates_only_after_the_last_round(setup) -> None:  # noqa: ANN001
    strategy, grid, _path = setup
    arrays = Round(strategy, grid).arrays
    assert list(strategy.configure_evaluate(2, arrays, ConfigRecord(), grid)) == []
    assert len(list(strategy.configure_evaluate(3, arrays, ConfigRecord(), grid))) == 3


def test_separate_evaluation_records_eval_and_federated_accuracy(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    inner = FedAvg(min_available_nodes=3)
    strategy = RecordingStrategy(inner, Telemetry(path), NAMES, 1, "separate")
    fed = run_federation(strategy, SPEC, rounds=1, attach=lambda g: observed(strategy, g))
    acc = {r["node"]: r["value"] for r in records(path, "metric", "eval_acc")}
    splits = task.get_splits(SPEC, 3, 3)
    n_test = {name: len(splits.silo_test[i]) for i, name in enumerate(NAMES)}
    want = sum(acc[n] * n_test[n] for n in NAMES) / sum(n_test.values())
    assert [r["value"] for r in records(path, "metric", "federated_acc")] == [pytest.approx(want)]
    assert len(fed.globals) == 2


def test_aggregation_is_the_inner_strategys(tmp_path: Path) -> None:
    """Same replies through the wrapper and without it: the same global model."""
    plain = run_federation(FedMedian(min_available_nodes=3), SPEC, rounds=1)
    wrapped = run_federation(
        RecordingStrategy(FedMedian(min_available_nodes=3), Telemetry(None), NAMES, 1, "none"),
        SPEC,
        rounds=1,
    )
    for k, v in plain.globals[1].items():
        assert (wrapped.globals[1][k] == v).all()


def test_contributions_survive_a_strategy_that_consumes_the_replies(tmp_path: Path) -> None:
    """Flower's FedMedian pops every array from the replies while it aggregates; the
    contributions (computed after it) use the arrays as they arrived (fuzz: fedmedian and
    qfedavg runs with contributions failed in the ServerApp, loading an empty state)."""
    path = tmp_path / "telemetry.jsonl"
    model = task.make_model(SPEC, task.get_splits(SPEC, 3, 3))

    def score(arrays: ArrayRecord) -> float:  # loads the aggregate, as the server's does
        task.load(model, arrays)
        return float(sum(float(v.numpy().sum()) for v in arrays.values()))

    strategy = RecordingStrategy(
        FedMedian(min_available_nodes=3), Telemetry(path), NAMES, 1, "none",
        contribution_fn=score, shapley_permutations=4,
    )  # fmt: skip
    rnd = Round(strategy, LoopbackGrid(SPEC, 3, 3))
    arrays, _ = strategy.aggregate_train(1, rnd.send(1))
    assert arrays is not None
    loo = {r["node"] for r in records(path, "metric", "contribution")}
    shapley = {r["node"] for r in records(path, "metric", "shapley")}
    assert loo == shapley == set(NAMES)


def test_reply_metrics_are_recorded_by_the_observer_once(setup) -> None:  # noqa: ANN001
    """One recording mechanism (issue 28): every train reply's metrics, under the
    testbed's names, and the piggybacked evaluation for the round it evaluated, come
    from the Grid's observer, once per (round, node); the strategy records none."""
    strategy, grid, path = setup
    rnd = Round(strategy, grid)
    for r in (1, 2):
        strategy.aggregate_train(r, rnd.send(r))
    names = [out for key, out in TRAIN_METRICS if not key.startswith("tt-")]
    for name in names:
        rows = [(r["round"], r["node"]) for r in records(path, "metric", name)]
        assert sorted(rows) == [(r, n) for r in (1, 2) for n in NAMES], name
    # the values are the replies' own (grid.replies: copies as they arrived)
    loss = {(r["round"], r["node"]): r["value"] for r in records(path, "metric", "train_loss")}
    arrived = zip(grid.sent_as, grid.replies, strict=True)
    assert loss == {(r, NAMES[rep.pid]): rep.metrics["train-loss"] for (_t, r), rep in arrived}
    # round 2's replies evaluated round 1's global model: eval_acc is round 1's
    acc = [(r["round"], r["node"]) for r in records(path, "metric", "eval_acc")]
    assert sorted(acc) == [(1, n) for n in NAMES]
    # the strategy alone (no observer on its grid) records no reply metric, no status,
    # no bytes, no round event: what comes of its aggregation only
    alone = path.with_name("alone.jsonl")
    bare = RecordingStrategy(FedAvg(min_available_nodes=3), Telemetry(alone), NAMES, 3, "piggyback")
    bare.aggregate_train(1, Round(bare, LoopbackGrid(SPEC, 3, 3)).send(1))
    assert {r["name"] for r in records(alone, "metric")} & {*names, "eval_acc"} == set()
    assert records(alone, "status") == [] and records(alone, "metric") == []
    assert {e["name"] for e in records(alone, "event")} == {"node_identified"}


@pytest.mark.parametrize("federated", ["separate", "piggyback"])
def test_an_evaluation_after_the_round_closed_keeps_its_records_once(
    tmp_path: Path, federated: str
) -> None:
    """The strategy closes a round at aggregation; the evaluation sent after that (every
    round under ``separate``, the last round under ``piggyback``) adds its bytes (one
    ``bytes_sent`` per round and node, as for any app) and replies to its round, and
    nothing is recorded twice."""
    path = tmp_path / "t.jsonl"
    strategy = RecordingStrategy(
        FedAvg(min_available_nodes=3), Telemetry(path), NAMES, 2, federated
    )
    fed = run_federation(strategy, SPEC, rounds=2, attach=lambda g: observed(strategy, g))
    assert strategy.observer is not None
    strategy.observer.finish()  # (the ServerApp's, when the app ends: nothing left)
    assert [e["round"] for e in records(path, "event", "round_start")] == [1, 2]
    assert [e["round"] for e in records(path, "event", "round_end")] == [1, 2]
    assert sorted(statuses(path)) == [(r, n, "completed") for r in (1, 2) for n in NAMES]
    evaluated = [1, 2] if federated == "separate" else [2]
    model = float(task.array_nbytes(ArrayRecord({k: Array(v) for k, v in fed.globals[0].items()})))
    sent = [(r["round"], r["node"], r["value"]) for r in records(path, "metric", "bytes_sent")]
    want = [(r, n, model * (1 + (r in evaluated))) for r in (1, 2) for n in NAMES]
    assert sorted(sent) == sorted(want)
    trips = [(r["round"], r["node"]) for r in records(path, "metric", "round_trip_s")]
    assert sorted(trips) == sorted(
        (r, n) for r in (1, 2) for n in NAMES for _ in range(1 + (r in evaluated))
    )
    assert records(path, "metric", "bytes_lost") == []
    assert records(path, "event", "message_failed") == []
    assert len(records(path, "metric", "round_duration_s")) == 2


def test_a_failed_evaluation_after_the_round_closed_is_an_event(setup) -> None:  # noqa: ANN001
    """Under ``separate``, an evaluation that gets no reply after the round's training was
    aggregated: the round's statuses stand (its update was aggregated), the failure is a
    ``message_failed`` event with its bytes lost; the next round goes on."""
    strategy, grid, path = setup
    strategy.federated_eval = "separate"
    rnd = Round(strategy, grid)
    strategy.aggregate_train(1, rnd.send(1))
    grid.silent = {1001}
    msgs = strategy.configure_evaluate(1, rnd.arrays, ConfigRecord(), grid)
    strategy.aggregate_evaluate(1, grid.send_and_receive(msgs, timeout=0.1))
    assert sorted(statuses(path)) == [(1, n, "completed") for n in NAMES]
    (failed,) = records(path, "event", "message_failed")
    assert (failed["round"], failed["node"], failed["data"]["type"]) == (1, "silo-b", "evaluate")
    assert "no reply within the app's timeout (0.1 s)" in failed["data"]["reason"]
    lost = [(r["round"], r["node"]) for r in records(path, "metric", "bytes_lost")]
    assert lost == [(1, "silo-b")]
    grid.silent = set()
    strategy.aggregate_train(2, rnd.send(2))
    assert sorted(s for s in statuses(path) if s[0] == 2) == [(2, n, "completed") for n in NAMES]
    assert [e["round"] for e in records(path, "event", "round_end")] == [1, 2]
