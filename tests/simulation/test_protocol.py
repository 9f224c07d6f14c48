"""Flower's protocol on a client's link: latency legs, flow-control window, reply queue."""

from __future__ import annotations

import pytest

from testbed.emulation.link import LinkParams
from testbed.simulation.clock import ClientModel, VirtualClock
from testbed.simulation.config import SimulationSpec
from testbed.simulation.protocol import (
    ProtocolModel,
    server_queue_end,
    window_stall_s,
)

#: float arithmetic only
TOL_S = 1e-9
W = 65_535
#: HTTP/2's initial flow-control window, bytes (RFC 9113, 6.9.2: 2^16 - 1), gRPC's
HTTP2_INITIAL_WINDOW = 2**16 - 1
#: "five replies arriving together leave ~0.2 s more constant part than a slowest reply
#: arriving alone" (docs/results/calibration.md, read off the runs), seconds
FIVE_TOGETHER_EXTRA_S = 0.2


def test_window_stall_is_a_round_trip_less_the_windows_own_send_time() -> None:
    fast_long = LinkParams(bandwidth_mbps=20.0, latency_ms=150.0)
    # 154,152 bytes = 3 windows: 2 waits of 0.3 s - 65,535 * 8 / 20e6 s
    assert window_stall_s(154_152, fast_long, W) == pytest.approx(
        2 * (0.3 - W * 8 / 20e6), abs=TOL_S
    )
    # on a slow link the window takes longer to send than the update to come back
    assert window_stall_s(154_152, LinkParams(bandwidth_mbps=1.0, latency_ms=80.0), W) == 0.0
    # unlimited bandwidth: a full round trip per extra window
    assert window_stall_s(3 * W, LinkParams(latency_ms=10.0), W) == pytest.approx(0.04)
    assert window_stall_s(W, fast_long, W) == 0.0  # within one window
    assert window_stall_s(154_152, fast_long, None) == 0.0  # no window modelled


def test_replies_are_handled_in_arrival_order_one_at_a_time() -> None:
    assert server_queue_end([], 0.05) == 0.0
    assert server_queue_end([1.0, 1.0, 1.0], 0.1) == pytest.approx(1.3)
    # a slowest reply arriving alone: the others were handled while it was on its way
    assert server_queue_end([3.0, 0.5, 0.6], 0.1) == pytest.approx(3.1)


def test_the_clock_adds_latency_legs_and_window_waits_to_an_exchange() -> None:
    model = ClientModel(params=LinkParams(bandwidth_mbps=20.0, latency_ms=150.0))
    bare = VirtualClock({"a": model}, deadline_s=60.0)
    base = bare.exchange("a", 0, 1, 0.0, 0.0, 154_152, 154_152).seconds
    # the link model alone: one latency and the bytes each way
    assert base == pytest.approx(2 * (0.15 + 154_152 * 8 / 20e6), abs=TOL_S)
    clock = VirtualClock(
        {"a": model},
        deadline_s=60.0,
        protocol=ProtocolModel(latency_legs=7.0, startup_latency_legs=4.0, window_bytes=W),
        startup_s=0.5,
    )
    stall = window_stall_s(154_152, LinkParams(bandwidth_mbps=20.0, latency_ms=150.0), W)
    first = clock.exchange("a", 0, 1, 0.0, 0.0, 154_152, 154_152).seconds
    later = clock.exchange("a", 0, 2, 10.0, 0.0, 154_152, 154_152).seconds
    assert later == pytest.approx(base + 2 * stall + 7 * 0.15, abs=TOL_S)
    assert first == pytest.approx(later + 0.5 + 4 * 0.15, abs=TOL_S)  # first exchange only


def test_runs_take_the_counted_defaults_and_a_spec_can_turn_them_off() -> None:
    sim = SimulationSpec()
    # counted from Flower 1.41's request sequence, independently of the constants: the
    # pull that finds the message (2), the object pull's request (1),
    # ConfirmMessageReceived (2), PushMessages (2); GetRun and GetFab (a round trip each)
    assert sim.latency_legs == 2 + 1 + 2 + 2
    assert sim.startup_latency_legs == 2 * 2
    assert sim.flow_window_bytes == HTTP2_INITIAL_WINDOW
    # the per-reply work is what the runs showed: 5 replies together end ~0.2 s later
    reply = sim.server_reply_s
    extra = server_queue_end([1.0] * 5, reply) - server_queue_end([1.0], reply)
    assert extra == pytest.approx(FIVE_TOGETHER_EXTRA_S, abs=TOL_S)
    off = SimulationSpec.model_validate(
        {
            "latency_legs": 0,
            "startup_latency_legs": 0,
            "flow_window_bytes": None,
            "server_reply_s": 0,
        }
    )
    assert (off.latency_legs, off.flow_window_bytes, off.server_reply_s) == (0, None, 0)
