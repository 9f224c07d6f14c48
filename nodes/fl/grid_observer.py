"""The Grid side of observing a Flower App: every message pushed, every reply pulled.

:class:`GridObserver` instruments the Grid handed to a ServerApp, a user's
(:mod:`nodes.fl.observe`) or the testbed's own (:mod:`nodes.fl.own_app`): one recording
mechanism for every app, none of it through the app's strategy. It records every
message pushed (destination, type, round, time, array bytes) and every reply pulled
(time, size, Flower's error, the MetricRecords). A message's round is its group id when
it has one, else the ``server-round`` of its ConfigRecord (Flower's strategies send
it), else the current round or the next (:meth:`GridObserver.round_of`).

What it records of a round:

* ``round_start`` when the round's first message is pushed;
* per reply, for the message's round and the replying node: the reply's metrics
  (every MetricRecord key, every numeric ConfigRecord value), ``bytes_received``,
  ``round_trip_s`` (push to pull; replies with content only: an error reply may come
  from the SuperLink) and the ClientApp's times (``compute_s``, ``cpu_s``,
  ``device_time_s``, from :data:`nodes.fl.observed_client.OBSERVED`);
* when the round's exchange is over (*closed*): per node a status, ``completed``,
  ``failed`` (Flower's error, or no reply within the app's timeout) or ``late`` (a
  reply pulled after the ``send_and_receive`` call that sent it returned, or after its
  round closed), then ``round_duration_s`` (first push to the last reply, or to the
  return of the round's last ``send_and_receive`` call: a silent node makes the round
  last until the app's deadline) and ``round_end``;
* when the round is done with (*settled*): per node ``bytes_sent`` (every node sent a
  message, failed ones too) and ``bytes_lost`` (the messages that failed), once.

A round is closed and settled when the next round's first message is pushed or the app
ends (:meth:`GridObserver.finish`). An app may say earlier that a round's exchange is
over (:meth:`GridObserver.close_round`) and that it is done with it
(:meth:`GridObserver.settle_round`): the testbed's own strategy closes at aggregation,
so its statuses appear then, and settles after its evaluation. A reply pulled after its
round closed turns the node's status into ``late``. A message pushed into a round after
the round closed (an evaluation after the aggregated training) counts in the round's
bytes; when it fails, that is a ``message_failed`` event: the round's statuses stand.

A restarted SuperNode answers under a new Flower node id while its old id is still
sampled until its heartbeat expires: when a node has a completed message in a round
under one id, the failures of its other ids that round are not its status (nor its
bytes) but a ``stale_node_id`` event (round, node, node id, reason).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from kernel.dilation import emulated, tdf
from nodes.fl.identity import NodeNames
from nodes.fl.observed_client import OBSERVED, message_round
from nodes.fl.telemetry import Telemetry

#: Seconds the ServerApp waits at a held round boundary for the control plane's faults.
HOLD_TIMEOUT_S = 30.0
HOLD_POLL_S = 0.02
#: A failure reason is cut to this many characters.
REASON_CHARS = 500

#: The ClientApp's own error text inside an engine's report (Ray's wraps it in a
#: traceback): ``app 'NAME': ClientApp on node N raised in ...``.
_USER_ERROR = re.compile(r"app '[^']*': ClientApp on node \S+ raised [^\n]*")
#: The ConfigRecord in which Flower's compat layer (a legacy ``NumPyClient``) reports its
#: call's status (``fitres.status``: code and message): Flower's, not the app's metrics.
_FLOWER_STATUS = re.compile(r"\w+res\.status")


def payload_bytes(content: RecordDict) -> int:
    """Bytes of a message's arrays (their serialized buffers, as
    :func:`nodes.fl.task.array_nbytes` counts them), the bulk of what travels."""
    return sum(len(a.data) for rec in content.array_records.values() for a in rec.values())


def _numeric(value: object) -> bool:
    """An int or float (a bool is neither here: it is a flag, not a measurement)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _clean_error(reason: str | None) -> str:
    """Flower's error reason, reduced to the ClientApp's own message when it has one."""
    found = _USER_ERROR.search(reason or "")
    return found.group(0) if found else (reason or "")


@dataclass
class Sent:
    """One message the app pushed, and what became of it."""

    node_id: int
    mtype: str
    round: int
    t: float  # when its push began (UNIX s)
    nbytes: int
    reply_t: float | None = None
    returned_t: float | None = None  # when the send_and_receive call that pushed it returned
    error: str | None = None  # why it failed (None: answered, or not decided yet)
    closed: bool = False  # its call returned, or its round closed, without its reply
    late: bool = False  # answered after it was closed
    after_close: bool = False  # pushed into its round after the round closed
    recorded: bool = False  # what it came to is recorded (its status, or its event)

    @property
    def ok(self) -> bool:
        """Answered, without an error."""
        return self.reply_t is not None and self.error is None


@dataclass
class RoundBook:
    """What one round (group id) saw."""

    sent: dict[int, list[Sent]] = field(default_factory=dict)  # not settled yet, by node id
    ended: bool = False  # closed: statuses, duration and round_end recorded
    got: set[tuple[int, str]] = field(default_factory=set)  # (node id, type) sent, until ended
    answered: dict[str, set[int]] = field(default_factory=dict)  # node -> ids that completed
    stale: set[int] = field(default_factory=set)  # ids a restarted node had before


class GridObserver:
    """Record every message of a Grid (instrumented in place, see :meth:`attach`).

    Parameters
    ----------
    telemetry : Telemetry
        Where records go.
    node_names : sequence of str
        The client nodes of the fleet (their SuperNodes' ``node-name``).
    hold_rounds : sequence of int
        Rounds before whose first message the ServerApp waits until the control plane
        has applied that round's faults (it writes the round to ``hold_path``).
    hold_path : str
        The file the control plane writes the last round it released to.
    timeout_cap_s : float or None
        A ceiling on the app's own ``send_and_receive`` timeout (the testbed's round
        deadline, ``workload.fl.round_timeout_s``), so a ClientApp that never replies
        cannot hold the run for Flower's default hour.

    A variant names the nodes (:meth:`reply_node`, :meth:`name`) and reads the metrics
    of an app's replies (:meth:`reply_metrics`) its own way: subclass and override.
    """

    def __init__(
        self,
        telemetry: Telemetry,
        node_names: Sequence[str],
        hold_rounds: Sequence[int] = (),
        hold_path: str = "",
        timeout_cap_s: float | None = None,
    ) -> None:
        self.tel = telemetry
        self.node_names = node_names if isinstance(node_names, NodeNames) else list(node_names)
        self.hold_rounds, self.hold_path = set(hold_rounds), hold_path
        self.timeout_cap_s = timeout_cap_s
        self.names: dict[int, str] = {}
        self.msgs: dict[str, Sent] = {}  # message id -> message, until its reply comes
        self.rounds: dict[int, RoundBook] = {}
        self.current = 0
        self._groups: dict[str, int] = {}
        self._calls = 0
        self._active = 0  # the send_and_receive call under way (0: none)
        self._open: dict[int, list[Sent]] = {}  # call -> its messages (until it returns)
        self._unsettled: set[int] = set()  # rounds with messages whose bytes are not recorded

    # -- instrumenting ---------------------------------------------------------------
    def attach(self, grid: Grid) -> Grid:
        """Instrument ``grid`` in place (instance attributes: Flower's own
        ``send_and_receive`` calls ``self.push_messages`` / ``self.pull_messages``)."""
        push, pull, sar = grid.push_messages, grid.pull_messages, grid.send_and_receive

        def push_messages(messages: Iterable[Message]) -> Iterable[str]:
            messages = list(messages)
            t, rounds = time.time(), self._before_push(messages)
            # (sizes before the push: a grid below may repack the content, nodes.fl.packing)
            sizes = [payload_bytes(m.content) if m.has_content() else 0 for m in messages]
            ids = list(push(messages))
            self._pushed(messages, ids, rounds, sizes, t)
            return ids

        def pull_messages(message_ids: Iterable[str]) -> Iterable[Message]:
            replies = list(pull(message_ids))
            self._pulled(replies)
            return replies

        def send_and_receive(
            messages: Iterable[Message], *, timeout: float | None = None
        ) -> Iterable[Message]:
            self._calls += 1
            call = self._active = self._calls
            if self.timeout_cap_s is not None:
                timeout = min(timeout, self.timeout_cap_s) if timeout else self.timeout_cap_s
            try:
                return sar(messages, timeout=timeout)
            finally:
                self._active = 0
                self._call_returned(call, timeout)

        grid.push_messages = push_messages  # type: ignore[method-assign]
        grid.pull_messages = pull_messages  # type: ignore[method-assign]
        grid.send_and_receive = send_and_receive  # type: ignore[method-assign]
        return grid

    # -- naming ------------------------------------------------------------------------
    def round_of(self, message: Message) -> int:
        """The app's round of a message being pushed: its group id when it has one (a
        number as it is, else the order in which the group first appeared), else the
        ``server-round`` of its ConfigRecord (what Flower's strategies send), else the
        current round, or the next one when the current one is closed or its node
        already got a message of its type in it."""
        group = message.metadata.group_id
        if group:
            return self._groups.setdefault(
                group, int(group) if group.isdigit() else len(self._groups) + 1
            )
        declared = message_round(message)
        if declared is not None:
            return declared
        book = self.rounds.get(self.current)
        md = message.metadata
        if book is None or book.ended or (md.dst_node_id, md.message_type) in book.got:
            return self.current + 1
        return self.current

    def name(self, node_id: int) -> str:
        """The node's name once a reply told it, else ``node-<id>`` (the control plane
        renames those rows from the SuperNodes' registrations)."""
        return self.names.get(node_id, f"node-{node_id}")

    def reply_node(self, node_id: int, reply: Message, obs: ConfigRecord | None) -> str:
        """The name of the node that answered ``reply`` to a message sent to
        ``node_id``: learned from the observing ClientApp's record ``obs``."""
        if obs is not None:
            self.identify(node_id, str(obs["node"]))
        return self.name(node_id)

    def identify(self, node_id: int, name: str) -> None:
        """Node ``node_id`` is ``name`` (event ``node_identified``, once)."""
        if node_id not in self.names:
            self.names[node_id] = name
            self.tel.event("node_identified", node=name, node_id=str(node_id))

    def reply_metrics(self, reply: Message, r: int) -> Iterator[tuple[str, float, int]]:
        """``(name, value, round)`` of each metric of a reply of round ``r``: every
        numeric value of its MetricRecords and ConfigRecords (a legacy ``NumPyClient``'s
        metrics dicts travel in ``fitres.metrics`` / ``evaluateres.metrics``) under its
        key (a list: ``key[i]``, one per item); strings, bytes, booleans and Flower's
        compat status records are not the app's metrics."""
        content = reply.content
        configs = [c for n, c in content.config_records.items() if not _FLOWER_STATUS.fullmatch(n)]
        records: list[Mapping[str, Any]] = [*content.metric_records.values(), *configs]
        for rec in records:
            for key, value in rec.items():
                if isinstance(value, list):
                    for i, v in enumerate(value):
                        if _numeric(v):
                            yield f"{key}[{i}]", float(v), r
                elif _numeric(value):
                    yield str(key), float(value), r

    # -- pushes and pulls --------------------------------------------------------------
    def _before_push(self, messages: list[Message]) -> list[int]:
        """The messages' rounds; a new round's first message settles the rounds before
        it, starts this one, and holds it while the control plane applies faults
        planned before it."""
        rounds = []
        for m in messages:
            r = self.round_of(m)
            rounds.append(r)
            if r in self.rounds:
                continue
            for earlier in sorted(self._unsettled):
                self.settle_round(earlier)
            self.rounds[r] = RoundBook()
            self.current = r
            self.tel.event("round_start", round=r, sampled=len(messages),
                           group_id=m.metadata.group_id)  # fmt: skip
            self._hold(r)
        return rounds

    def _hold(self, r: int) -> None:
        if r not in self.hold_rounds or not self.hold_path:
            return
        deadline = time.monotonic() + HOLD_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if int(Path(self.hold_path).read_text() or 0) >= r:
                    self.tel.event("round_released", round=r)
                    return
            except (OSError, ValueError):
                pass
            time.sleep(HOLD_POLL_S)
        self.tel.event("round_hold_timeout", round=r, waited_s=HOLD_TIMEOUT_S)

    def _pushed(
        self, messages: list[Message], ids: list[str], rounds: list[int], sizes: list[int],
        t: float,
    ) -> None:  # fmt: skip
        for m, mid, r, nbytes in zip(messages, ids, rounds, sizes, strict=False):
            md = m.metadata
            book = self.rounds.setdefault(r, RoundBook())
            sent = Sent(md.dst_node_id, md.message_type, r, t, nbytes, after_close=book.ended)
            self.msgs[mid] = sent
            if self._active:
                self._open.setdefault(self._active, []).append(sent)
            book.sent.setdefault(md.dst_node_id, []).append(sent)
            if not book.ended:
                book.got.add((md.dst_node_id, md.message_type))
            self._unsettled.add(r)

    def _pulled(self, replies: list[Message]) -> None:
        now = time.time()
        for reply in replies:
            obs = None
            if reply.has_content() and OBSERVED in reply.content:
                obs = reply.content.config_records[OBSERVED]
                del reply.content[OBSERVED]  # the app sees its own reply only
            sent = self.msgs.pop(reply.metadata.reply_to_message_id, None)
            if sent is None:
                continue
            sent.reply_t = now
            node = self.reply_node(sent.node_id, reply, obs)
            if reply.has_error():
                sent.error = f"{_clean_error(reply.error.reason)} (Flower error {reply.error.code})"
            else:
                sent.error, sent.late = None, sent.closed
                for name, value, at in self.reply_metrics(reply, sent.round):
                    self.tel.metric(name, value, at, node)
                self._reply_transport(sent, reply, obs, node, now)
            if sent.recorded:
                self._after_record(sent, node, now)

    def _reply_transport(
        self, sent: Sent, reply: Message, obs: ConfigRecord | None, node: str, now: float
    ) -> None:
        """A reply's bytes, the node's times (``obs``) and its round trip."""
        tel, r = self.tel, sent.round
        tel.metric("bytes_received", payload_bytes(reply.content), r, node)
        if obs is not None:
            tel.metric("compute_s", float(obs["compute-s"]), r, node)  # type: ignore[arg-type]
            tel.metric("cpu_s", float(obs["cpu-s"]), r, node)  # type: ignore[arg-type]
            tel.metric("device_time_s", float(obs["device-s"]), r, node)  # type: ignore[arg-type]
        tel.metric("round_trip_s", now - sent.t, r, node)

    def _after_record(self, sent: Sent, node: str, now: float) -> None:
        """A reply to a message whose outcome is recorded: a late answer turns the
        node's status into ``late``; an answer to a message pushed after its round
        closed (or to a restarted node's old id), or an error that comes now, is an
        event (the status stands)."""
        after_s = round(emulated(now - sent.t), 3)  # (emulated s, as every figure)
        stale = sent.node_id in self.rounds[sent.round].stale
        if sent.ok and not sent.after_close and not stale:
            self.tel.status(sent.round, node, "late", self._late_reason(sent))
        else:
            self.tel.event("late_reply", round=sent.round, node=node, type=sent.mtype,
                           after_s=after_s, error=sent.error)  # fmt: skip

    def _late_reason(self, sent: Sent) -> str:
        dt = emulated((sent.reply_t or sent.t) - sent.t)
        return f"{sent.mtype} reply {dt:.1f} s after send, pulled in round {self.current}"

    def _call_returned(self, call: int, timeout: float | None) -> None:
        """Messages of a ``send_and_receive`` call that returned: when, and which
        returned without their reply."""
        now, factor = time.time(), tdf()
        shown = f"{timeout} s"
        if timeout is not None and factor != 1.0:  # (on the dilated clock: both)
            shown = f"{emulated(timeout, factor):.3g} s emulated, {timeout:.3g} s wall"
        for sent in self._open.pop(call, []):
            sent.returned_t = now
            if sent.reply_t is None:
                sent.closed = True
                sent.error = f"no reply within the app's timeout ({shown})"

    # -- rounds --------------------------------------------------------------------------
    def close_round(self, r: int) -> None:
        """Round ``r``'s exchange is over for the app: record per node its status, then
        ``round_duration_s`` and ``round_end`` (once). A message still unanswered is
        closed: a reply to it pulled later is ``late``. Its bytes follow when the round
        is settled (:meth:`settle_round`)."""
        book = self.rounds.get(r)
        if book is None or book.ended:
            return
        book.ended, book.got = True, set()
        sents = [s for ss in book.sent.values() for s in ss]
        for s in sents:
            s.recorded = True
            if s.reply_t is None and not s.closed:
                s.closed, s.error = True, s.error or "no reply before its round ended"
        for nid, ss in book.sent.items():
            if any(s.ok for s in ss):
                book.answered.setdefault(self.name(nid), set()).add(nid)
        for nid, ss in book.sent.items():
            self._status(r, nid, ss, book)
        if sents:
            self._round_end(r, sents)

    def settle_round(self, r: int) -> None:
        """Round ``r`` is done with: closed (:meth:`close_round`) if it was not, then per
        node ``bytes_sent`` (every node sent a message, failed ones too) and
        ``bytes_lost`` (messages that failed) of its messages not counted yet; a message
        pushed after the round closed that failed is a ``message_failed`` event (the
        round's statuses stand)."""
        self.close_round(r)
        self._unsettled.discard(r)
        book = self.rounds.get(r)
        if book is None or not book.sent:
            return
        fresh, book.sent = book.sent, {}
        for nid, ss in fresh.items():
            for s in ss:
                if s.reply_t is None and not s.closed:
                    s.closed, s.error = True, s.error or "no reply before its round ended"
                s.recorded = True
            if any(s.ok for s in ss):
                book.answered.setdefault(self.name(nid), set()).add(nid)
        for nid, ss in fresh.items():
            self._bytes(r, nid, ss, book)

    def _stale(self, nid: int, sents: list[Sent], book: RoundBook) -> bool:
        """``nid`` is the id a restarted node had before: none of its messages of the
        round completed, while the node completed one under another id."""
        ids = book.answered.get(self.name(nid), set())
        return nid in book.stale or (bool(ids) and nid not in ids and not any(s.ok for s in sents))

    def _status(self, r: int, nid: int, sents: list[Sent], book: RoundBook) -> None:
        """Node id ``nid``'s status in round ``r`` (or a ``stale_node_id`` event)."""
        node = self.name(nid)
        failed = [s for s in sents if s.error]
        why = "; ".join(f"{s.mtype}: {s.error}" for s in failed)[:REASON_CHARS]
        if failed and self._stale(nid, sents, book):  # its failure is not the node's status
            book.stale.add(nid)
            self.tel.event("stale_node_id", round=r, node=node, node_id=str(nid), reason=why)
        elif late := [s for s in sents if s.late]:
            self.tel.status(r, node, "late", self._late_reason(late[0]))
        elif failed:
            self.tel.status(r, node, "failed", why)
        else:
            self.tel.status(r, node, "completed")

    def _bytes(self, r: int, nid: int, sents: list[Sent], book: RoundBook) -> None:
        """Node id ``nid``'s bytes in round ``r``, and its failures after the round closed."""
        node = self.name(nid)
        failed = [s for s in sents if s.error]
        if self._stale(nid, sents, book):  # (not the node: no bytes of its)
            for s in failed:
                if s.after_close:
                    self.tel.event("stale_node_id", round=r, node=node, node_id=str(nid),
                                   reason=f"{s.mtype}: {s.error}"[:REASON_CHARS])  # fmt: skip
            return
        self.tel.metric("bytes_sent", sum(s.nbytes for s in sents), r, node)
        if failed:
            self.tel.metric("bytes_lost", sum(s.nbytes for s in failed), r, node)
        for s in failed:
            if s.after_close:
                self.tel.event("message_failed", round=r, node=node, node_id=str(nid),
                               type=s.mtype, reason=(s.error or "")[:REASON_CHARS])  # fmt: skip

    def _round_end(self, r: int, sents: list[Sent]) -> None:
        """``round_duration_s`` and ``round_end``: from the first push to the last reply
        in time or the return of the round's last ``send_and_receive`` call."""
        start = min(s.t for s in sents)
        end = max(
            max(s.t, s.returned_t or s.t, s.reply_t if s.reply_t and not s.late else s.t)
            for s in sents
        )
        replies = sum(s.reply_t is not None and not s.late for s in sents)
        self.tel.metric("round_duration_s", end - start, r)
        self.tel.event("round_end", round=r, replies=replies, duration_s=end - start)

    def finish(self) -> None:
        """Settle every round not settled yet (the app's ``main`` returned or raised)."""
        for sent in self.msgs.values():
            if sent.reply_t is None and not sent.closed:
                sent.error = "no reply before the ServerApp ended"
        for r in sorted(self._unsettled):
            self.settle_round(r)
