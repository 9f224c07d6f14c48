"""Flower's Deployment Engine protocol on a client's link, as the virtual clock counts it.

A MODEL (labelled ``modelled``), of what a real fleet's round spends beyond the
client's compute and its two payload transfers, which :mod:`testbed.simulation.timeline`
counts (one latency each way + bytes over the rate). Measured on the local fleet
(docs/results/calibration.md, "What changed on 2026-11-27"): a round's protocol time grows
with the link's latency by ~14.7 one-way latencies per exchange at 20 Mbit/s, so a
constant term cannot follow a 150 ms link. Four parts, each named in the spec
(``simulation.*``) and carried together as a :class:`ProtocolModel`:

``latency_legs`` (7)
    One-way latencies on an exchange's critical path beyond the link model's two,
    counted from Flower 1.41's request sequence (``flwr/supernode/
    start_client_internal.py``): the SuperNode's pull that finds the message (its
    request is in flight when the message appears, on average, and its reply comes
    back: 2), the object pull's request (1; its reply is the download), the
    ``ConfirmMessageReceived`` round trip before the ClientApp is handed the task (2),
    and ``PushMessages``' round trip before the reply's objects are pushed (2).
``startup_latency_legs`` (4)
    More on a client's first exchange of a run: ``GetRun`` and ``GetFab`` (2 round
    trips).
``flow_window_bytes`` (65,535)
    gRPC's HTTP/2 flow-control window (its initial size): a payload of ``n`` bytes
    waits ``ceil(n / W) - 1`` times for the receiver's window update, each time one
    round trip less the time the window itself takes at the rate,
    ``max(0, 2 * latency - W / rate)``: nothing on a slow link, most of a round trip per
    window on a fast, long one.
``server_reply_s`` (0.05 s)
    The ServerApp's serial work per reply (pulling its objects from the SuperLink,
    deserialising): replies are handled in arrival order, one at a time, so replies
    that arrive together end the round later than one that arrives alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from testbed.emulation.link import LinkParams

#: One-way latencies per train exchange beyond the link model's two (see the module).
LATENCY_LEGS = 7.0
#: One-way latencies more on a client's first exchange of a run (GetRun, GetFab).
STARTUP_LATENCY_LEGS = 4.0
#: gRPC's initial HTTP/2 flow-control window, bytes.
FLOW_WINDOW_BYTES = 65_535
#: The ServerApp's serial work per reply, seconds: read off local runs
#: (docs/results/calibration.md: 5 replies arriving together end a round ~0.2 s later
#: than a slowest reply arriving alone).
SERVER_REPLY_S = 0.05


def window_stall_s(nbytes: int, params: LinkParams, window_bytes: int | None) -> float:
    """Time a transfer of ``nbytes`` waits for flow-control window updates, seconds.

    ``(ceil(nbytes / W) - 1) * max(0, rtt - W / rate)``, the rate the goodput
    (bandwidth less loss; unlimited: ``W / rate`` = 0); 0 without a window (``None``) or
    for a payload within one window.
    """
    if window_bytes is None or nbytes <= window_bytes:
        return 0.0
    rate = params.rate_bytes_per_s
    send_s = 0.0
    if rate is not None:
        goodput = rate * (1.0 - params.loss_pct / 100.0)
        send_s = window_bytes / goodput if goodput > 0 else math.inf
    return (math.ceil(nbytes / window_bytes) - 1) * max(0.0, params.rtt_s - send_s)


def server_queue_end(arrivals: Iterable[float], reply_s: float) -> float:
    """When the ServerApp has handled every reply: first come, first served, ``reply_s``
    each (0.0 for no reply).

    Parameters
    ----------
    arrivals : iterable of float
        Virtual seconds since the round started at which each reply reached the
        SuperLink.
    reply_s : float
        The ServerApp's work per reply, seconds.
    """
    done = 0.0
    for t in sorted(arrivals):
        done = max(done, t) + reply_s
    return done


@dataclass(frozen=True)
class ProtocolModel:
    """The protocol-on-the-link terms of a run (all 0 / None: off, the clock's default;
    a run takes ``SimulationSpec.protocol_model()``, the spec's values or the defaults
    above).

    Attributes
    ----------
    latency_legs, startup_latency_legs : float
        One-way link latencies added to every exchange / to a client's first one.
    window_bytes : int or None
        Flow-control window of the payload transfers (None: no window waits).
    server_reply_s : float
        The ServerApp's work per reply, seconds.
    """

    latency_legs: float = 0.0
    startup_latency_legs: float = 0.0
    window_bytes: int | None = None
    server_reply_s: float = 0.0

    def stall_s(self, nbytes: int, params: LinkParams) -> float:
        """:func:`window_stall_s` with this model's window."""
        return window_stall_s(nbytes, params, self.window_bytes)
