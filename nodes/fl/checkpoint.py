"""Per-round checkpoints of the global model, and rounds that start after one.

The ServerApp writes ``checkpoint.pt`` into the run's artifact folder at the start of
every round ``r + 1`` (the global model after round ``r``, every record of round ``r``
written before it) and once more when the last round ends. The file is replaced
atomically (written beside it, fsynced, ``os.replace``), so a run killed at any moment
leaves either the previous checkpoint or the new one, never half of one.

``testbed resume`` reads it; the ServerApp of the resumed run starts at round ``r + 1``
through :class:`ResumedRounds`, which shifts Flower's round counter (``Strategy.start``
always counts from 1).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

CHECKPOINT_FILE = "checkpoint.pt"

#: Flower's centralized evaluation: ``(server_round, arrays) -> metrics``.
EvaluateFn = Callable[[int, ArrayRecord], MetricRecord | None]


@dataclass(frozen=True)
class Checkpoint:
    """A global model after a completed round.

    Attributes
    ----------
    round : int
        The last completed round (0: the initial model, before round 1).
    ts : float
        When it was written (UNIX time, s): every record of rounds <= ``round`` is older.
    arrays : dict
        The model's ``state_dict`` (name -> tensor).
    """

    round: int
    ts: float
    arrays: dict[str, Any]


def save_checkpoint(run_dir: str | Path, server_round: int, arrays: ArrayRecord) -> Path:
    """Write the global model after ``server_round`` atomically; return its path."""
    import torch

    path = Path(run_dir) / CHECKPOINT_FILE
    tmp = path.with_name(f".{CHECKPOINT_FILE}.{os.getpid()}.tmp")
    payload = {"round": server_round, "ts": time.time(), "arrays": arrays.to_torch_state_dict()}
    with open(tmp, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load_checkpoint(run_dir: str | Path) -> Checkpoint | None:
    """The run's checkpoint, or None when it has none."""
    import torch

    path = Path(run_dir) / CHECKPOINT_FILE
    if not path.is_file():
        return None
    payload = torch.load(path, map_location="cpu", weights_only=True)
    return Checkpoint(int(payload["round"]), float(payload["ts"]), dict(payload["arrays"]))


class ResumedRounds(Strategy):
    """Run ``strategy`` from round ``offset + 1`` and checkpoint every finished round.

    Flower's ``Strategy.start`` numbers rounds 1..n; this wrapper hands the wrapped
    strategy ``offset + r`` instead, so with ``num_rounds = rounds - offset`` the run
    continues where the checkpoint left it. The centralized evaluation of the starting
    model (Flower calls ``evaluate_fn(0, ...)``) is skipped when ``offset > 0``: that
    round's evaluation is already recorded. With ``offset = 0`` it only checkpoints.

    Parameters
    ----------
    strategy : Strategy
        The strategy that runs the rounds (the recording wrapper).
    run_dir : str or pathlib.Path
        Where ``checkpoint.pt`` goes; empty for no checkpoints.
    offset : int
        Rounds already done (the checkpoint's round).
    """

    def __init__(self, strategy: Strategy, run_dir: str | Path, offset: int = 0) -> None:
        self.strategy = strategy
        self.run_dir = str(run_dir)
        self.offset = offset

    def __repr__(self) -> str:
        return f"ResumedRounds({self.strategy!r}, offset={self.offset})"

    def summary(self) -> None:
        """Log the wrapped strategy's settings."""
        self.strategy.summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Checkpoint the model of the previous round, then start round ``offset + r``."""
        if self.run_dir and server_round > 1:  # (round offset + 0 is the checkpoint itself)
            save_checkpoint(self.run_dir, self.offset + server_round - 1, arrays)
        return self.strategy.configure_train(self.offset + server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        return self.strategy.aggregate_train(self.offset + server_round, replies)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.strategy.configure_evaluate(self.offset + server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(self.offset + server_round, replies)

    def shifted(self, evaluate_fn: EvaluateFn | None) -> EvaluateFn | None:
        """``evaluate_fn`` with the round shifted (None stays None)."""
        if evaluate_fn is None:
            return None
        offset = self.offset

        def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            if server_round == 0 and offset > 0:
                return None  # recorded by the attempt that wrote the checkpoint
            return evaluate_fn(offset + server_round, arrays)

        return evaluate
