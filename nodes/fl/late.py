"""Replies that miss their round's deadline: dropped or aggregated with decayed weight.

A satellite out of view or a slow node answers after ``round_timeout_s``; Flower's
grid has moved on, but the reply still reaches the SuperLink. :class:`LateReplies`
remembers the unanswered messages of each round and pulls their replies at the start
of a later round's aggregation, through the observed grid: the Grid's observer records
the node ``late`` for the reply's own round (:mod:`nodes.fl.grid_observer`), as for
any app. What the app does with it is recorded here: its ``staleness`` and a
``stale_update`` event (aggregated or dropped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from flwr.app import Message
from flwr.serverapp import Grid

from nodes.fl.identity import NodeDirectory
from nodes.fl.task import decode_delta
from nodes.fl.telemetry import Telemetry

Weights = dict[str, np.ndarray]


@dataclass(frozen=True)
class StalePolicy:
    """What to do with a late reply (``workload.fl.stale_updates`` and friends).

    Attributes
    ----------
    policy : {"drop", "accept"}
        ``accept`` aggregates it in the round it arrives in, weight x decay**staleness.
    decay : float
        Weight factor per round of staleness, in (0, 1].
    max_staleness : int
        Rounds a late reply is waited for.
    """

    policy: Literal["drop", "accept"] = "drop"
    decay: float = 0.5
    max_staleness: int = 3


class LateReplies:
    """Messages still awaited, by message id, and the global weights of recent rounds."""

    def __init__(self, stale: StalePolicy, telemetry: Telemetry, nodes: NodeDirectory) -> None:
        self.stale = stale
        self.telemetry = telemetry
        self.nodes = nodes
        self.pending: dict[str, tuple[int, int]] = {}  # message id -> (round, node id)
        self.globals: dict[int, Weights] = {}  # round -> global weights sent then

    def sent(self, server_round: int, weights: Weights) -> None:
        """Remember the global weights of ``server_round`` (late TT deltas decode on them)."""
        self.globals[server_round] = weights
        for r in [r for r in self.globals if r < server_round - self.stale.max_staleness]:
            del self.globals[r]

    def await_reply(self, message_id: str, server_round: int, node_id: int) -> None:
        """Wait (up to ``max_staleness`` rounds) for the reply to an unanswered message."""
        self.pending[message_id] = (server_round, node_id)

    def collect(self, server_round: int, grid: Grid | None) -> list[Message]:
        """Pull replies to earlier rounds' messages that missed their deadline.

        Each is recorded with its staleness and what becomes of it: under the
        ``accept`` policy it is returned (its weight scaled by decay**staleness) to be
        aggregated in this round, else dropped.
        """
        if not self.pending or grid is None:
            return []
        got = list(grid.pull_messages(list(self.pending)))
        accepted = [m for m in got if self._record(m, server_round)]
        for mid, (origin, _n) in list(self.pending.items()):
            if server_round - origin > self.stale.max_staleness:
                del self.pending[mid]
        return accepted

    def _record(self, msg: Message, server_round: int) -> bool:
        """Record what becomes of one late reply; True if it is to be aggregated now.
        (An error reply is no update: the observer records what it says.)"""
        origin, nid = self.pending.pop(msg.metadata.reply_to_message_id)
        if msg.has_error():
            return False
        metrics = msg.content.metric_records["metrics"]
        name = self.nodes.learn(nid, metrics)
        staleness = server_round - origin
        keep = self.stale.policy == "accept"
        self.telemetry.metric("staleness", staleness, server_round, name)
        self.telemetry.event(
            "stale_update",
            round=origin,
            node=name,
            arrived_round=server_round,
            staleness=staleness,
            action="aggregated" if keep else "dropped",
            weight_factor=self.stale.decay**staleness if keep else 0.0,
        )
        if keep:
            n = metrics["num-examples"]
            assert isinstance(n, int | float)
            metrics["num-examples"] = float(n) * self.stale.decay**staleness
            if metrics.get("tt-compressed"):
                base = self.globals.get(origin, self.globals[max(self.globals)])
                arrays = msg.content.array_records["arrays"]
                msg.content["arrays"] = decode_delta(arrays, base)
        return keep
