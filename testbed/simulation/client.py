"""The ClientApp of a simulation: the testbed's own, with the node's control file.

On the local backend a SuperNode's node config carries ``control-path`` (the file the
chaos engine writes a misconfiguration into). Flower's Simulation Engine gives a
virtual node only ``partition-id`` and ``num-partitions``, so this app adds
``control-path`` (``<artifact-dir>/controls/<partition id>.json``, written by
:mod:`testbed.simulation.vfaults`) when that file exists, then runs the testbed's own
train / evaluate functions unchanged. No ``speed-factor`` is set: the local backend's
emulated wait is the virtual clock's ``stretch`` here, so nothing sleeps.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from nodes.fl import client_app as fl
from nodes.fl.identity import node_names

app = ClientApp()


def control_path(artifact_dir: str, pid: int) -> Path:
    """Where the control file of partition ``pid`` lives."""
    return Path(artifact_dir) / "controls" / f"{pid}.json"


def _note_ray_node(out: str) -> None:
    """Once per actor process: which Ray node it runs on (``<artifact-dir>/ray_nodes/``),
    so a run on a Ray cluster shows where its ClientApps ran."""
    path = Path(out) / "ray_nodes" / f"{os.getpid()}.json"
    if path.exists():
        return
    import ray

    if not ray.is_initialized():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    node = ray.get_runtime_context().get_node_id()
    path.write_text(json.dumps({"node_id": node, "pid": os.getpid()}))


def _with_control(context: Context) -> None:
    out = str(context.run_config.get("artifact-dir", ""))
    if out:
        _note_ray_node(out)
        path = control_path(out, int(context.node_config["partition-id"]))
        if path.exists():
            context.node_config["control-path"] = str(path)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """The testbed's train function, with the node's control file."""
    _with_control(context)
    return fl.train(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The testbed's evaluate function."""
    return fl.evaluate(msg, context)


def user_client_app(observed: ClientApp) -> ClientApp:
    """A user's ClientApp (``observed``: :func:`nodes.fl.observed_client.observed_client_app`)
    with what a SuperNode's node config would carry: ``node-name`` (from the run
    config's ``testbed-node-names`` by partition id) and ``control-path``. Nothing
    sleeps: the device profile is the virtual clock's stretch of the measured CPU time.
    """
    from nodes.fl.userapp import TESTBED_PREFIX

    app = ClientApp()

    def call(message: Message, context: Context) -> Message:
        rc, pid = context.run_config, int(context.node_config["partition-id"])
        names = node_names(str(rc.get(f"{TESTBED_PREFIX}node-names", "[]")))
        if 0 <= pid < len(names):
            context.node_config["node-name"] = names[pid]
        out = str(rc.get(f"{TESTBED_PREFIX}artifact-dir", ""))
        if out:
            _note_ray_node(out)
            path = control_path(out, pid)
            if path.exists():
                context.node_config["control-path"] = str(path)
        return observed(message, context)

    app._call = call  # (as nodes.fl.observed_client does)
    return app
