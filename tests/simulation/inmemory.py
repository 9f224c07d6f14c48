"""Flower's in-memory Grid and LinkState with registered nodes, without Ray: what the
Simulation Engine's ServerApp sees, for tests of the clocked grid."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from flwr.app import Message, RecordDict
from flwr.proto.task_pb2 import Task
from flwr.server.superlink.fleet.vce import vce_api
from flwr.server.superlink.linkstate import LinkStateFactory
from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.superlink.federation import NoOpFederationManager
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from testbed.simulation.runner import simulation_run


def inmemory_grid(num_nodes: int, run_id: int) -> tuple[InMemoryGrid, Any, dict[int, int]]:
    """The grid (polling every 10 ms), its LinkState and the registered node ids
    (Flower node id -> partition id) of a run ``run_id`` with ``num_nodes`` nodes."""
    factory = LinkStateFactory(
        FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
    )
    mapping = vce_api._register_nodes(num_nodes=num_nodes, state_factory=factory)
    run = simulation_run(run_id, {})
    state: Any = factory.state()
    state.run_ids[run.run_id] = RunRecord(run=run)
    state.task_store[run.run_id] = Task(task_id=run.run_id, run_id=run.run_id)
    grid = InMemoryGrid(factory)
    grid.set_run(run)
    grid.pull_interval = 0.01
    return grid, state, mapping


def answer(state: Any, msg: Message, content: RecordDict) -> None:
    """Store a node's reply to ``msg`` as a Simulation Engine worker does."""
    reply = Message(content, reply_to=msg)
    reply.metadata.__dict__["_message_id"] = str(uuid4())
    state.store_message_res(reply)
