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

from pathlib import Path

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from nodes.fl import client_app as fl

app = ClientApp()


def control_path(artifact_dir: str, pid: int) -> Path:
    """Where the control file of partition ``pid`` lives."""
    return Path(artifact_dir) / "controls" / f"{pid}.json"


def _with_control(context: Context) -> None:
    out = str(context.run_config.get("artifact-dir", ""))
    if out:
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
