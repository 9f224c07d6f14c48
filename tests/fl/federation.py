"""An in-process federation: real strategies talking to the testbed's real ClientApp.

:class:`LoopbackGrid` is a Flower ``Grid`` whose transport is a function call: each
pushed message goes straight into ``nodes/fl/client_app.py``'s ClientApp with that
node's own ``Context`` (node config, run config, state), and the reply is kept for the
pull. Strategy, ClientApp, data, model and training are the real ones; only the
network between them is left out, so a federation of a few digits silos runs in
seconds and a strategy's effect can be measured on both sides.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from uuid import uuid4

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from nodes.fl import client_app, task
from nodes.fl.config import FLSpec


@dataclass(frozen=True)
class Reply:
    """A copy of a reply as it arrived (Flower's aggregation may empty the original)."""

    weights: dict[str, np.ndarray]
    metrics: dict[str, float]

    @classmethod
    def of(cls, msg: Message) -> Reply:
        arrays = msg.content.array_records.get("arrays")
        w = {k: v.numpy().copy() for k, v in arrays.items()} if arrays else {}
        m = msg.content.metric_records.get("metrics") or {}
        return cls(w, {k: float(v) for k, v in m.items() if isinstance(v, int | float)})

    @property
    def pid(self) -> int:
        """The silo's partition id."""
        return int(self.metrics["partition-id"])


class LoopbackGrid(Grid):
    """A Grid whose nodes are in-process ClientApp calls (one Context per node)."""

    def __init__(
        self,
        spec: FLSpec,
        seed: int,
        num_nodes: int,
        node_config: dict[int, dict[str, str]] | None = None,
    ) -> None:
        from flwr.supercore.task_identity import TaskIdentity

        # what a ServerApp process knows about itself (Flower sets it at its start)
        TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 0
        run_config = {"fl-spec": spec.model_dump_json(), "seed": seed}
        self.contexts = {
            1000 + p: Context(
                run_id=1,
                node_id=1000 + p,
                node_config={
                    "partition-id": p,
                    "num-partitions": num_nodes,
                    **(node_config or {}).get(p, {}),
                },
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for p in range(num_nodes)
        }
        self._replies: dict[str, Message] = {}
        self.sent: list[Message] = []  # every message pushed, in order
        self.sent_as: list[tuple[str, int]] = []  # (type, round) of each when pushed
        self.replies: list[Reply] = []  # a copy of every reply as it arrived, in order
        self.silent: set[int] = set()  # node ids whose replies stay away (see release)
        self._held: dict[str, Message] = {}  # their replies, by message id

    def set_run(self, run_id: int) -> None:  # type: ignore[override]
        """Nothing to set: there is one run."""

    @property
    def run(self) -> None:  # type: ignore[override]
        """Not used by strategies."""
        return None

    def create_message(  # type: ignore[override]
        self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str
    ) -> Message:
        """Flower's plain Message constructor."""
        return Message(content, dst_node_id, message_type, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        """The nodes of this federation."""
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Give each message an id and run it through its node's ClientApp now."""
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid4())  # as Flower's grids do
            reply = client_app.app(message=msg, context=self.contexts[msg.metadata.dst_node_id])
            held = msg.metadata.dst_node_id in self.silent
            (self._held if held else self._replies)[msg.metadata.message_id] = reply
            self.sent.append(msg)
            cfg = msg.content.config_records.get("config")  # Flower reuses it: read now
            self.sent_as.append((msg.metadata.message_type, int(str(cfg["server-round"]))))
            self.replies.append(Reply.of(reply))
            ids.append(msg.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """The replies to ``message_ids`` (each handed out once)."""
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def release(self) -> None:
        """The replies of the ``silent`` nodes reach the SuperLink now (late)."""
        self._replies.update(self._held)
        self._held.clear()

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push, then pull every reply (ready at once); when some stay away (``silent``),
        wait until ``timeout`` and pull once more, as Flower's grids end a call."""
        ids = list(self.push_messages(messages))
        got = list(self.pull_messages(ids))
        if len(got) < len(ids) and timeout:
            time.sleep(timeout)
            answered = {m.metadata.reply_to_message_id for m in got}
            got += self.pull_messages([i for i in ids if i not in answered])
        return got


@dataclass
class Federation:
    """What one in-process run did: the messages, replies and global models per round."""

    grid: LoopbackGrid
    globals: list[dict[str, np.ndarray]] = field(default_factory=list)  # round 0, 1, ...

    def train_replies(self, server_round: int) -> list[Reply]:
        """Replies to the train messages of ``server_round``."""
        sent = zip(self.grid.sent_as, self.grid.replies, strict=True)
        return [reply for key, reply in sent if key == ("train", server_round)]


def run_federation(
    strategy: Strategy,
    spec: FLSpec,
    seed: int = 3,
    num_nodes: int = 3,
    rounds: int = 2,
    node_config: dict[int, dict[str, str]] | None = None,
    attach: Callable[[LoopbackGrid], object] | None = None,
) -> Federation:
    """Run ``rounds`` rounds of ``strategy`` over ``num_nodes`` silos of ``spec``'s data.

    ``node_config`` adds node config entries by partition id (e.g. a ``control-path``
    whose misconfiguration makes that silo Byzantine); ``attach`` instruments the grid
    first (e.g. the observer that records the replies' metrics, as the ServerApp does).
    """
    import torch

    torch.manual_seed(seed)
    splits = task.get_splits(spec, seed, num_nodes)
    model = task.make_model(spec, splits)
    grid = LoopbackGrid(spec, seed, num_nodes, node_config)
    if attach is not None:
        attach(grid)
    fed = Federation(grid)

    def keep(server_round: int, arrays: ArrayRecord) -> None:
        fed.globals.append({k: v.numpy().copy() for k, v in arrays.items()})

    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(model.state_dict()),
        num_rounds=rounds,
        train_config=ConfigRecord({"lr": spec.lr}),
        evaluate_fn=keep,
    )
    return fed


def distance(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """Euclidean distance between two models (all parameters)."""
    return float(np.sqrt(sum(np.sum((a[k] - b[k]) ** 2) for k in a)))
