"""The virtual clock of ``--backend simulation`` (a model, labelled ``modelled``).

Flower's Simulation Engine runs every ClientApp on a Ray actor of this host, so wall
time says nothing about the devices and links a spec describes. Per client and round
the clock models::

    virtual_s = compute_s * stretch                  (measured compute, stretched)
              + bytes_down * 8 / bandwidth_bps       (real payload bytes, server -> client)
              + bytes_up * 8 / bandwidth_bps         (real payload bytes, client -> server)
              + 2 * latency_s                        (one way each direction)
              + protocol_delay_s                     (named parameter: Flower's own delays)

``compute_s`` is the ClientApp's measured ``train-duration-s`` (0 for a message without
it), ``stretch = 1 / cpu_speed_factor`` of the node's profile (never below 1, as the
local backend's emulated wait), the bandwidth and latency are the node's link
parameters (unlimited bandwidth: no transfer term). A reply whose virtual time exceeds
the round deadline (``round_timeout_s``) is withheld from the strategy, so the
recording strategy records the node ``failed`` (``no reply before round timeout``)
exactly as the local backend does for a reply that misses its round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from flwr.app import Message, MessageType
from flwr.serverapp import Grid

from nodes.fl.telemetry import Telemetry

#: Default of the named protocol-delay term, seconds per client and round (0: not modelled).
PROTOCOL_DELAY_S = 0.0


@dataclass(frozen=True)
class ClientModel:
    """What the clock knows of one client node.

    Attributes
    ----------
    stretch : float
        Device time per second of measured host compute (>= 1).
    bandwidth_mbps : float or None
        Link rate each way, 10**6 bit/s (None: unlimited).
    latency_ms : float
        One-way link latency, ms.
    """

    stretch: float = 1.0
    bandwidth_mbps: float | None = None
    latency_ms: float = 0.0

    def link_s(self, bytes_down: int, bytes_up: int) -> float:
        """Virtual link time of one exchange, seconds (transfer both ways + 2 latencies)."""
        transfer = 0.0
        if self.bandwidth_mbps is not None:
            transfer = (bytes_down + bytes_up) * 8 / (self.bandwidth_mbps * 1e6)
        return transfer + 2 * self.latency_ms / 1000.0


@dataclass(frozen=True)
class VirtualClock:
    """The model's parameters for a run.

    Attributes
    ----------
    clients : mapping of str to ClientModel
        Per client node name.
    deadline_s : float
        Round deadline on virtual time (``workload.fl.round_timeout_s``), seconds.
    protocol_delay_s : float
        Added to every client's round time, seconds.
    """

    clients: Mapping[str, ClientModel]
    deadline_s: float
    protocol_delay_s: float = PROTOCOL_DELAY_S

    def client_s(self, name: str, compute_s: float, bytes_down: int, bytes_up: int) -> float:
        """Virtual time of one client's exchange in a round, seconds."""
        c = self.clients.get(name, ClientModel())
        return compute_s * c.stretch + c.link_s(bytes_down, bytes_up) + self.protocol_delay_s


def _scalar(msg: Message, key: str, default: float) -> float:
    """A scalar metric of a reply (``default`` if absent)."""
    recs = msg.content.metric_records
    if "metrics" not in recs or key not in recs["metrics"]:
        return default
    value = recs["metrics"][key]
    return float(value) if isinstance(value, int | float) else default


def _payload(msg: Message) -> int:
    """Array payload bytes of a message (0 without arrays)."""
    from nodes.fl.task import array_nbytes  # torch: only in the simulation process

    return sum(array_nbytes(a) for a in msg.content.array_records.values())


class ClockedGrid:
    """Decide every ``send_and_receive`` of a Grid on virtual time, and record it.

    Installed on the grid instance (as ``tolerate_superlink_restarts`` does); the
    ServerApp code is unchanged. Train replies come back when all arrived (or after
    ``wall_cap_s``); each is timed on the virtual clock, and those past the deadline are
    dropped. Records: ``virtual_client_s`` per (round, node), ``virtual_round_s`` per
    round (slowest kept reply, or the deadline when one was dropped) and
    ``virtual_time_s`` (cumulative, per round).
    """

    def __init__(
        self, grid: Grid, clock: VirtualClock, names: list[str], tel: Telemetry, wall_cap_s: float
    ) -> None:
        self.clock, self.names, self.tel, self.wall_cap_s = clock, names, tel, wall_cap_s
        self.elapsed_s = 0.0
        self._inner: Callable[..., Iterable[Message]] = grid.send_and_receive
        grid.send_and_receive = self.send_and_receive  # type: ignore[method-assign]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Flower's call, with the deadline decided on virtual time."""
        messages = list(messages)
        if not messages or messages[0].metadata.message_type != MessageType.TRAIN:
            return self._inner(messages, timeout=timeout)  # evaluation: wall as usual
        down = {m.metadata.dst_node_id: _payload(m) for m in messages}
        rnd = _round_of(messages)
        replies = list(self._inner(messages, timeout=self.wall_cap_s))
        kept, slowest = [], 0.0
        for reply in replies:
            vt = self._time(reply, down, rnd)
            if vt is not None and vt > self.clock.deadline_s:
                slowest = self.clock.deadline_s
                self._identify(reply)  # its rows name the node, not node-<flower id>
                continue
            slowest = max(slowest, vt or 0.0)
            kept.append(reply)
        if len(replies) < len(messages):
            slowest = self.clock.deadline_s
        if rnd is not None:
            self.elapsed_s += slowest
            self.tel.metric("virtual_round_s", slowest, rnd)
            self.tel.metric("virtual_time_s", self.elapsed_s, rnd)
        return kept

    def _identify(self, reply: Message) -> None:
        """A ``node_identified`` event for a reply the strategy never sees, so the control
        plane can name the rows the strategy records under the node's Flower id."""
        pid = int(_scalar(reply, "partition-id", -1))
        if 0 <= pid < len(self.names):
            self.tel.event(
                "node_identified", node=self.names[pid], node_id=str(reply.metadata.src_node_id)
            )

    def _time(self, reply: Message, down: dict[int, int], rnd: int | None) -> float | None:
        """Virtual time of one reply (None for an error reply: the engine's own)."""
        if reply.has_error():
            return None
        pid = int(_scalar(reply, "partition-id", -1))
        name = self.names[pid] if 0 <= pid < len(self.names) else str(reply.metadata.src_node_id)
        compute = _scalar(reply, "train-duration-s", 0.0)
        vt = self.clock.client_s(
            name, compute, down.get(reply.metadata.src_node_id, 0), _payload(reply)
        )
        if rnd is not None:
            self.tel.metric("virtual_client_s", vt, rnd, name)
        return vt


def _round_of(messages: list[Message]) -> int | None:
    """The ``server-round`` of a batch of messages (None when they carry none)."""
    for m in messages:
        cfg = m.content.config_records
        if "config" in cfg and "server-round" in cfg["config"]:
            return int(str(cfg["config"]["server-round"]))
    return None
