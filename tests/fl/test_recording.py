"""The recording strategy wrapper (nodes/fl/recording.py) on real replies of the real
ClientApp (in process, ``tests/fl/federation.py``): what it records, and that it leaves
aggregation to the strategy it holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from federation import LoopbackGrid, run_federation
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp.strategy import FedAvg, FedMedian

from nodes.fl import task
from nodes.fl.config import FLSpec
from nodes.fl.late import StalePolicy
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

    def send(self, server_round: int) -> list[Message]:
        """Configure and push a round; return the replies (not yet aggregated)."""
        msgs = list(
            self.strategy.configure_train(
                server_round, self.arrays, ConfigRecord({"lr": SPEC.lr}), self.grid
            )
        )
        return list(self.grid.pull_messages(list(self.grid.push_messages(msgs))))


@pytest.fixture
def setup(tmp_path: Path) -> tuple[RecordingStrategy, LoopbackGrid, Path]:
    path = tmp_path / "telemetry.jsonl"
    strategy = RecordingStrategy(
        FedAvg(min_available_nodes=3), Telemetry(path), NAMES, SPEC.rounds, "piggyback"
    )
    return strategy, LoopbackGrid(SPEC, 3, 3), path


def test_names_statuses_and_bytes_of_a_round(setup) -> None:  # noqa: ANN001
    strategy, grid, path = setup
    rnd = Round(strategy, grid)
    replies = rnd.send(1)
    arrays, _metrics = strategy.aggregate_train(1, replies)
    assert arrays is not None
    statuses = {(r["node"], r["status"]) for r in records(path, "status")}
    assert statuses == {(n, "completed") for n in NAMES}
    ids = {r["data"]["node_id"]: r["node"] for r in records(path, "event", "node_identified")}
    assert sorted(ids.values()) == NAMES and set(ids) == {"1000", "1001", "1002"}
    sent = {r["node"]: r["value"] for r in records(path, "metric", "bytes_sent")}
    assert set(sent.values()) == {float(task.array_nbytes(rnd.arrays))}
    losses = {r["node"] for r in records(path, "metric", "train_loss")}
    assert losses == set(NAMES)


def test_silent_node_is_failed_then_late_and_aggregated_with_decay(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    stale = StalePolicy("accept", decay=0.5, max_staleness=2)
    strategy = RecordingStrategy(
        FedAvg(min_available_nodes=3), Telemetry(path), NAMES, 3, "piggyback", stale
    )
    grid = LoopbackGrid(SPEC, 3, 3)
    rnd = Round(strategy, grid)
    replies = rnd.send(1)
    late = next(r for r in replies if r.content["metrics"]["partition-id"] == 2)
    strategy.aggregate_train(1, [r for r in replies if r is not late])
    grid.withhold(late)  # it reaches the SuperLink after round 1 closed
    assert ("silo-c", "failed") not in {(r["node"], r["status"]) for r in records(path, "status")}
    failed = [r for r in records(path, "status") if r["status"] == "failed"]
    assert [r["reason"] for r in failed] == ["no reply before round timeout"]
    assert failed[0]["node"] == "node-1002"  # never answered yet: no name
    strategy.aggregate_train(2, rnd.send(2))
    lates = [r for r in records(path, "status") if r["status"] == "late"]
    assert [(r["round"], r["node"]) for r in lates] == [(1, "silo-c")]
    assert "aggregated with decayed weight" in lates[0]["reason"]
    accepted = records(path, "metric", "stale_accepted")
    assert [(r["round"], r["value"]) for r in accepted] == [(2, 1.0)]
    assert late.content["metrics"]["num-examples"] == pytest.approx(
        len(task.get_splits(SPEC, 3, 3).silo_train[2]) * 0.5
    )


def test_error_reply_is_a_failed_status_with_its_reason(setup) -> None:  # noqa: ANN001
    from flwr.app.error import Error

    strategy, grid, path = setup
    rnd = Round(strategy, grid)
    replies = rnd.send(1)
    bad = Message(Error(code=1, reason="boom"), reply_to=rnd.grid.sent[0])
    ok = [r for r in replies if r.metadata.reply_to_message_id != grid.sent[0].metadata.message_id]
    strategy.aggregate_train(1, [*ok, bad])
    failed = [r for r in records(path, "status") if r["status"] == "failed"]
    assert [r["reason"] for r in failed] == ["boom"]
    lost = records(path, "metric", "bytes_lost")
    assert [r["value"] for r in lost] == [float(task.array_nbytes(rnd.arrays))]


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
    strategy.aggregate_train(1, rnd.send(1))  # ids 1000-1002 learned
    old = grid.contexts[1002]
    grid.contexts[1003] = Context(  # silo-c again, under the id of its new registration
        run_id=1,
        node_id=1003,
        node_config=dict(old.node_config),
        state=RecordDict(),
        run_config=dict(old.run_config),
    )
    replies = rnd.send(2)
    to_old = next(m for m in grid.sent[-4:] if m.metadata.dst_node_id == 1002)
    replies = [r for r in replies if r.metadata.reply_to_message_id != to_old.metadata.message_id]
    if ghost == "error":  # e.g. the SuperLink answers for a node it lost; put it last
        replies.append(Message(Error(code=1, reason="node gone"), reply_to=to_old))
    strategy.aggregate_train(2, replies)
    round2 = [(r["node"], r["status"]) for r in records(path, "status") if r["round"] == 2]
    assert sorted(round2) == [(n, "completed") for n in NAMES]
    stale = records(path, "event", "stale_node_id")
    assert [(e["round"], e["node"], e["data"]["node_id"]) for e in stale] == [(2, "silo-c", "1002")]
    lost = [r for r in records(path, "metric", "bytes_lost") if r["round"] == 2]
    assert lost == []


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
    fed = run_federation(
        RecordingStrategy(inner, Telemetry(path), NAMES, 1, "separate"), SPEC, rounds=1
    )
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
