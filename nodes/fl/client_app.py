"""Flower ClientApp of the testbed (Message API).

Node identity comes from the SuperNode's node config (``partition-id``,
``num-partitions``, ``node-name``); experiment settings from the run config
(``fl-spec`` JSON, ``seed``).
"""

from __future__ import annotations

import time

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from nodes.device_control import read_control, stretch
from nodes.fl import task

app = ClientApp()


def _setup(msg: Message, context: Context):
    import torch

    torch.set_num_threads(1)
    spec = task.parse_spec(str(context.run_config["fl-spec"]))
    seed = int(context.run_config["seed"])
    pid = int(context.node_config["partition-id"])
    n = int(context.node_config["num-partitions"])
    splits = task.get_splits(spec, seed, n)
    model = task.make_model(spec, splits)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    return spec, seed, pid, splits, model


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Optionally evaluate the received global model (piggyback), then train locally."""
    spec, seed, pid, splits, model = _setup(msg, context)
    server_round = int(msg.content["config"]["server-round"])
    metrics: dict[str, float] = {"partition-id": pid}
    if spec.evaluation.federated == "piggyback" and server_round > 1:
        loss, acc = task.evaluate(model, splits.silo_test[pid])
        metrics.update({"eval-loss": loss, "eval-acc": acc, "eval-round": server_round - 1})
        metrics["eval-examples"] = len(splits.silo_test[pid])
    control = read_control(context.node_config.get("control-path")).active(server_round)
    data = splits.silo_train[pid]
    lr = spec.lr * control.factor if control.misconfig == "lr" else spec.lr
    if control.misconfig == "label-flip":
        data = task.flip_labels(data, seed)
    t0 = time.perf_counter()
    train_loss = task.train(model, data, spec, seed * 1000 + server_round, lr=lr)
    real_s = time.perf_counter() - t0
    stretch(real_s, float(context.node_config.get("speed-factor", 1.0)), control.slowdown)
    metrics["device-time-s"] = time.perf_counter() - t0  # measured: compute + emulated wait
    metrics["train-duration-s"] = real_s
    metrics["train-loss"] = train_loss
    if control.misconfig in ("noise", "nan"):
        task.corrupt(model, control.misconfig, control.factor, seed + server_round)
        metrics["corrupted"] = 1
    metrics["num-examples"] = len(splits.silo_train[pid])
    up = spec.uplink
    if up.compression == "tt" and context.node_config.get("tier") in up.tiers:
        # TT-Edge uplink: the encoded update, residual kept in context.state
        arrays = task.encode_delta(model, msg.content["arrays"], up, context.state)
        metrics["tt-compressed"] = 1
    else:
        arrays = ArrayRecord(model.state_dict())
    content = RecordDict({"arrays": arrays, "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the received global model on this silo's local test split."""
    _spec, _seed, pid, splits, model = _setup(msg, context)
    loss, acc = task.evaluate(model, splits.silo_test[pid])
    metrics = {
        "partition-id": pid,
        "eval-loss": loss,
        "eval-acc": acc,
        "num-examples": len(splits.silo_test[pid]),
    }
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
