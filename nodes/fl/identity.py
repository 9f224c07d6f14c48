"""Which Flower node id is which testbed node: the one place ``nodes/fl`` learns it.

Every reply of the testbed's ClientApp carries ``partition-id``, the node's index in
the run config's ``node-names`` list (the node config the testbed gave the SuperNode).
The first reply from a node id fixes its name and records a ``node_identified`` event;
an id that never replied is named ``node-<id>`` (the control plane renames those rows
from the events, ``testbed/chaos.py``).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator, Sequence
from typing import Any

from flwr.app import MetricRecord

from nodes.fl.telemetry import Telemetry


class NodeNames(Sequence[str]):
    """Client node names by partition id, from the fleet's groups: ``(id, count)`` in
    partition order, a group's replicas named ``id-1 .. id-count`` (``id`` alone when
    ``count`` is 1), as ``fleet.nodes`` names them. Nothing is held per node: a
    million clients are a few groups.

    Parameters
    ----------
    groups : sequence of (str, int)
        Node id and replica count of each group of client nodes, in partition order.
    """

    def __init__(self, groups: Sequence[tuple[str, int]]) -> None:
        self.groups = [(str(g), int(c)) for g, c in groups]
        self.starts: list[int] = []
        at = 0
        for _, c in self.groups:
            self.starts.append(at)
            at += c
        self.n = at
        self._first = {g: i for i, (g, _) in enumerate(self.groups)}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, pid: int) -> str:  # type: ignore[override]
        if not isinstance(pid, int):
            raise TypeError("NodeNames takes one integer index")
        if pid < 0:
            pid += self.n
        if not 0 <= pid < self.n:
            raise IndexError(pid)
        g = bisect.bisect_right(self.starts, pid) - 1
        gid, count = self.groups[g]
        return gid if count == 1 else f"{gid}-{pid - self.starts[g] + 1}"

    def __iter__(self) -> Iterator[str]:
        for gid, count in self.groups:
            if count == 1:
                yield gid
            else:
                yield from (f"{gid}-{i}" for i in range(1, count + 1))

    def index(self, name: Any, start: int = 0, stop: int | None = None) -> int:
        """Partition id of ``name`` (ValueError if it is not a client here)."""
        pid = self.find(name)
        if pid is None or pid < start or (stop is not None and pid >= stop):
            raise ValueError(f"{name!r} is not a client node name")
        return pid

    def find(self, name: object) -> int | None:
        """Partition id of ``name``, or None."""
        if not isinstance(name, str):
            return None
        g = self._first.get(name)
        if g is not None and self.groups[g][1] == 1:
            return self.starts[g]
        gid, sep, k = name.rpartition("-")
        g = self._first.get(gid) if sep and k.isdigit() and not k.startswith("0") else None
        if g is None or self.groups[g][1] == 1 or not 1 <= int(k) <= self.groups[g][1]:
            return None
        return self.starts[g] + int(k) - 1

    def __contains__(self, name: object) -> bool:
        return self.find(name) is not None

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence of the same names in the same order (a list included)."""
        if isinstance(other, NodeNames):
            return self.groups == other.groups
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self.n and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def to_json(self) -> str:
        """The run config's ``node-names`` value (:func:`node_names` reads it)."""
        return json.dumps({"groups": self.groups})


def node_names(value: str) -> Sequence[str]:
    """The run config's ``node-names``: a JSON list of names, or ``{"groups": [[id,
    count], ...]}`` (:class:`NodeNames`, what the testbed writes)."""
    return node_names_of(json.loads(value))


def node_names_of(data: Any) -> Sequence[str]:
    """:func:`node_names` of the parsed JSON value."""
    if isinstance(data, dict):
        return NodeNames([(str(g), int(c)) for g, c in data["groups"]])
    return [str(n) for n in data]


#: A record (event) lists at most this many node names; a larger fleet is recorded by
#: its groups (:func:`names_record`).
LISTED_NAMES = 1000


def names_record(names: Sequence[str]) -> dict[str, Any]:
    """Event fields naming the client nodes: ``nodes`` (the names) for a fleet of up
    to :data:`LISTED_NAMES`, else ``node_groups`` (``[id, count]`` each) and
    ``node_count``: a million names are not written into one record."""
    if len(names) <= LISTED_NAMES or not isinstance(names, NodeNames):
        return {"nodes": list(names)}
    return {"node_groups": names.groups, "node_count": len(names)}


class NodeDirectory:
    """Flower node id -> testbed node name.

    Parameters
    ----------
    names : sequence of str
        Client node names; index = partition id.
    telemetry : Telemetry
        Receives one ``node_identified`` event per node id learned.
    """

    def __init__(self, names: Sequence[str], telemetry: Telemetry) -> None:
        self.names = names if isinstance(names, NodeNames) else list(names)
        self.telemetry = telemetry
        self._by_id: dict[int, str] = {}

    def learn(self, node_id: int, metrics: MetricRecord | None) -> str:
        """Name of ``node_id``, learning it from a reply's ``partition-id`` if new."""
        if metrics is not None and node_id not in self._by_id:
            pid = metrics.get("partition-id")
            if isinstance(pid, int | float) and 0 <= int(pid) < len(self.names):
                self._by_id[node_id] = self.names[int(pid)]
                self.telemetry.event(
                    "node_identified", node=self._by_id[node_id], node_id=str(node_id)
                )
        return self.name(node_id)

    def name(self, node_id: int) -> str:
        """The node's name if learned, else ``node-<id>``."""
        return self._by_id.get(node_id, f"node-{node_id}")

    def known(self) -> dict[int, str]:
        """Every node id learned so far and its name."""
        return dict(self._by_id)
