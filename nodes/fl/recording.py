"""A strategy wrapper that records every round, node and reply to telemetry.

:class:`RecordingStrategy` holds any ``flwr.serverapp.strategy.Strategy`` and passes
every call on to it (as Flower's differential-privacy wrappers do); around the calls it
records per-(round, node) metrics, statuses, bytes and durations, reconstructs
TT-compressed updates before the inner strategy aggregates them, handles late replies
(``nodes/fl/late.py``) and skips evaluation rounds that ride along with training
(``piggyback``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from nodes.compression.device_time import TT_METRICS
from nodes.fl.contribution import (
    EXACT_MAX,
    CachedValue,
    leave_one_out,
    shapley_exact,
    shapley_monte_carlo,
)
from nodes.fl.identity import NodeDirectory
from nodes.fl.late import LateReplies, StalePolicy
from nodes.fl.task import array_nbytes, decode_delta, weighted_average
from nodes.fl.telemetry import Telemetry

#: reply metric key -> telemetry metric name, recorded for every train reply that has it.
TRAIN_METRICS = (
    ("train-loss", "train_loss"),
    ("train-duration-s", "train_duration_s"),
    ("train-cpu-s", "train_cpu_s"),
    ("device-time-s", "device_time_s"),
    ("num-examples", "num_examples"),
    *TT_METRICS,  # TT-SVD on the device: measured, stretched, modelled engine
)


def _num(metrics: MetricRecord, key: str) -> float:
    """A scalar metric of a reply as float (KeyError if absent, TypeError if a list)."""
    value = metrics[key]
    if not isinstance(value, int | float):
        raise TypeError(f"metric {key!r} is not a scalar: {value!r}")
    return float(value)


class RecordingStrategy(Strategy):
    """Record what happens to every message of ``strategy``; it does the aggregation.

    Parameters
    ----------
    strategy : Strategy
        The strategy that configures and aggregates (any Flower or user strategy).
    telemetry : Telemetry
        Where records go.
    node_names : sequence of str
        Client node names, index = partition id (``NodeDirectory``).
    num_rounds : int
        Rounds of the run (the last one evaluates with a separate message under
        ``piggyback``).
    federated_eval : {"piggyback", "separate", "none"}
        ``workload.fl.evaluation.federated``.
    stale : StalePolicy
        What to do with replies that miss their round.
    contribution_fn : callable, optional
        ``arrays -> accuracy`` on the server's test set; when given, each silo's
        contribution to every round's aggregate is recorded (:mod:`nodes.fl.contribution`).
    loo : bool
        With ``contribution_fn``: record the leave-one-out contribution (``contribution``).
    shapley_permutations : int
        With ``contribution_fn``: when > 0, record Shapley values (``shapley``): exact up
        to :data:`~nodes.fl.contribution.EXACT_MAX` answering silos, else estimated from
        this many random permutations (seeded by the round) with ``shapley_se``.
    """

    def __init__(
        self,
        strategy: Strategy,
        telemetry: Telemetry,
        node_names: Sequence[str],
        num_rounds: int,
        federated_eval: str = "piggyback",
        stale: StalePolicy | None = None,
        contribution_fn: Callable[[ArrayRecord], float] | None = None,
        loo: bool = True,
        shapley_permutations: int = 0,
    ) -> None:
        self.strategy = strategy
        self.telemetry = telemetry
        self.nodes = NodeDirectory(node_names, telemetry)
        self.num_rounds = num_rounds
        self.federated_eval = federated_eval
        self.contribution_fn = contribution_fn
        self.loo, self.shapley_permutations = loo, shapley_permutations
        self._round_arrays: ArrayRecord | None = None  # the global model a round starts from
        self.late = LateReplies(stale or StalePolicy(), telemetry, self.nodes)
        self._sent: dict[int, int] = {}  # node id -> bytes sent this round
        self._msgs: list[Message] = []  # this round's train messages (ids set on push)
        self._grid: Grid | None = None
        self._round_t0 = 0.0
        self._answered_names: set[str] = set()  # nodes that replied this round

    def __repr__(self) -> str:
        return f"RecordingStrategy({self.strategy!r})"

    def summary(self) -> None:
        """Log the inner strategy's settings."""
        self.strategy.summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The inner strategy's train messages; remembers them and the bytes sent."""
        msgs = list(self.strategy.configure_train(server_round, arrays, config, grid))
        self._round_t0 = time.time()
        nbytes = array_nbytes(arrays)
        self._sent = {m.metadata.dst_node_id: nbytes for m in msgs}
        self._msgs = msgs
        self.late.sent(server_round, {k: v.numpy() for k, v in arrays.items()})
        self._round_arrays = arrays
        self._grid = grid
        self.telemetry.event("round_start", round=server_round, sampled=len(msgs))
        return msgs

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Record every reply and every silent node, then let the inner strategy aggregate."""
        replies = list(replies)
        dst_of = {m.metadata.message_id: m.metadata.dst_node_id for m in self._msgs}
        fed: list[tuple[float, float]] = []  # piggybacked (eval accuracy, eval examples)
        self._answered_names = set()
        # successful replies first: a restarted SuperNode answers under its new Flower
        # node id while its old id is still sampled (until its heartbeat expires); the
        # old id's silence must not overwrite the node's real reply (see _stale_id)
        for msg in sorted(replies, key=Message.has_error):
            self._record_train_reply(server_round, msg, dst_of, fed)
        answered = {_node_of(m, dst_of) for m in replies}
        self._record_unanswered(server_round, answered)
        stale = self.late.collect(server_round, self._grid)
        if stale:
            self.telemetry.metric("stale_accepted", len(stale), server_round)
            replies = replies + stale
        _common_metric_keys(replies)
        # a fixed order (by node name), so that float sums do not depend on arrival order
        replies.sort(key=lambda m: (self.nodes.name(_node_of(m, dst_of)), m.has_error()))
        ok = [m for m in replies if not m.has_error()]
        # the replies' arrays as sent: some strategies consume them while aggregating
        # (Flower's FedMedian pops every array from the replies)
        sent = [_copy_arrays(m) for m in ok] if self.contribution_fn is not None else []
        arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        self.telemetry.metric("round_duration_s", time.time() - self._round_t0, server_round)
        if self.contribution_fn is not None and arrays is not None:
            self._contributions(server_round, ok, sent, dst_of)
        if fed:  # what the answering silos report about the previous global model
            acc = sum(a * n for a, n in fed) / sum(n for _a, n in fed)
            self.telemetry.metric("federated_acc", acc, server_round - 1)
        self.telemetry.event(
            "round_end",
            round=server_round,
            replies=len(replies),
            duration_s=time.time() - self._round_t0,
        )
        return arrays, metrics

    def _record_train_reply(
        self,
        server_round: int,
        msg: Message,
        dst_of: dict[str, int],
        fed: list[tuple[float, float]],
    ) -> None:
        """Record one train reply (error replies may come from the SuperLink itself)."""
        tel = self.telemetry
        nid = _node_of(msg, dst_of)
        if msg.has_error():
            name = self.nodes.name(nid)
            if self._stale_id(server_round, nid, name, msg.error.reason or ""):
                return
            tel.status(server_round, name, "failed", msg.error.reason or "")
            tel.metric("bytes_lost", self._sent.get(nid, 0), server_round, name)
            return
        m = msg.content.metric_records["metrics"]
        name = self.nodes.learn(nid, m)
        for key, out in TRAIN_METRICS:
            if key in m:
                tel.metric(out, _num(m, key), server_round, name)
        tel.metric("bytes_sent", self._sent.get(nid, 0), server_round, name)
        received = msg.content.array_records["arrays"]
        tel.metric("bytes_received", array_nbytes(received), server_round, name)
        if m.get("tt-compressed"):  # reconstruct before the strategy aggregates
            msg.content["arrays"] = decode_delta(received, self.late.globals[server_round])
        tel.metric("round_trip_s", time.time() - self._round_t0, server_round, name)
        if "eval-acc" in m:
            r = int(_num(m, "eval-round"))
            tel.metric("eval_acc", _num(m, "eval-acc"), r, name)
            tel.metric("eval_loss", _num(m, "eval-loss"), r, name)
            fed.append((_num(m, "eval-acc"), _num(m, "eval-examples")))
        tel.status(server_round, name, "completed")
        self._answered_names.add(name)

    def _record_unanswered(self, server_round: int, answered: set[int]) -> None:
        """Nodes sent a message but silent: failed for now, maybe late later."""
        for m in self._msgs:
            nid = m.metadata.dst_node_id
            if nid in answered:
                continue
            name = self.nodes.name(nid)
            if self._stale_id(server_round, nid, name, "no reply before round timeout"):
                continue
            self.telemetry.status(server_round, name, "failed", "no reply before round timeout")
            self.telemetry.metric("bytes_lost", self._sent.get(nid, 0), server_round, name)
            self.late.await_reply(m.metadata.message_id, server_round, nid)

    def _stale_id(self, server_round: int, node_id: int, name: str, reason: str) -> bool:
        """True (and a ``stale_node_id`` event) if ``name`` already answered this round
        under another Flower node id: ``node_id`` is the identity the node had before a
        restart, not the node; its failure is not the node's status."""
        if name not in self._answered_names:
            return False
        self.telemetry.event(
            "stale_node_id", round=server_round, node=name, node_id=str(node_id), reason=reason
        )
        return True

    def _contributions(
        self,
        server_round: int,
        ok: list[Message],
        recs: list[ArrayRecord],
        dst_of: dict[str, int],
    ) -> None:
        """Each answering silo's contribution to this round's FedAvg aggregate, on the
        server's test set: leave-one-out (``contribution``) and/or Shapley values
        (``shapley``, and ``shapley_se`` when estimated by sampling). ``recs``: the
        replies' arrays as they arrived (copied before the strategy aggregated)."""
        if len(ok) < 2 or self.contribution_fn is None:
            return
        score, start = self.contribution_fn, self._round_arrays
        w = [_num(m.content.metric_records["metrics"], "num-examples") for m in ok]
        names = [self.nodes.name(_node_of(m, dst_of)) for m in ok]

        def value(coalition: frozenset[int]) -> float:
            if not coalition:  # nobody contributed: the model the round started from
                return score(start) if start is not None else float("nan")
            idx = sorted(coalition)
            return score(weighted_average([recs[i] for i in idx], [w[i] for i in idx]))

        v = CachedValue(value)
        if self.loo:
            for name, gain in zip(names, leave_one_out(len(ok), v), strict=True):
                self.telemetry.metric("contribution", gain, server_round, name)
        if self.shapley_permutations > 0:
            self._shapley(server_round, names, v)

    def _shapley(self, server_round: int, names: list[str], v: CachedValue) -> None:
        """Record the Shapley value of each of ``names`` (exact, or sampled beyond
        :data:`EXACT_MAX` silos, with its standard error)."""
        n = len(names)
        if n <= EXACT_MAX:
            phi, se = shapley_exact(n, v), None
        else:
            phi, se = shapley_monte_carlo(n, v, self.shapley_permutations, seed=server_round)
        for i, name in enumerate(names):
            self.telemetry.metric("shapley", phi[i], server_round, name)
            if se is not None:
                self.telemetry.metric("shapley_se", se[i], server_round, name)
        self.telemetry.event(
            "contributions",
            round=server_round,
            method="exact" if se is None else f"monte-carlo ({self.shapley_permutations})",
            evaluations=v.evaluations,
        )

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """No messages under ``none``, nor under ``piggyback`` before the last round."""
        if self.federated_eval == "none":
            return []
        if self.federated_eval == "piggyback" and server_round < self.num_rounds:
            return []  # the next train message carries this evaluation
        msgs: Iterable[Message] = self.strategy.configure_evaluate(
            server_round, arrays, config, grid
        )
        return msgs

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Record each silo's evaluation; the federated accuracy weighs it by its test count."""
        replies = list(replies)
        ok = [m for m in replies if not m.has_error()]
        fed: list[tuple[float, float]] = []
        for msg in ok:
            m = msg.content.metric_records["metrics"]
            name = self.nodes.learn(msg.metadata.src_node_id, m)
            self.telemetry.metric("eval_acc", _num(m, "eval-acc"), server_round, name)
            self.telemetry.metric("eval_loss", _num(m, "eval-loss"), server_round, name)
            fed.append((_num(m, "eval-acc"), _num(m, "eval-examples")))
        metrics: MetricRecord | None = self.strategy.aggregate_evaluate(server_round, replies)
        if fed:
            acc = sum(a * n for a, n in fed) / sum(n for _a, n in fed)
            self.telemetry.metric("federated_acc", acc, server_round)
        return metrics


def _node_of(reply: Message, dst_of: dict[str, int]) -> int:
    """The node a reply answers for: its message's destination (an error reply may come
    from the SuperLink itself), else the reply's source."""
    return dst_of.get(reply.metadata.reply_to_message_id, reply.metadata.src_node_id)


def _common_metric_keys(replies: list[Message]) -> None:
    """Keep only the metric keys every reply has (after they were recorded).

    Flower's strategies refuse to aggregate MetricRecords with different keys; replies
    legitimately differ (a late reply from an earlier round has no piggybacked
    evaluation, a faulty node flags its update), and none of it is lost: telemetry
    already holds each reply's metrics.
    """
    ok = [m for m in replies if not m.has_error()]
    if len(ok) < 2:
        return
    records = [m.content.metric_records["metrics"] for m in ok]
    common = set.intersection(*(set(r.keys()) for r in records))
    for metrics in records:
        for key in [k for k in metrics if k not in common]:
            del metrics[key]


def _copy_arrays(msg: Message) -> ArrayRecord:
    """A copy of a reply's ``arrays`` record (its numpy arrays copied)."""
    rec = msg.content.array_records["arrays"]
    return ArrayRecord({k: Array(np.array(v.numpy(), copy=True)) for k, v in rec.items()})
