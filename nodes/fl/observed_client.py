"""The ClientApp side of observing a user's Flower App: its messages, timed on the node.

:func:`observed_client_app` wraps the app's ClientApp: every message is handled by the
user's ClientApp unchanged; around it, its wall and CPU time are measured, the node's
device profile stretches it by the CPU time (:func:`nodes.device_control.stretch`, as
for the testbed's own app), and the reply carries one extra record, :data:`OBSERVED`
(node name, times), that the observing Grid (:mod:`nodes.fl.grid_observer`) takes out
again before the app sees the reply.

The testbed's run config keys (``testbed-*``, :data:`nodes.fl.userapp.TESTBED_PREFIX`)
are removed from the context the user's code sees (:func:`user_context`); its
ClientApp's node config gains the spec's ``workload.fl.node_config`` (run config key
``testbed-node-config``).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import time
from typing import Any

from flwr.app import ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

from nodes.device_control import read_control, stretch
from nodes.fl.userapp import TESTBED_PREFIX, node_config_of

#: The record a ClientApp reply carries to the observing Grid (taken out there).
OBSERVED = "testbed.observed"


class UserAppError(RuntimeError):
    """The user's app failed; the message names the app, the component and the node."""


def load_component(ref: str, kind: type, app_name: str, component: str) -> Any:
    """The object ``module:attribute`` (the app's folder is on ``sys.path``: Flower's
    loader puts it there); UserAppError naming the app when it does not import."""
    module, _, attr = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as e:
        raise UserAppError(
            f"app {app_name!r}: {component} {ref!r} does not import: {type(e).__name__}: {e}"
        ) from e
    if not isinstance(obj, kind):
        raise UserAppError(f"app {app_name!r}: {component} {ref!r} is not a {kind.__name__}")
    return obj


def user_context(context: Context, node: str | None = None) -> Context:
    """``context`` without the testbed's run config keys (the same state record); on a
    client node (``node``: its name), with the spec's ``node_config`` in its node config
    (:func:`nodes.fl.userapp.node_config_of`)."""
    rc = {k: v for k, v in context.run_config.items() if not k.startswith(TESTBED_PREFIX)}
    if node is None:
        return dataclasses.replace(context, run_config=rc)
    extra = json.loads(str(context.run_config.get(f"{TESTBED_PREFIX}node-config", "{}")))
    node_config = {**context.node_config, **node_config_of(extra, node)}
    return dataclasses.replace(context, run_config=rc, node_config=node_config)


def message_round(message: Message) -> int | None:
    """The ``server-round`` a message's ConfigRecord declares (Flower's strategies
    put it in every train and evaluate message), or None."""
    if not message.has_content():
        return None
    for rec in message.content.config_records.values():
        value = rec.get("server-round")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def observed_client_app(ref: str, app_name: str) -> ClientApp:
    """A ClientApp running the app's ClientApp ``ref`` and reporting its node and times."""
    inner: ClientApp = load_component(ref, ClientApp, app_name, "clientapp")
    app = ClientApp()

    def call(message: Message, context: Context) -> Message:
        node = str(context.node_config.get("node-name", context.node_id))
        control_path = context.node_config.get("control-path")
        group = message.metadata.group_id
        rnd = int(group) if group.isdigit() else (message_round(message) or 0)
        control = read_control(str(control_path) if control_path else None).active(rnd)
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            reply = inner(message, user_context(context, node))
        except Exception as e:
            raise UserAppError(
                f"app {app_name!r}: ClientApp on node {node} raised in "
                f"{message.metadata.message_type} (round {rnd}): {type(e).__name__}: {e}"
            ) from e
        wall_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
        speed = float(str(context.node_config.get("speed-factor", 1.0)))
        stretch(wall_s, speed, control.slowdown, cpu_s=cpu_s)
        if reply.has_content():
            reply.content[OBSERVED] = ConfigRecord(
                {
                    "node": node,
                    "compute-s": wall_s,
                    "cpu-s": cpu_s,
                    "device-s": time.perf_counter() - t0,
                }
            )
        return reply

    app._call = call  # every message through ``call`` (Flower's own dispatch inside)
    return app
