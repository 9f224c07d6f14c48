"""A strategy wrapper that adds the testbed's own app logic around any strategy.

:class:`RecordingStrategy` holds any ``flwr.serverapp.strategy.Strategy`` and passes
every call on to it (as Flower's differential-privacy wrappers do); around the calls it
reconstructs TT-compressed updates before the inner strategy aggregates them, handles
late replies (``nodes/fl/late.py``: awaited, then aggregated with a decayed weight or
dropped), skips evaluation rounds that ride along with training (``piggyback``) and
records what comes of aggregation: ``federated_acc``, contributions and Shapley
values, ``stale_accepted``, as any ServerApp logs its own results.

What happens to the messages (statuses per (round, node), bytes, round trips, round
durations, the round events) and the replies' own metrics are recorded where any app's
are, by the Grid's observer (:mod:`nodes.fl.own_app`, attached by :meth:`observe`);
the strategy tells it when a round is over (at aggregation), so the round's statuses
appear then, and when it is done with it (after its evaluation: its bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from nodes.fl.contribution import (
    EXACT_MAX,
    CachedValue,
    leave_one_out,
    shapley_exact,
    shapley_monte_carlo,
)
from nodes.fl.identity import NodeDirectory
from nodes.fl.late import LateReplies, StalePolicy
from nodes.fl.own_app import OwnAppObserver
from nodes.fl.own_app import scalar as _num
from nodes.fl.task import decode_delta, weighted_average
from nodes.fl.telemetry import Telemetry


class RecordingStrategy(Strategy):
    """The testbed's app logic around ``strategy``; it does the aggregation.

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
        self.observer: OwnAppObserver | None = None  # (see observe)
        self._msgs: list[Message] = []  # this round's train messages (ids set on push)
        self._grid: Grid | None = None

    def __repr__(self) -> str:
        return f"RecordingStrategy({self.strategy!r})"

    def summary(self) -> None:
        """Log the inner strategy's settings."""
        self.strategy.summary()

    def observe(self, grid: Grid) -> OwnAppObserver:
        """Attach the observer that records ``grid``'s messages and replies (outermost:
        the replies as the strategy gets them, late ones included); the strategy closes
        its rounds at aggregation (:meth:`aggregate_train`) and settles them after their
        evaluation (:meth:`aggregate_evaluate`)."""
        self.observer = OwnAppObserver(self.telemetry, self.nodes)
        self.observer.attach(grid)
        return self.observer

    def _round_over(self, server_round: int, settled: bool = False) -> None:
        """Tell the observer (if any) that ``server_round``'s exchange is over (its
        statuses), or (``settled``) that the round is done with (its bytes)."""
        if self.observer is not None and settled:
            self.observer.settle_round(server_round)
        elif self.observer is not None:
            self.observer.close_round(server_round)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The inner strategy's train messages (remembered, to await the silent ones)."""
        msgs = list(self.strategy.configure_train(server_round, arrays, config, grid))
        self._msgs = msgs
        self.late.sent(server_round, {k: v.numpy() for k, v in arrays.items()})
        self._round_arrays = arrays
        self._grid = grid
        return msgs

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Close the round's exchange, prepare the replies (TT decoding, late ones),
        let the inner strategy aggregate, record what comes of it."""
        self._round_over(server_round)  # (its statuses appear now, as they always did)
        replies = list(replies)
        dst_of = {m.metadata.message_id: m.metadata.dst_node_id for m in self._msgs}
        fed: list[tuple[float, float]] = []  # piggybacked (eval accuracy, eval examples)
        for msg in replies:
            if not msg.has_error():
                self._prepare_train_reply(server_round, msg, dst_of, fed)
        self._await_silent(server_round, replies, dst_of)
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
        if self.contribution_fn is not None and arrays is not None:
            self._contributions(server_round, ok, sent, dst_of)
        if fed:  # what the answering silos report about the previous global model
            acc = sum(a * n for a, n in fed) / sum(n for _a, n in fed)
            self.telemetry.metric("federated_acc", acc, server_round - 1)
        return arrays, metrics

    def _prepare_train_reply(
        self,
        server_round: int,
        msg: Message,
        dst_of: dict[str, int],
        fed: list[tuple[float, float]],
    ) -> None:
        """A train reply before aggregation: its TT update decoded, its piggybacked
        evaluation kept for ``federated_acc`` (its own metrics: the observer's)."""
        m = msg.content.metric_records["metrics"]
        self.nodes.learn(_node_of(msg, dst_of), m)
        if m.get("tt-compressed"):  # reconstruct before the strategy aggregates
            received = msg.content.array_records["arrays"]
            msg.content["arrays"] = decode_delta(received, self.late.globals[server_round])
        if "eval-acc" in m:
            fed.append((_num(m, "eval-acc"), _num(m, "eval-examples")))

    def _await_silent(
        self, server_round: int, replies: list[Message], dst_of: dict[str, int]
    ) -> None:
        """Await (``nodes/fl/late.py``) the reply of every node sent a message that did
        not answer, except a restarted node's old Flower id (its node answered under its
        new id: the observer records a ``stale_node_id`` event for it)."""
        answered = {_node_of(m, dst_of) for m in replies}
        names = {self.nodes.name(_node_of(m, dst_of)) for m in replies if not m.has_error()}
        for m in self._msgs:
            nid = m.metadata.dst_node_id
            if nid not in answered and self.nodes.name(nid) not in names:
                self.late.await_reply(m.metadata.message_id, server_round, nid)

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
        """The federated accuracy: each silo's evaluation weighed by its test count."""
        self._round_over(server_round, settled=True)  # (after the round's evaluation)
        replies = list(replies)
        ok = [m for m in replies if not m.has_error()]
        fed: list[tuple[float, float]] = []
        for msg in ok:
            m = msg.content.metric_records["metrics"]
            self.nodes.learn(msg.metadata.src_node_id, m)
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
