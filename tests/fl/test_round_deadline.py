"""A round ends at its deadline whatever the faults (issue 31; nodes/fl/deadline.py).

``bench/soak.py --faults 100 --nodes 8 --seed 11`` (round_timeout_s 10) had a 191 s
round 14: an outage's node was killed while it uploaded its reply, and the ServerApp's
pull of that reply's objects waited for the SuperLink's object-push session to expire
(180 s). The fleet test runs that round's fault mix (a crash during the round, a
flapping node and an outage just before it, a degraded link) on 8 nodes, and gives the
crashed node a slow uplink, so that its reply is still uploading at every deadline
(round 1 took 15.9 s and round 2 183 s before the fix, measured); the fast test drives
Flower's own ``HttpGrid`` against a SuperLink stand-in that never stores a reply's
objects.

Mutation tried: ``bound_pulls_by_deadline`` not called in ``nodes/fl/server_app.py``
(the fleet test's round 1 took 15.9 s, round 2 183 s; the fast test waited for the
stand-in's cut-off).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.app.message import remove_content_from_message
from flwr.common.serde import message_to_proto
from flwr.proto.message_pb2 import (  # type: ignore[attr-defined]
    ConfirmMessageReceivedResponse,
    PullObjectResponse,
)
from flwr.proto.runtime_pb2 import (  # type: ignore[attr-defined]
    PullAppMessagesResponse,
    PushAppMessagesResponse,
)
from flwr.supercore.inflatable.inflatable_object import get_object_tree
from flwr.supercore.run import Run
from flwr.superlink.grid.http_grid import HttpGrid

from nodes.fl.deadline import REASON, bound_pulls_by_deadline
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.conftest import processes_under

#: What a round may last beyond round_timeout_s: the last reply poll, recording, the
#: aggregation and the late-reply pull, on a loaded 2-core machine (measured: 0.1-0.3 s).
ROUND_END_TOL_S = 3.0
TIMEOUT_S = 10
#: The stand-in SuperLink's cut-off below (s): a pull not bound by the deadline waits
#: that long; a bound one ends at the deadline. Half of it tells them apart on any host.
GIVE_UP_S = 30.0

SOAK_ROUND_14 = f"""\
name: round-deadline
seed: 11
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, count: 8}}
links:
  nodes:
    edge-6: {{bandwidth_mbps: 0.18}}  # a 154 kB reply: ~7 s up, still uploading at 10 s
workload:
  fl: {{rounds: 3, local_epochs: 1, round_timeout_s: {TIMEOUT_S}, min_participants: 2,
        protocol_timing: fast}}
faults:  # soak seed 11's round 14, two rounds earlier
  - {{kind: flapping, node: edge-4, at_round: 2, phase: before, duration_s: 2, repeat: 2}}
  - {{kind: crash, node: edge-6, at_round: 2, phase: during, delay_s: 6}}
  - {{kind: outage, node: edge-8, at_round: 2, phase: before, duration_s: 3}}
  - {{kind: degrade, node: edge-7, at_round: 2, phase: before, bandwidth_mbps: 5,
      latency_ms: 80, duration_s: 4}}
"""


def round_durations(store: RunStore, run_id: str) -> dict[int, float]:
    """Seconds from each round's ``round_start`` to its ``round_end`` event."""
    events = store.events(run_id)
    start = {e.round: e.ts for e in events if e.kind == "round_start"}
    return {e.round: e.ts - start[e.round] for e in events if e.kind == "round_end"}


@pytest.mark.slow
def test_rounds_end_at_their_deadline_under_soak_round_14_faults(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    res = run_experiment(parse_spec(SOAK_ROUND_14, "round_deadline.yaml"), store)
    assert res.status == "completed"
    took = round_durations(store, res.run_id)
    assert set(took) == {1, 2, 3}, took
    why = [(r.round, r.node, r.status, r.reason) for r in store.round_status(res.run_id)]
    late = {r: round(s, 1) for r, s in took.items() if s > TIMEOUT_S + ROUND_END_TOL_S}
    assert not late, f"rounds over {TIMEOUT_S} + {ROUND_END_TOL_S} s: {late}; {why}"
    assert processes_under(tmp_path) == []


class StuckUploadSuperLink:
    """The Runtime API of a SuperLink holding one reply whose objects never arrive.

    It answers Flower's ``HttpGrid`` the way the SuperLink does after a node pushed its
    reply message and died before its objects: the first ``PullMessages`` hands out the
    reply, every ``PullObject`` of it finds the object registered but not stored, until
    ``give_up_s`` (the SuperLink's push session ending: then not found).
    """

    def __init__(self, give_up_s: float) -> None:
        self.give_up_s = give_up_s
        self.t0 = time.monotonic()
        self.replies: list[Message] = []
        self.handed_out = False

    def PushMessages(self, request: Any) -> Any:  # noqa: N802 (Flower's RPC name)
        ids = [m.metadata.message_id for m in request.messages_list]
        for mid, proto in zip(ids, request.messages_list, strict=True):
            reply = Message(RecordDict({"c": ConfigRecord({"x": 1})}), reply_to=_ins(proto, mid))
            reply.metadata.__dict__["_message_id"] = reply.object_id
            self.replies.append(reply)
        return PushAppMessagesResponse(message_ids=ids, session_id="s", objects_to_push=[])

    def PushObject(self, request: Any) -> Any:  # noqa: N802 (none asked for: never called)
        raise AssertionError("no object was asked for")

    def PullMessages(self, request: Any) -> Any:  # noqa: N802
        if self.handed_out:
            return PullAppMessagesResponse()
        self.handed_out = True
        return PullAppMessagesResponse(
            messages_list=[message_to_proto(remove_content_from_message(m)) for m in self.replies],
            message_object_trees=[get_object_tree(m) for m in self.replies],
        )

    def PullObject(self, request: Any) -> Any:  # noqa: N802
        gone = time.monotonic() - self.t0 > self.give_up_s
        return PullObjectResponse(object_found=not gone, object_available=False)

    def ConfirmMessageReceived(self, request: Any) -> Any:  # noqa: N802
        return ConfirmMessageReceivedResponse()


def _ins(proto: Any, message_id: str) -> Message:
    """The instruction message a reply answers (id and destination as pushed)."""
    msg = Message(RecordDict(), proto.metadata.dst_node_id, proto.metadata.message_type)
    msg.metadata.__dict__["_message_id"] = message_id
    return msg


def test_a_reply_whose_objects_never_arrive_ends_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Flower's own ``send_and_receive`` and ``pull_messages`` (a real ``HttpGrid``):
    with the bound, the reply is an error naming the deadline, by the deadline; the
    stand-in's cut-off (30 s here, 180 s in Flower's SuperLink) is never reached."""
    from flwr.supercore.task_identity import TaskIdentity

    for attr, value in (("_run_id", 7), ("_node_id", 1), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)
    timeout_s = 1.0
    grid = HttpGrid(token="t")
    grid.set_run(Run.create_empty(run_id=7))
    superlink = StuckUploadSuperLink(give_up_s=GIVE_UP_S)
    grid._client = superlink  # type: ignore[assignment]  (the Runtime API client)
    bound_pulls_by_deadline(grid)
    msg = Message(RecordDict({"c": ConfigRecord({"lr": 0.1})}), 3, "train")
    t0 = time.monotonic()
    replies = list(grid.send_and_receive([msg], timeout=timeout_s))
    took = time.monotonic() - t0
    assert took < GIVE_UP_S / 2, (took, timeout_s)  # by the deadline, not the cut-off
    assert len(replies) == 1 and replies[0].has_error()
    assert replies[0].error.reason == REASON
    assert replies[0].metadata.reply_to_message_id == msg.metadata.message_id
    # outside a round (the late-reply pull) nothing waits: a stored-nothing reply is cut
    superlink.handed_out = False
    t0 = time.monotonic()
    late = list(grid.pull_messages([msg.metadata.message_id]))
    assert time.monotonic() - t0 < GIVE_UP_S / 2
    assert len(late) == 1 and late[0].error.reason == REASON
