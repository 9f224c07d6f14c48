"""Flower's node registry of the Simulation Engine, made on first use.

Flower 1.41's Simulation Engine registers every virtual node before the first message
(``flwr.server.superlink.fleet.vce.vce_api``): ``_register_nodes`` creates a protobuf
``NodeInfo`` per node in the in-memory LinkState (a random id, 32 random key bytes, an
ISO time stamp, a heartbeat) and ``_register_node_info_stores`` a
``DeprecatedRunInfoStore`` with a ``Context`` per node, parsing the app's
``pyproject.toml`` once per node. Measured on this 2-core machine (2026-11-28, load ~8):
20,000 nodes took 2.6 s and +31 MB to register and 13.2 s and +40 MB for the stores,
i.e. ~130 s and ~660 s for a million; the LinkState's ``get_nodes`` then walks every
``NodeInfo`` twice per call (the ServerApp's sampling asks once per round).

:func:`install` replaces both registrations, in the simulation process only, with
registries that hold a range and make the per-node objects on first use:

* :class:`NodeRange`: node id -> partition id for ``n`` nodes with the dense ids
  ``base .. base + n - 1`` (a Mapping; nothing per node);
* :class:`VirtualNodes`: the in-memory LinkState's ``nodes`` table: a node's
  ``NodeInfo`` (online, with the infinite heartbeat Flower's registration gives it) is
  made when the LinkState first looks it up (a message sent to it), and kept;
  ``get_nodes`` answers from the range (every virtual node is online for good, as
  after Flower's own registration) less any node whose made ``NodeInfo`` is not online;
* :class:`LazyInfoStores`: node id -> ``DeprecatedRunInfoStore`` whose Context is made
  on first use from the run config fused once (the same values Flower's
  ``register_context`` gives every node), and kept: a client's Context (its state)
  lives from its first message on, as in Flower.

So only sampled clients hold objects. A LinkState other than Flower's in-memory one is
registered by Flower's own functions (no laziness).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

#: Lowest node id of a virtual range (Flower reserves 0 and the SuperLink's id 1).
BASE_ID = 1 << 20


class NodeRange(Mapping[int, int]):
    """Node id -> partition id of ``n`` virtual nodes with ids ``base .. base + n - 1``.

    Parameters
    ----------
    base : int
        Node id of partition 0.
    n : int
        Number of nodes.
    """

    def __init__(self, base: int, n: int) -> None:
        self.base, self.n = base, n

    def __getitem__(self, node_id: int) -> int:
        if isinstance(node_id, int) and self.base <= node_id < self.base + self.n:
            return node_id - self.base
        raise KeyError(node_id)

    def __contains__(self, node_id: object) -> bool:
        return isinstance(node_id, int) and self.base <= node_id < self.base + self.n

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.base, self.base + self.n))

    def __len__(self) -> int:
        return self.n

    def node_id(self, pid: int) -> int:
        """The node id of partition ``pid``."""
        if not 0 <= pid < self.n:
            raise IndexError(pid)
        return self.base + pid


class VirtualNodes(MutableMapping[int, Any]):
    """The in-memory LinkState's ``nodes`` table over a :class:`NodeRange`.

    Parameters
    ----------
    ids : NodeRange
        The virtual nodes.
    make : callable
        ``make(node_id) -> NodeInfo``: a node as Flower's registration leaves it.
    """

    def __init__(self, ids: NodeRange, make: Callable[[int], Any]) -> None:
        self.ids, self.make = ids, make
        self.made: dict[int, Any] = {}  # NodeInfo of the nodes looked up so far
        self.gone: set[int] = set()  # virtual nodes deleted

    def __getitem__(self, node_id: int) -> Any:
        info = self.made.get(node_id)
        if info is not None:
            return info
        if node_id in self.ids and node_id not in self.gone:
            info = self.made[node_id] = self.make(node_id)
            return info
        raise KeyError(node_id)

    def __setitem__(self, node_id: int, info: Any) -> None:
        self.made[node_id] = info
        self.gone.discard(node_id)

    def __delitem__(self, node_id: int) -> None:
        if node_id not in self:
            raise KeyError(node_id)
        self.made.pop(node_id, None)
        self.gone.add(node_id)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.made or (node_id in self.ids and node_id not in self.gone)

    def __iter__(self) -> Iterator[int]:
        for nid in self.ids:
            if nid not in self.gone:
                yield nid
        yield from (nid for nid in self.made if nid not in self.ids)

    def __len__(self) -> int:
        extra = sum(1 for nid in self.made if nid not in self.ids)
        return len(self.ids) - len(self.gone) + extra

    def online(self, status_online: str) -> set[int]:
        """Ids of the nodes whose status is ``status_online``: every virtual node not
        made yet (online for good after registration), and the made ones that are."""
        ids = set(self.ids)
        ids -= self.gone
        for nid, info in self.made.items():
            if info.status == status_online:
                ids.add(nid)
            else:
                ids.discard(nid)
        return ids


class LazyInfoStores(Mapping[int, Any]):
    """Node id -> Flower's ``DeprecatedRunInfoStore``, each made on first use.

    Parameters
    ----------
    ids : NodeRange
        The virtual nodes.
    run : flwr.supercore.run.Run
        The run (its id and override config).
    app_dir : str or None
        The app folder whose ``pyproject.toml`` gives the run config's defaults (as
        Flower's ``register_context`` reads it), or None (an empty run config).
    """

    def __init__(self, ids: NodeRange, run: Any, app_dir: str | None) -> None:
        from flwr.common.config import get_fused_config_from_dir

        self.ids, self.run = ids, run
        self.config: dict[str, Any] = {}
        if app_dir:
            path = Path(app_dir)
            if not path.is_dir():
                raise ValueError("The specified `app_dir` must be a directory.")
            self.config = get_fused_config_from_dir(path, run.override_config if run else {})
        self.made: dict[int, Any] = {}

    def __getitem__(self, node_id: int) -> Any:
        store = self.made.get(node_id)
        if store is None:
            store = self.made[node_id] = self._make(node_id, self.ids[node_id])
        return store

    def _make(self, node_id: int, pid: int) -> Any:
        """The store Flower's ``_register_node_info_stores`` makes for this node."""
        from flwr.app import Context, RecordDict
        from flwr.common.constant import NUM_PARTITIONS_KEY, PARTITION_ID_KEY
        from flwr.compat.client.run_info_store import DeprecatedRunInfoStore, RunInfo

        store = DeprecatedRunInfoStore(
            node_id=node_id,
            node_config={PARTITION_ID_KEY: pid, NUM_PARTITIONS_KEY: len(self.ids)},
        )
        store.run_infos[self.run.run_id] = RunInfo(
            initial_run_config=self.config,
            context=Context(
                run_id=self.run.run_id,
                node_id=node_id,
                node_config=store.node_config,
                state=RecordDict(),
                run_config=self.config.copy(),
            ),
        )
        return store

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.ids

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)


def register_nodes(num_nodes: int, state: Any) -> NodeRange | None:
    """Register ``num_nodes`` virtual nodes in Flower's in-memory LinkState ``state``
    (None: not that LinkState; register them the Flower way)."""
    from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState

    if not isinstance(state, InMemoryLinkState):
        return None
    ids = NodeRange(BASE_ID, num_nodes)
    with state.lock:
        if any(nid in ids for nid in state.nodes):
            raise RuntimeError("virtual node ids already registered in this LinkState")
        table = VirtualNodes(ids, _node_info)
        table.made.update(state.nodes)  # (nodes registered before, if any)
        state.nodes = table  # type: ignore[assignment]

    def get_nodes(run_id: int) -> set[int]:
        """Flower's ``get_nodes``: the online nodes of the run's federation."""
        from flwr.supercore.constant import NodeStatus

        with state.lock:
            if run_id not in state.run_ids:
                return set()
            federation_id = state.run_ids[run_id].run.federation_id
            online = table.online(NodeStatus.ONLINE)
            filtered: set[int] = state.federation_manager.filter_nodes(online, federation_id)
            return filtered

    state.get_nodes = get_nodes  # type: ignore[method-assign]
    return ids


def _node_info(node_id: int) -> Any:
    """A virtual node as Flower's ``_register_nodes`` leaves it: registered by the
    no-op account with random key bytes, then online with the infinite heartbeat."""
    from flwr.common.constant import (
        HEARTBEAT_INTERVAL_INF,
        HEARTBEAT_PATIENCE,
        NOOP_ACCOUNT_NAME,
        NOOP_FLWR_AID,
    )
    from flwr.proto.node_pb2 import NodeInfo
    from flwr.supercore.constant import NodeStatus
    from flwr.supercore.date import now

    t = now()
    return NodeInfo(
        node_id=node_id,
        owner_aid=NOOP_FLWR_AID,
        owner_name=NOOP_ACCOUNT_NAME,
        status=NodeStatus.ONLINE,
        registered_at=t.isoformat(),
        last_activated_at=t.isoformat(),
        heartbeat_interval=HEARTBEAT_INTERVAL_INF,
        online_until=t.timestamp() + HEARTBEAT_PATIENCE * HEARTBEAT_INTERVAL_INF,
        public_key=secrets.token_bytes(32),
    )


def install() -> None:
    """Put the lazy registrations in place of Flower's in ``vce_api`` (idempotent)."""
    from flwr.server.superlink.fleet.vce import vce_api

    api: Any = vce_api  # (its functions are replaced with ones of wider types)
    for name in ("_register_nodes", "_register_node_info_stores"):
        if not hasattr(vce_api, name):
            raise RuntimeError(f"flwr vce_api.{name} not found (Flower changed)")
    nodes, stores = api._register_nodes, api._register_node_info_stores
    if getattr(nodes, "testbed_lazy", False):
        return

    def _register_nodes(num_nodes: int, state_factory: Any) -> Mapping[int, int]:
        ids = register_nodes(num_nodes, state_factory.state())
        if ids is None:
            return nodes(num_nodes=num_nodes, state_factory=state_factory)  # type: ignore[no-any-return]
        return ids

    def _register_node_info_stores(
        nodes_mapping: Mapping[int, int], run: Any, app_dir: str | None = None
    ) -> Mapping[int, Any]:
        if isinstance(nodes_mapping, NodeRange):
            return LazyInfoStores(nodes_mapping, run, app_dir)
        return stores(nodes_mapping=nodes_mapping, run=run, app_dir=app_dir)  # type: ignore[no-any-return]

    _register_nodes.testbed_lazy = True  # type: ignore[attr-defined]
    api._register_nodes = _register_nodes
    api._register_node_info_stores = _register_node_info_stores
