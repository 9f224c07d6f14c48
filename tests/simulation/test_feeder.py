"""The simulation's message feeder against Flower's own, on Flower's real in-memory
LinkState (no Ray): the same messages reach the worker queue, each once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from queue import Queue
from typing import Any

from flwr.app import Message, MessageType, RecordDict
from flwr.proto.task_pb2 import Task
from flwr.server.superlink.fleet.vce import vce_api
from flwr.server.superlink.linkstate import LinkStateFactory
from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.superlink.federation import NoOpFederationManager
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from testbed.simulation import feeder
from testbed.simulation.runner import simulation_run

NODES = 1000
#: Partition ids a message is pushed to (node 7 twice: one per sweep, both delivered).
TARGETS = (7, 3, 500, 7)
#: Sweeps a feeder runs before it is stopped: two deliver TARGETS, the rest must add
#: nothing (each message once).
SWEEPS = 5
#: Liveness: how long those sweeps may take on a loaded host, s.
WAIT_S = 60.0


class Sweeps(threading.Event):
    """A feeder's stop event that counts its sweeps (a feeder, Flower's or ours, ends
    each sweep with one ``wait``): a test waits for sweeps, not for wall time."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.count += 1
        return super().wait(timeout)

    def run(self, feed: Callable[..., None], *args: object, sweeps: int = SWEEPS) -> None:
        """Run ``feed(*args, self)`` in a thread until it swept ``sweeps`` times."""
        thread = threading.Thread(target=feed, args=(*args, self))
        thread.start()
        deadline = time.monotonic() + WAIT_S
        while self.count < sweeps and time.monotonic() < deadline:
            time.sleep(0.01)
        self.set()
        thread.join()
        assert self.count >= sweeps, f"{self.count} sweeps in {WAIT_S} s"


def fed(feed: Callable[..., None]) -> list[int]:
    """Register NODES nodes, push TARGETS' messages, run ``feed`` for SWEEPS sweeps:
    the partition ids of the queued messages, in queue order."""
    factory = LinkStateFactory(
        FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
    )
    mapping = vce_api._register_nodes(num_nodes=NODES, state_factory=factory)
    run = simulation_run(5, {})
    state: Any = factory.state()
    state.run_ids[run.run_id] = RunRecord(run=run)  # as Flower's run_simulation does
    state.task_store[run.run_id] = Task(task_id=run.run_id, run_id=run.run_id)
    grid = InMemoryGrid(factory)
    grid.set_run(run)
    node = {p: n for n, p in mapping.items()}
    grid.push_messages(
        Message(RecordDict(), node[p], MessageType.TRAIN, group_id="1") for p in TARGETS
    )
    queue: Queue[Message] = Queue()
    Sweeps().run(feed, state, queue, mapping)
    out = [mapping[queue.get().metadata.dst_node_id] for _ in range(queue.qsize())]
    assert all(not state.get_message_ins(node_id=node[p], limit=None) for p in TARGETS)
    return out


def test_feeder_queues_the_messages_flower_does_each_once() -> None:
    ours = fed(feeder.add_messages_to_queue)
    assert ours == [3, 7, 500, 7]  # by partition id; one per node per sweep
    assert sorted(fed(vce_api.add_messages_to_queue)) == sorted(ours)


def test_install_replaces_flowers_feeder() -> None:
    original = vce_api.add_messages_to_queue
    try:
        feeder.install()
        assert vce_api.add_messages_to_queue is feeder.add_messages_to_queue
    finally:
        vce_api.add_messages_to_queue = original
