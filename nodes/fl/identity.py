"""Which Flower node id is which testbed node: the one place ``nodes/fl`` learns it.

Every reply of the testbed's ClientApp carries ``partition-id``, the node's index in
the run config's ``node-names`` list (the node config the testbed gave the SuperNode).
The first reply from a node id fixes its name and records a ``node_identified`` event;
an id that never replied is named ``node-<id>`` (the control plane renames those rows
from the events, ``testbed/chaos.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from flwr.app import MetricRecord

from nodes.fl.telemetry import Telemetry


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
        self.names = list(names)
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
