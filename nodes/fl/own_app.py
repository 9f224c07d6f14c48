"""The testbed's own Flower app, observed as any app is: one recording mechanism.

The testbed's ServerApp (:mod:`nodes.fl.server_app`) hands its Grid to
:class:`OwnAppObserver`, the :class:`nodes.fl.grid_observer.GridObserver` that observes
a user's app, reading the replies of the testbed's ClientApp (:mod:`nodes.fl.client_app`)
by their keys: a node is named by its reply's ``partition-id`` (the run's
:class:`nodes.fl.identity.NodeDirectory`, shared with the strategy), and its metrics
keep the testbed's names (:data:`TRAIN_METRICS`; ``eval_acc`` / ``eval_loss`` of the
round the evaluated model came from).

Everything about the messages is the observer's, as for any app: statuses per (round,
node) (``completed``, ``failed``, ``late``; ``stale_node_id`` events for a restarted
node's old id), bytes, round trips, round durations, the ``round_start`` /
``round_end`` events and every reply's metrics. The strategy
(:class:`nodes.fl.recording.RecordingStrategy`) records only what comes of its
aggregation (``federated_acc``, contributions, what it does with late updates), as any
ServerApp logs its own results, and tells the observer when a round is over
(:meth:`~nodes.fl.grid_observer.GridObserver.close_round`, at aggregation), so the
statuses appear then instead of at the next round's first message, and when it is done
with it (:meth:`~nodes.fl.grid_observer.GridObserver.settle_round`, after its
evaluation: the round's bytes, evaluation included).
"""

from __future__ import annotations

from collections.abc import Iterator

from flwr.app import ConfigRecord, Message, MessageType, MetricRecord

from nodes.compression.device_time import TT_METRICS
from nodes.fl.grid_observer import GridObserver
from nodes.fl.identity import NodeDirectory
from nodes.fl.telemetry import Telemetry

#: reply metric key -> telemetry metric name, recorded for every train reply that has it.
TRAIN_METRICS = (
    ("train-loss", "train_loss"),
    ("train-duration-s", "train_duration_s"),
    ("train-cpu-s", "train_cpu_s"),
    ("device-time-s", "device_time_s"),
    ("num-examples", "num_examples"),
    *TT_METRICS,  # TT-SVD on the device: measured, stretched, modelled engine
)


def scalar(metrics: MetricRecord, key: str) -> float:
    """A scalar metric of a reply as float (KeyError if absent, TypeError if a list)."""
    value = metrics[key]
    if not isinstance(value, int | float):
        raise TypeError(f"metric {key!r} is not a scalar: {value!r}")
    return float(value)


class OwnAppObserver(GridObserver):
    """The observer of the testbed's own app: nodes named by ``partition-id``, reply
    metrics under the testbed's names.

    Parameters
    ----------
    telemetry : Telemetry
        Where records go.
    nodes : NodeDirectory
        Flower node id -> node name, learned from the replies' ``partition-id``
        (the strategy's, so each node is identified once).
    """

    def __init__(self, telemetry: Telemetry, nodes: NodeDirectory) -> None:
        super().__init__(telemetry, nodes.names)
        self.nodes = nodes

    def name(self, node_id: int) -> str:
        """The node's name in the run's directory (``node-<id>`` until it answered)."""
        return self.nodes.name(node_id)

    def reply_node(self, node_id: int, reply: Message, obs: ConfigRecord | None) -> str:
        """The node's name, learned from the reply's ``partition-id`` if new."""
        content = reply.content if reply.has_content() else None
        return self.nodes.learn(node_id, content.metric_records.get("metrics") if content else None)

    def reply_metrics(self, reply: Message, r: int) -> Iterator[tuple[str, float, int]]:
        """A train reply's :data:`TRAIN_METRICS`; an evaluation's ``eval_acc`` and
        ``eval_loss``, for round ``r`` (an evaluate reply) or the round whose global
        model it evaluated (``eval-round``: piggybacked on the next train reply)."""
        m = reply.content.metric_records.get("metrics")
        if m is None:
            return
        if reply.metadata.message_type == MessageType.TRAIN:
            for key, out in TRAIN_METRICS:
                if key in m:
                    yield out, scalar(m, key), r
        if "eval-acc" in m:
            at = int(scalar(m, "eval-round")) if "eval-round" in m else r
            yield "eval_acc", scalar(m, "eval-acc"), at
            yield "eval_loss", scalar(m, "eval-loss"), at
