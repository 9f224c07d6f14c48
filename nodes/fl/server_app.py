"""Flower ServerApp of the testbed (Message API, ``flwr.serverapp.strategy``).

Run config keys (all set by the testbed, defaults in ``nodes/fl/app/pyproject.toml``):
``fl-spec`` (FLSpec as JSON), ``seed``, ``node-names`` (JSON list, index = partition
id), ``telemetry-path`` (JSONL file, empty for none), ``artifact-dir`` (final model and
the per-round checkpoint, :mod:`nodes.fl.checkpoint`), ``resume`` (1: start after the
checkpoint in ``artifact-dir``; ``testbed resume`` sets it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.inflatable.inflatable_utils import ObjectPushError

from kernel.dilation import wall
from nodes.fl import packing, task
from nodes.fl.checkpoint import ResumedRounds, load_checkpoint, save_checkpoint
from nodes.fl.deadline import bound_pulls_by_deadline
from nodes.fl.identity import names_record, node_names
from nodes.fl.late import StalePolicy
from nodes.fl.recording import RecordingStrategy
from nodes.fl.strategies import STRATEGIES, constructor_args
from nodes.fl.telemetry import Telemetry

if TYPE_CHECKING:
    import torch

    from nodes.fl.config import FLSpec

app = ServerApp()

PUSH_ATTEMPTS = 6  # a restarted SuperLink answers again within a few seconds
PUSH_RETRY_WAIT_S = 2.0


def tolerate_superlink_restarts(
    grid: Grid, tel: Telemetry, attempts: int = PUSH_ATTEMPTS, wait_s: float = PUSH_RETRY_WAIT_S
) -> None:
    """Make ``grid`` push a round's messages again when a SuperLink restart cut the push.

    Flower's runtime client retries calls while the SuperLink is down, but the object
    push session of a ``PushMessages`` that was under way dies with the SuperLink: the
    objects then fail to store (``ObjectPushError``) and Flower's grid gives up, ending
    the ServerApp. Here the push is retried as fresh messages (same content and
    destination, new ids, so nothing half-pushed is reused); replies to the new ids are
    the ones the round collects. Each retry is recorded as a ``push_retried`` event.
    ``send_and_receive`` calls ``self.push_messages``, so an instance attribute is enough.
    """
    push = grid.push_messages

    def push_messages(messages: Iterable[Message]) -> Iterable[str]:
        messages, attempt = list(messages), 1
        while True:
            try:
                return push(messages)
            except ObjectPushError as exc:
                if attempt >= attempts:
                    raise
                tel.event("push_retried", attempt=attempt, error=str(exc)[:300])
                time.sleep(wait_s)
                messages = [
                    Message(
                        m.content,
                        m.metadata.dst_node_id,
                        m.metadata.message_type,
                        ttl=m.metadata.ttl,
                        group_id=m.metadata.group_id,
                    )
                    for m in messages
                ]
                attempt += 1

    grid.push_messages = push_messages  # type: ignore[method-assign]


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run ``rounds`` rounds of the configured strategy and record everything."""
    import torch

    task.deterministic_torch()
    rc = context.run_config
    spec = task.parse_spec(str(rc["fl-spec"]))
    seed = int(str(rc["seed"]))
    names = node_names(str(rc["node-names"]))
    tel = Telemetry(str(rc.get("telemetry-path", "")) or None)
    if spec.protocol_timing == "fast":  # the grid's 3 s reply polls (nodes/fl/timing.py)
        from nodes.fl.timing import SERVERAPP, fleet_scale, install

        install(SERVERAPP, fleet_scale(len(names)))  # (each poll asks for every reply)
    tel.event("protocol_timing", mode=spec.protocol_timing)
    tolerate_superlink_restarts(grid, tel)
    splits = task.get_splits(spec, seed, len(names))
    torch.manual_seed(seed)
    model = task.make_model(spec, splits)
    shapes = packing.layout(ArrayRecord(model.state_dict()))
    if spec.protocol_timing == "fast" and shapes is not None:  # one array per model sent
        packing.pack_grid(grid, shapes)
    bound_pulls_by_deadline(grid)  # a round ends at its deadline, whatever the faults
    strategy = _recording_strategy(spec, tel, names, model, splits)
    # messages, replies and their metrics, recorded as a user's app's are (outermost:
    # the replies as the strategy gets them, late ones included)
    observer = strategy.observe(grid)

    # Start with the whole fleet, then carry on with whoever answers (survivors).
    round_timeout_s = wall(spec.round_timeout_s)  # emulated s; x TDF on the wall clock
    deadline = time.time() + round_timeout_s
    while len(list(grid.get_node_ids())) < len(names) and time.time() < deadline:
        time.sleep(0.2)
    tel.event("fleet_connected", connected=len(list(grid.get_node_ids())), expected=len(names))
    if spec.evaluation.per_silo:  # which classes each silo holds (for the report)
        for name, tr in zip(names, splits.silo_train, strict=True):
            counts = np.bincount(tr.y, minlength=splits.num_classes)
            tel.event("silo_classes", node=name, counts=counts.tolist())

    out = str(rc.get("artifact-dir", ""))
    rounds, initial = _starting_point(strategy, out, int(str(rc.get("resume", 0))), model, tel)
    tel.event("run_start", rounds=spec.rounds, **names_record(names))
    try:
        result = rounds.start(
            grid=grid,
            initial_arrays=initial,
            num_rounds=spec.rounds - rounds.offset,
            timeout=round_timeout_s,
            train_config=ConfigRecord({"lr": spec.lr}),
            evaluate_fn=rounds.shifted(
                _centralized(spec, tel, names, model, splits)
                if spec.evaluation.centralized
                else None
            ),
        )
    finally:  # (the last round's evaluation, what is still open: before the checkpoint)
        observer.finish()
    final = result.arrays if len(result.arrays) else initial  # (no round left to run)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        save_checkpoint(out, spec.rounds, final)
        torch.save(final.to_torch_state_dict(), Path(out) / "final_model.pt")
    tel.event("run_end", rounds=spec.rounds)


def _starting_point(
    strategy: RecordingStrategy, out: str, resume: int, model: torch.nn.Module, tel: Telemetry
) -> tuple[ResumedRounds, ArrayRecord]:
    """``strategy`` shifted to the first round to run, and the model it starts from: the
    checkpoint in ``out`` when resuming, else round 1 and the freshly built ``model``."""
    ckpt = load_checkpoint(out) if resume and out else None
    if resume and ckpt is None:
        raise RuntimeError(f"resume: no checkpoint in {out!r}")
    if ckpt is None:
        return ResumedRounds(strategy, out, 0), ArrayRecord(model.state_dict())
    tel.event("resumed_from_checkpoint", round=ckpt.round)
    return ResumedRounds(strategy, out, ckpt.round), ArrayRecord(ckpt.arrays)


def _recording_strategy(
    spec: FLSpec, tel: Telemetry, names: Sequence[str], model: torch.nn.Module, splits: task.Splits
) -> RecordingStrategy:
    """The configured strategy (by name or dotted path) inside the recording wrapper."""
    name, n = spec.strategy.name, len(names)
    inner = STRATEGIES[name](**constructor_args(name, spec.strategy.params, spec.model_dump(), n))

    def server_test_accuracy(arrays: ArrayRecord) -> float:
        return task.evaluate(task.load(model, arrays), splits.server_test)[1]

    ev = spec.evaluation
    return RecordingStrategy(
        inner,
        tel,
        names,
        spec.rounds,
        spec.evaluation.federated,
        StalePolicy(spec.stale_updates, spec.staleness_decay, spec.max_staleness),
        contribution_fn=server_test_accuracy if ev.contributions or ev.shapley else None,
        loo=ev.contributions,
        shapley_permutations=ev.shapley_permutations if ev.shapley else 0,
    )


def _centralized(
    spec: FLSpec, tel: Telemetry, names: Sequence[str], model: torch.nn.Module, splits: task.Splits
) -> Callable[[int, ArrayRecord], MetricRecord]:
    """Flower's ``evaluate_fn``: the global model on the server's test set (and per silo)."""

    def centralized(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        loss, acc = task.evaluate(model, splits.server_test)
        tel.metric("global_acc", acc, server_round)
        tel.metric("global_loss", loss, server_round)
        if spec.evaluation.per_silo:
            for name, test in zip(names, splits.silo_test, strict=True):
                tel.metric("silo_acc", task.evaluate(model, test)[1], server_round, name)
            for c, a in enumerate(task.class_accuracy(model, splits.server_test)):
                tel.metric(f"class_acc/{c}", a, server_round)
        return MetricRecord({"accuracy": acc, "loss": loss})

    return centralized
