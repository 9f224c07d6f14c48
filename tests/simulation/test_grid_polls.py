"""The clocked grid's round length with Flower's poll grid, on Flower's real in-memory
grid and LinkState (no Ray: a thread answers as the Simulation Engine's workers do)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from flwr.app import ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.proto.task_pb2 import Task
from flwr.server.superlink.fleet.vce import vce_api
from flwr.server.superlink.linkstate import LinkStateFactory
from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.superlink.federation import NoOpFederationManager
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from nodes.fl.telemetry import Telemetry
from testbed.simulation.clock import VirtualClock
from testbed.simulation.grid import ClockedGrid
from testbed.simulation.polls import PollGrid
from testbed.simulation.protocol import ProtocolModel
from testbed.simulation.runner import simulation_run

COMPUTE_S = 0.2  # every reply's measured train-duration-s
DELAY_S = 1.0  # the clock's protocol delay
PHASES = {0: 0.5, 1: 1.0, 2: 2.9}  # pull phases: replies at 1.7, 2.2 and 4.1 s


def virtual_round_s(
    tmp_path: Path, deadline_s: float, polls: PollGrid | None, reply_s: float = 0.0
) -> float:
    """One train round of three clients through a ClockedGrid: its virtual_round_s."""
    factory = LinkStateFactory(
        FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
    )
    mapping = vce_api._register_nodes(num_nodes=len(PHASES), state_factory=factory)
    run = simulation_run(9, {})
    state: Any = factory.state()
    state.run_ids[run.run_id] = RunRecord(run=run)
    state.task_store[run.run_id] = Task(task_id=run.run_id, run_id=run.run_id)
    grid = InMemoryGrid(factory)
    grid.set_run(run)
    grid.pull_interval = 0.01
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
                    reply = Message(RecordDict({"metrics": metrics}), reply_to=msg)
                    reply.metadata.__dict__["_message_id"] = str(uuid4())
                    state.store_message_res(reply)

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
