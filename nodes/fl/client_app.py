"""Flower ClientApp of the testbed (Message API).

Node identity comes from the SuperNode's node config (``partition-id``,
``num-partitions``, ``node-name``); experiment settings from the run config
(``fl-spec`` JSON, ``seed``). What a strategy asks of the client arrives in the train
message's config: ``proximal-mu`` (FedProx) and ``report-global-loss`` (q-FedAvg).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from nodes.device_control import read_control, stretch
from nodes.fl import packing, task
from nodes.fl.strategies import GLOBAL_LOSS, PROXIMAL_MU, REPORT_GLOBAL_LOSS

if TYPE_CHECKING:
    import torch

    from nodes.data.datasets import Dataset
    from nodes.fl.config import FLSpec

app = ClientApp()

#: What a MetricRecord holds.
Metrics = dict[str, int | float | list[int] | list[float]]


def _setup(msg: Message, context: Context) -> tuple[FLSpec, int, int, task.Splits, torch.nn.Module]:

    task.deterministic_torch()
    spec = task.parse_spec(str(context.run_config["fl-spec"]))
    seed = int(context.run_config["seed"])
    pid = int(context.node_config["partition-id"])
    n = int(context.node_config["num-partitions"])
    splits = task.get_splits(spec, seed, n)
    model = task.make_model(spec, splits)
    received = msg.content.array_records["arrays"]
    if packing.is_packed(received):  # fast protocol timing: the model as one array
        received = packing.unpack(received, packing.shapes(model.state_dict()))
        packing.set_arrays(msg, received)  # (the TT uplink reads it from the message)
    model.load_state_dict(received.to_torch_state_dict())
    return spec, seed, pid, splits, model


def _evaluation(loss: float, acc: float, examples: int) -> Metrics:
    """Metrics of one evaluation of the received global model on the local test split."""
    return {"eval-loss": loss, "eval-acc": acc, "eval-examples": float(examples)}


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Optionally evaluate the received global model (piggyback), then train locally."""
    packed = packing.is_packed(msg.content.array_records["arrays"])
    spec, seed, pid, splits, model = _setup(msg, context)
    config = msg.content.config_records["config"]
    server_round = int(str(config["server-round"]))
    metrics: Metrics = {"partition-id": pid}
    if spec.evaluation.federated == "piggyback" and server_round > 1:
        test = splits.silo_test[pid]
        metrics.update(_evaluation(*task.evaluate(model, test), len(test)))
        metrics["eval-round"] = server_round - 1
    control_path = context.node_config.get("control-path")
    control = read_control(str(control_path) if control_path else None).active(server_round)
    data: Dataset = splits.silo_train[pid]
    lr = spec.lr * control.factor if control.misconfig == "lr" else spec.lr
    if control.misconfig == "label-flip":
        data = task.flip_labels(data, seed)
    if config.get(REPORT_GLOBAL_LOSS):  # q-FedAvg: F_k(w^t) before local training
        metrics[GLOBAL_LOSS] = task.evaluate(model, data)[0]
    mu = float(str(config.get(PROXIMAL_MU, 0.0)))
    t0, c0 = time.perf_counter(), time.thread_time()
    train_loss = task.train(model, data, spec, seed * 1000 + server_round, lr=lr, proximal_mu=mu)
    real_s, cpu_s = time.perf_counter() - t0, time.thread_time() - c0
    speed = float(str(context.node_config.get("speed-factor", 1.0)))
    # the work is the training thread's CPU time (torch runs single-threaded here:
    # task.py), so other nodes contending for this host's cores do not enter the
    # emulated device time; they only show as wall time above it (device-time-s)
    stretch(real_s, speed, control.slowdown, cpu_s=cpu_s)
    metrics["train-duration-s"] = real_s
    metrics["train-cpu-s"] = cpu_s
    metrics["train-loss"] = train_loss
    if control.misconfig in ("noise", "nan"):
        task.corrupt(model, control.misconfig, control.factor, seed + server_round)
        metrics["corrupted"] = 1
    metrics["num-examples"] = len(splits.silo_train[pid])
    arrays, tt = _uplink(spec, model, msg, context, speed, control.slowdown)
    if tt is not None:  # TT-SVD ran on the device: its time counts in the device time
        metrics.update(tt)
        metrics["tt-compressed"] = 1
    elif packed:  # answer as asked: one flat array (fast protocol timing)
        arrays = packing.pack(arrays)
    metrics["device-time-s"] = time.perf_counter() - t0  # measured: compute + emulated wait
    content = RecordDict({"arrays": arrays, "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


def _uplink(
    spec: FLSpec,
    model: torch.nn.Module,
    msg: Message,
    context: Context,
    speed: float,
    slowdown: float,
) -> tuple[ArrayRecord, Metrics | None]:
    """The arrays sent back and, for a TT-encoded update (else the weights), the TT-SVD's
    measured, device (stretched by ``speed`` and ``slowdown``) and modelled engine
    times."""
    from nodes.compression.device_time import encode_on_device

    up = spec.uplink
    if up.compression == "tt" and context.node_config.get("tier") in up.tiers:
        # TT-Edge uplink: the encoded update, residual kept in context.state
        received = msg.content.array_records["arrays"]
        record, tt = encode_on_device(
            lambda stats: task.encode_delta(model, received, up, context.state, stats),
            up.svd_backend, up.engine_profile, speed, slowdown,
        )
        return record, dict(tt)
    return ArrayRecord(model.state_dict()), None


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the received global model on this silo's local test split.

    ``num-examples`` is the number of test examples (Flower weighs evaluation replies
    by it), as is ``eval-examples``.
    """
    _spec, _seed, pid, splits, model = _setup(msg, context)
    test = splits.silo_test[pid]
    metrics = _evaluation(*task.evaluate(model, test), len(test))
    metrics.update({"partition-id": pid, "num-examples": len(test)})
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
