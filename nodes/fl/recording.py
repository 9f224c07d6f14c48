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

    def configure_train(self, server_round: int, arrays, config, grid) -> Iterable[Message]:
        msgs = list(super().configure_train(server_round, arrays, config, grid))  # type: ignore[misc]
        self._round_t0 = time.time()
        nbytes = array_nbytes(arrays)
        self._sent = {m.metadata.dst_node_id: nbytes for m in msgs}
        self._msgs = msgs  # their ids are set when the grid pushes them
        self._global = {k: v.numpy() for k, v in arrays.items()}
        self.telemetry.event("round_start", round=server_round, sampled=len(msgs))
        return msgs

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        replies = list(replies)
        tel = self.telemetry
        self._dst_of = {m.metadata.message_id: m.metadata.dst_node_id for m in self._msgs}
        answered = set()
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
            tel.status(server_round, name, "completed")
        for nid in set(self._sent) - answered:
            tel.status(server_round, self._name(nid), "failed", "no reply before round timeout")
            tel.metric("bytes_lost", self._sent.get(nid, 0), server_round, self._name(nid))
        arrays, metrics = super().aggregate_train(server_round, replies)  # type: ignore[misc]
        tel.metric("round_duration_s", time.time() - self._round_t0, server_round)
        if self.contribution_fn is not None and arrays is not None:
            self._contributions(server_round, [m for m in replies if not m.has_error()])
        if metrics is not None and "eval-acc" in metrics and server_round > 1:
            tel.metric("federated_acc", float(metrics["eval-acc"]), server_round - 1)
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


def recording(strategy_cls: type) -> type:
    """Return ``strategy_cls`` extended with :class:`RecordingMixin`."""
    return type(f"Recording{strategy_cls.__name__}", (RecordingMixin, strategy_cls), {})
