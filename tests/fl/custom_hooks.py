"""User hooks given by dotted path (``tests.fl.custom_hooks:...``) in tests.

Nothing in the testbed names these: they reach it only through a spec or a registry
lookup, as a user's own package would.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from testbed.functions.placement import Job, Placement, Site


class ScaledFedAvg(FedAvg):
    """FedAvg with a server step size: ``x <- x + server_lr * (fedavg - x)``.

    ``server_lr = 0`` keeps the initial model for ever: its effect is unmistakable.
    """

    def __init__(self, server_lr: float = 1.0, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.server_lr = server_lr
        self._current: dict[str, np.ndarray] = {}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._current = {k: v.numpy().copy() for k, v in arrays.items()}
        msgs: Iterable[Message] = super().configure_train(server_round, arrays, config, grid)
        return msgs

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        avg, metrics = super().aggregate_train(server_round, replies)
        if avg is None:
            return avg, metrics
        x = self._current
        new = {k: x[k] + self.server_lr * (v.numpy() - x[k]) for k, v in avg.items()}
        out = {k: Array(np.asarray(v, dtype=x[k].dtype)) for k, v in new.items()}
        return ArrayRecord(out), metrics


def first_node(jobs: list[Job], sites: list[Site], host_gflops: float) -> dict[str, Placement]:
    """A placement policy: every function on the first node's CPU."""
    return {j.name: Placement(sites[0].name, "cpu", False, None, "first node") for j in jobs}


NOT_A_STRATEGY = 42


def label_blocks(
    y: np.ndarray, num_partitions: int, rng: np.random.Generator, **_: object
) -> list[np.ndarray]:
    """A partitioner: samples sorted by label, cut into contiguous blocks (extreme skew)."""
    order = np.argsort(y, kind="stable")
    return [np.sort(b) for b in np.array_split(order, num_partitions)]
