"""A strategy mixin that records every round, node and reply to telemetry.

``recording(cls)`` subclasses any ``flwr.serverapp.strategy`` class and calls
``super()`` for all the actual work (Flower's extension point, house rule 6).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from flwr.app import Message

from nodes.fl.task import array_nbytes, decode_delta, weighted_average
from nodes.fl.telemetry import Telemetry


class RecordingMixin:
    """Records per-(round, node) metrics, statuses, bytes and durations."""

    telemetry: Telemetry
    node_names: list[str]
    num_rounds: int
    piggyback: bool

    def _setup_recording(
        self, telemetry: Telemetry, node_names: list[str], num_rounds: int, federated_eval: str
    ) -> None:
        self.telemetry = telemetry
        self.node_names = node_names
        self.num_rounds = num_rounds
        self.federated_eval = federated_eval
        self._names: dict[int, str] = {}
        self._sent: dict[int, int] = {}
        self._msgs: list[Message] = []
        self.contribution_fn = None  # arrays -> accuracy, set by the ServerApp
        self._grid = None
        self._pending: dict[str, tuple[int, int]] = {}  # message id -> (round, node id)
        self._globals: dict[int, dict] = {}
        self.stale_policy, self.staleness_decay, self.max_staleness = "drop", 0.5, 3
        self._dst_of: dict[str, int] = {}
        self._round_t0 = 0.0

    def _name(self, node_id: int, content: Any | None = None) -> str:
        if content is not None and "metrics" in content and node_id not in self._names:
            pid = content["metrics"].get("partition-id")
            if pid is not None and int(pid) < len(self.node_names):
                self._names[node_id] = self.node_names[int(pid)]
                self.telemetry.event(
                    "node_identified", node=self._names[node_id], node_id=str(node_id)
                )
        return self._names.get(node_id, f"node-{node_id}")

    def _dst(self, msg: Message) -> int:
        """The node a reply answers for (error replies may come from the SuperLink)."""
        return self._dst_of.get(msg.metadata.reply_to_message_id, msg.metadata.src_node_id)

    def _collect_late(self, server_round: int) -> list[Message]:
        """Pull replies to earlier rounds' messages that missed their deadline.

        Each is recorded as ``late`` for its own round with its staleness; under the
        ``accept`` policy it is returned (its weight scaled by decay**staleness) to be
        aggregated in this round, else dropped.
        """
        if not self._pending or self._grid is None:
            return []
        got = list(self._grid.pull_messages(list(self._pending)))
        accepted = []
        for msg in got:
            origin, nid = self._pending.pop(msg.metadata.reply_to_message_id)
            if msg.has_error():
                continue
            name = self._name(nid, msg.content)
            staleness = server_round - origin
            keep = self.stale_policy == "accept"
            self.telemetry.status(
                origin,
                name,
                "late",
                f"arrived in round {server_round} (staleness {staleness}); "
                + ("aggregated with decayed weight" if keep else "dropped"),
            )
            self.telemetry.metric("staleness", staleness, server_round, name)
            if keep:
                m = msg.content["metrics"]
                m["num-examples"] = float(m["num-examples"]) * self.staleness_decay**staleness
                if m.get("tt-compressed"):
                    base = self._globals.get(origin, self._global)
                    msg.content["arrays"] = decode_delta(msg.content["arrays"], base)
                accepted.append(msg)
        for mid, (origin, _n) in list(self._pending.items()):
            if server_round - origin > self.max_staleness:
                del self._pending[mid]
        return accepted

    def configure_train(self, server_round: int, arrays, config, grid) -> Iterable[Message]:
        msgs = list(super().configure_train(server_round, arrays, config, grid))  # type: ignore[misc]
        self._round_t0 = time.time()
        nbytes = array_nbytes(arrays)
        self._sent = {m.metadata.dst_node_id: nbytes for m in msgs}
        self._msgs = msgs  # their ids are set when the grid pushes them
        self._global = {k: v.numpy() for k, v in arrays.items()}
        self._globals[server_round] = self._global  # late TT deltas decode against theirs
        for r in [r for r in self._globals if r < server_round - self.max_staleness]:
            del self._globals[r]
        self._grid = grid
        self.telemetry.event("round_start", round=server_round, sampled=len(msgs))
        return msgs

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        replies = list(replies)
        tel = self.telemetry
        self._dst_of = {m.metadata.message_id: m.metadata.dst_node_id for m in self._msgs}
        answered = set()
        fed: list[tuple[float, float]] = []  # piggybacked (eval accuracy, weight)
        for msg in replies:
            nid = self._dst(msg)
            answered.add(nid)
            if msg.has_error():
                tel.status(server_round, self._name(nid), "failed", msg.error.reason)
                tel.metric("bytes_lost", self._sent.get(nid, 0), server_round, self._name(nid))
                continue
            name = self._name(nid, msg.content)
            m = msg.content["metrics"]
            for key, out in (
                ("train-loss", "train_loss"),
                ("train-duration-s", "train_duration_s"),
                ("device-time-s", "device_time_s"),
                ("num-examples", "num_examples"),
            ):
                if key in m:
                    tel.metric(out, float(m[key]), server_round, name)
            tel.metric("bytes_sent", self._sent.get(nid, 0), server_round, name)
            tel.metric("bytes_received", array_nbytes(msg.content["arrays"]), server_round, name)
            if m.get("tt-compressed"):  # reconstruct before the strategy aggregates
                msg.content["arrays"] = decode_delta(msg.content["arrays"], self._global)
            tel.metric("round_trip_s", time.time() - self._round_t0, server_round, name)
            if "eval-acc" in m:
                r = int(m["eval-round"])
                tel.metric("eval_acc", float(m["eval-acc"]), r, name)
                tel.metric("eval_loss", float(m["eval-loss"]), r, name)
                fed.append((float(m["eval-acc"]), float(m["num-examples"])))
            tel.status(server_round, name, "completed")
        for m in self._msgs:  # unanswered: failed for now, maybe late later
            nid = m.metadata.dst_node_id
            if nid in answered:
                continue
            tel.status(server_round, self._name(nid), "failed", "no reply before round timeout")
            tel.metric("bytes_lost", self._sent.get(nid, 0), server_round, self._name(nid))
            self._pending[m.metadata.message_id] = (server_round, nid)
        stale = self._collect_late(server_round)
        if stale:
            tel.metric("stale_accepted", len(stale), server_round)
            replies = replies + stale
        _common_metric_keys(replies)
        arrays, metrics = super().aggregate_train(server_round, replies)  # type: ignore[misc]
        tel.metric("round_duration_s", time.time() - self._round_t0, server_round)
        if self.contribution_fn is not None and arrays is not None:
            self._contributions(server_round, [m for m in replies if not m.has_error()])
        if fed:  # what the answering silos report about the previous global model
            total = sum(n for _a, n in fed)
            tel.metric("federated_acc", sum(a * n for a, n in fed) / total, server_round - 1)
        tel.event(
            "round_end",
            round=server_round,
            replies=len(replies),
            duration_s=time.time() - self._round_t0,
        )
        return arrays, metrics

    def _contributions(self, server_round: int, ok: list[Message]) -> None:
        """Leave-one-out: accuracy of this round's FedAvg aggregate minus that of the
        aggregate without silo i (server test set). Recorded as ``contribution``."""
        if len(ok) < 2:
            return
        recs = [m.content["arrays"] for m in ok]
        w = [float(m.content["metrics"]["num-examples"]) for m in ok]
        full = self.contribution_fn(weighted_average(recs, w))
        for i, m in enumerate(ok):
            rest = weighted_average(recs[:i] + recs[i + 1 :], w[:i] + w[i + 1 :])
            name = self._name(self._dst(m))
            self.telemetry.metric(
                "contribution", full - self.contribution_fn(rest), server_round, name
            )

    def configure_evaluate(self, server_round: int, arrays, config, grid):
        if self.federated_eval == "none":
            return []
        if self.federated_eval == "piggyback" and server_round < self.num_rounds:
            return []  # the next train message carries this evaluation
        return super().configure_evaluate(server_round, arrays, config, grid)  # type: ignore[misc]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]):
        replies = list(replies)
        for msg in replies:
            if msg.has_error():
                continue
            m = msg.content["metrics"]
            name = self._name(msg.metadata.src_node_id, msg.content)
            self.telemetry.metric("eval_acc", float(m["eval-acc"]), server_round, name)
            self.telemetry.metric("eval_loss", float(m["eval-loss"]), server_round, name)
        metrics = super().aggregate_evaluate(server_round, replies)  # type: ignore[misc]
        if metrics is not None and "eval-acc" in metrics:
            self.telemetry.metric("federated_acc", float(metrics["eval-acc"]), server_round)
        return metrics


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
    common = set.intersection(*(set(m.content["metrics"].keys()) for m in ok))
    for m in ok:
        metrics = m.content["metrics"]
        for key in [k for k in metrics if k not in common]:
            del metrics[key]


def recording(strategy_cls: type) -> type:
    """Return ``strategy_cls`` extended with :class:`RecordingMixin`."""
    return type(f"Recording{strategy_cls.__name__}", (RecordingMixin, strategy_cls), {})
