"""testbed/simulation/registry.py: the lazy node registry answers as Flower's own does,
on Flower's real in-memory LinkState and grid (no Ray)."""

from __future__ import annotations

import time
from queue import Queue
from typing import Any

from flwr.app import Message, MessageType, RecordDict
from flwr.proto.task_pb2 import Task
from flwr.server.superlink.fleet.vce import vce_api
from flwr.server.superlink.linkstate import LinkStateFactory
from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME, NodeStatus
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.superlink.federation import NoOpFederationManager
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from testbed.simulation import feeder, registry
from testbed.simulation.runner import APP_DIR, simulation_run
from tests.simulation.test_feeder import Sweeps

NODES = 300
RUN_CONFIG = {"seed": 3, "node-names": '{"groups": [["phone", 300]]}'}


def registered(lazy: bool) -> tuple[Any, Any, Any, Any]:
    """(state, node id -> partition id, info stores, run) after a registration."""
    factory = LinkStateFactory(
        FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
    )
    state: Any = factory.state()
    run = simulation_run(9, RUN_CONFIG)
    if lazy:
        mapping: Any = registry.register_nodes(NODES, state)
        stores: Any = registry.LazyInfoStores(mapping, run, str(APP_DIR))
    else:
        mapping = vce_api._register_nodes(num_nodes=NODES, state_factory=factory)
        stores = vce_api._register_node_info_stores(mapping, run, str(APP_DIR))
    state.run_ids[run.run_id] = RunRecord(run=run)  # as Flower's run_simulation does
    state.task_store[run.run_id] = Task(task_id=run.run_id, run_id=run.run_id)
    return state, mapping, stores, (run, factory)


def test_lazy_registry_answers_as_flowers() -> None:
    ours, theirs = registered(True), registered(False)
    (s1, m1, st1, (run1, _)), (s2, m2, st2, (run2, _)) = ours, theirs
    assert len(s1.get_nodes(run1.run_id)) == len(s2.get_nodes(run2.run_id)) == NODES
    assert sorted(m1.values()) == sorted(m2.values()) == list(range(NODES))
    assert not s1.nodes.made  # (nothing made per node by registering or listing)
    by_pid = {p: n for n, p in m2.items()}
    for pid in (0, 17, NODES - 1):
        mine, flower = st1[m1.node_id(pid)], st2[by_pid[pid]]
        c1, c2 = mine.retrieve_context(run1.run_id), flower.retrieve_context(run2.run_id)
        assert c1.node_config == c2.node_config == {"partition-id": pid, "num-partitions": NODES}
        assert dict(c1.run_config) == dict(c2.run_config)
        assert c1.run_config["node-names"] == RUN_CONFIG["node-names"]
        n1, n2 = s1.nodes[m1.node_id(pid)], s2.nodes[by_pid[pid]]
        for f in ("status", "owner_aid", "owner_name", "heartbeat_interval"):
            assert getattr(n1, f) == getattr(n2, f), f
        assert n1.status == NodeStatus.ONLINE and n1.online_until > time.time() + 1e6
    assert len(st1.made) == 3 and len(s1.nodes.made) == 3  # (only the nodes looked at)


def test_messages_reach_lazily_registered_nodes_once() -> None:
    state, mapping, _, (run, factory) = registered(True)
    grid = InMemoryGrid(factory)
    grid.set_run(run)
    targets = (5, 250, 5)
    ids = list(
        grid.push_messages(
            Message(RecordDict(), mapping.node_id(p), MessageType.TRAIN, group_id="1")
            for p in targets
        )
    )
    assert all(ids)  # (a message to a node Flower does not know is refused: no id)
    queue: Queue[Message] = Queue()
    Sweeps().run(feeder.add_messages_to_queue, state, queue, mapping)  # node 5 twice: 2
    got = sorted(mapping[queue.get().metadata.dst_node_id] for _ in range(queue.qsize()))
    assert got == sorted(targets)
    assert len(state.nodes.made) == 2


def test_install_replaces_both_registrations() -> None:
    nodes, stores = vce_api._register_nodes, vce_api._register_node_info_stores
    try:
        registry.install()
        registry.install()  # (idempotent)
        factory = LinkStateFactory(
            FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
        )
        api: Any = vce_api
        mapping = api._register_nodes(num_nodes=1_000_000, state_factory=factory)
        assert isinstance(mapping, registry.NodeRange) and len(mapping) == 1_000_000
        infos = api._register_node_info_stores(mapping, simulation_run(2, {}), str(APP_DIR))
        assert isinstance(infos, registry.LazyInfoStores)
    finally:
        vce_api._register_nodes, vce_api._register_node_info_stores = nodes, stores
