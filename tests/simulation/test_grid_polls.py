"""The clocked grid's round length with Flower's poll grid, on Flower's real in-memory
grid and LinkState (no Ray: a thread answers as the Simulation Engine's workers do)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from flwr.app import ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from nodes.fl.telemetry import Telemetry
from testbed.simulation.clock import VirtualClock
from testbed.simulation.grid import ClockedGrid
from testbed.simulation.polls import PollGrid
from testbed.simulation.protocol import ProtocolModel
from tests.simulation.inmemory import answer as answer_msg
from tests.simulation.inmemory import inmemory_grid

COMPUTE_S = 0.2  # every reply's measured train-duration-s
DELAY_S = 1.0  # the clock's protocol delay
PHASES = {0: 0.5, 1: 1.0, 2: 2.9}  # pull phases: replies at 1.7, 2.2 and 4.1 s


def virtual_round_s(
    tmp_path: Path, deadline_s: float, polls: PollGrid | None, reply_s: float = 0.0
) -> float:
    """One train round of three clients through a ClockedGrid: its virtual_round_s."""
    grid, state, mapping = inmemory_grid(len(PHASES), 9)
    path = tmp_path / f"tel-{deadline_s}-{polls is not None}-{reply_s}.jsonl"
    protocol = ProtocolModel(server_reply_s=reply_s)
    clock = VirtualClock({}, deadline_s, DELAY_S, polls=polls, protocol=protocol)
    names = [f"c{p}" for p in range(len(PHASES))]
    ClockedGrid(grid, clock, names, Telemetry(str(path)), 30.0, mapping)
    stop = threading.Event()

    def answer() -> None:  # the Simulation Engine's worker, without Ray
        while not stop.wait(0.01):
            for node_id in mapping:
                for msg in state.get_message_ins(node_id=node_id, limit=1):
                    metrics = MetricRecord({"train-duration-s": COMPUTE_S})
                    answer_msg(state, msg, RecordDict({"metrics": metrics}))

    thread = threading.Thread(target=answer)
    thread.start()
    cfg = RecordDict({"config": ConfigRecord({"server-round": 1})})
    node = {p: n for n, p in mapping.items()}
    try:
        msgs = [Message(cfg, node[p], MessageType.TRAIN, group_id="1") for p in PHASES]
        replies = list(grid.send_and_receive(msgs, timeout=30.0))
    finally:
        stop.set()
        thread.join()
    assert len(replies) == len(PHASES)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    (value,) = [r["value"] for r in rows if r.get("name") == "virtual_round_s"]
    return float(value)


def test_round_ends_at_the_serverapps_poll_after_the_slowest_reply(tmp_path: Path) -> None:
    slowest = PHASES[2] + COMPUTE_S + DELAY_S  # 4.1 s
    assert virtual_round_s(tmp_path, 60.0, None) == pytest.approx(COMPUTE_S + DELAY_S)
    assert virtual_round_s(tmp_path, 60.0, PollGrid(3.0, phases=dict(PHASES))) == (
        pytest.approx(6.0)  # polls at 0, 3, 6 s: the 4.1 s reply is seen at 6 s
    )
    assert slowest < 5.0  # every reply is in time, but the poll falls after the deadline:
    assert virtual_round_s(tmp_path, 5.0, PollGrid(3.0, phases=dict(PHASES))) == (
        pytest.approx(5.0)
    )


def test_the_serverapp_handles_replies_one_at_a_time(tmp_path: Path) -> None:
    # three replies arriving together at 1.2 s, 0.25 s of ServerApp work each
    assert virtual_round_s(tmp_path, 60.0, None, reply_s=0.25) == pytest.approx(
        COMPUTE_S + DELAY_S + 3 * 0.25
    )
    # the queue never ends a round past its deadline
    assert virtual_round_s(tmp_path, 1.5, None, reply_s=0.25) == pytest.approx(1.5)
