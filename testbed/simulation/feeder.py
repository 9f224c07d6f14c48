"""The Simulation Engine's message feeder, O(messages in flight) instead of O(registered).

Flower 1.41's Simulation Engine moves messages from its in-memory LinkState to the Ray
workers with one thread (``flwr.server.superlink.fleet.vce.vce_api
.add_messages_to_queue``) that, every 0.1 s, calls ``state.get_message_ins(node_id,
limit=1)`` for EVERY registered node; the in-memory LinkState answers each call by
scanning all stored messages and validating each one (expiry, federation membership)
under its lock. With 10,000 registered nodes and 100 messages of a round in flight,
that is 10**6 validations per sweep: the sweep takes seconds, holds the LinkState's
lock and the GIL, and a message waits for it before a worker sees it.

:func:`add_messages_to_queue` does the same with Flower's own call, but only for the
nodes that have an undelivered message (read from the in-memory LinkState's store
under its lock): the same messages, each delivered once, marked delivered by Flower's
``get_message_ins`` as before, at most one per node per sweep, every 0.1 s. A LinkState
without that store (not the in-memory one) is swept over every node, as Flower does.
:func:`install` puts it in place of Flower's in the ``vce_api`` module (the
simulation process only).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from queue import Queue
from typing import Any

#: Seconds between sweeps (Flower's ``f_stop.wait(0.1)``).
SWEEP_S = 0.1


def pending_nodes(state: Any, nodes: Mapping[int, int]) -> list[int]:
    """Registered nodes (``nodes``: node id -> partition id) with an undelivered
    message, by partition id (all of ``nodes`` when the LinkState keeps no in-memory
    message store)."""
    store = getattr(state, "message_ins_store", None)
    lock = getattr(state, "lock", None)
    if not isinstance(store, dict) or lock is None:
        return list(nodes)
    with lock:
        dst = {m.metadata.dst_node_id for m in store.values() if m.metadata.delivered_at == ""}
    return sorted((n for n in dst if n in nodes), key=nodes.__getitem__)


def add_messages_to_queue(
    state: Any, queue: Queue[Any], nodes_mapping: Mapping[int, int], f_stop: threading.Event
) -> None:
    """Flower's feeder loop, sweeping only nodes with an undelivered message."""
    while not f_stop.is_set():
        for node_id in pending_nodes(state, nodes_mapping):
            for msg in state.get_message_ins(node_id=node_id, limit=1):
                queue.put(msg)
        f_stop.wait(SWEEP_S)


def install() -> None:
    """Use :func:`add_messages_to_queue` in Flower's Simulation Engine (idempotent)."""
    from flwr.server.superlink.fleet.vce import vce_api

    if not hasattr(vce_api, "add_messages_to_queue"):
        raise RuntimeError("flwr vce_api.add_messages_to_queue not found (Flower changed)")
    vce_api.add_messages_to_queue = add_messages_to_queue
