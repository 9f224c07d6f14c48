"""Observe any Flower App from outside its code: the Grid and the ClientApp's messages.

The testbed records what happens to a user's app without touching its strategy:

* :func:`observed_client_app` wraps the app's ClientApp: every message is handled by
  the user's ClientApp unchanged; around it, its wall and CPU time are measured, the
  node's device profile stretches it by the CPU time (:func:`nodes.device_control.stretch`,
  as for the testbed's own app), and the reply carries one extra record,
  :data:`OBSERVED` (node name, times), that the Grid takes out again before the app sees
  the reply.
* :func:`observed_server_app` wraps the app's ServerApp: the Grid it is handed records
  every message pushed (destination, type, group id, time, size) and every reply
  pulled (time, size, Flower's error, the MetricRecords), through
  :class:`GridObserver`; the group id is the app's round (Flower's strategies use the
  server round). Per (round, node) it records a status (``completed``, ``failed`` with
  Flower's error, ``late``: a reply pulled after the call that sent it returned),
  bytes, durations, and every MetricRecord key as a metric series.

The testbed's run config keys (``testbed-*``, :data:`nodes.fl.userapp.TESTBED_PREFIX`)
are removed from the context the user's code sees; its ClientApp's node config gains the
spec's ``workload.fl.node_config`` (run config key ``testbed-node-config``).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from nodes.device_control import read_control, stretch
from nodes.fl.identity import NodeNames, names_record, node_names
from nodes.fl.telemetry import Telemetry
from nodes.fl.userapp import TESTBED_PREFIX, node_config_of

#: The record a ClientApp reply carries to the observing Grid (taken out there).
OBSERVED = "testbed.observed"
#: Called with each GridObserver once it is attached, before the user's ServerApp runs
#: (the simulation backend arms its virtual clock there).
ON_ATTACH: list[Callable[[GridObserver], None]] = []
#: Seconds the ServerApp waits at a held round boundary for the control plane's faults.
HOLD_TIMEOUT_S = 30.0
HOLD_POLL_S = 0.02


class UserAppError(RuntimeError):
    """The user's app failed; the message names the app, the component and the node."""


def _load(ref: str, kind: type, app_name: str, component: str) -> Any:
    """The object ``module:attribute`` (the app's folder is on ``sys.path``: Flower's
    loader puts it there); UserAppError naming the app when it does not import."""
    module, _, attr = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as e:
        raise UserAppError(
            f"app {app_name!r}: {component} {ref!r} does not import: {type(e).__name__}: {e}"
        ) from e
    if not isinstance(obj, kind):
        raise UserAppError(f"app {app_name!r}: {component} {ref!r} is not a {kind.__name__}")
    return obj


def user_context(context: Context, node: str | None = None) -> Context:
    """``context`` without the testbed's run config keys (the same state record); on a
    client node (``node``: its name), with the spec's ``node_config`` in its node config
    (:func:`nodes.fl.userapp.node_config_of`)."""
    rc = {k: v for k, v in context.run_config.items() if not k.startswith(TESTBED_PREFIX)}
    if node is None:
        return dataclasses.replace(context, run_config=rc)
    extra = json.loads(str(context.run_config.get(f"{TESTBED_PREFIX}node-config", "{}")))
    node_config = {**context.node_config, **node_config_of(extra, node)}
    return dataclasses.replace(context, run_config=rc, node_config=node_config)


def payload_bytes(content: RecordDict) -> int:
    """Bytes of a message's arrays (their serialized buffers), the bulk of what travels."""
    return sum(len(a.data) for rec in content.array_records.values() for a in rec.values())


def message_round(message: Message) -> int | None:
    """The ``server-round`` a message's ConfigRecord declares (Flower's strategies
    put it in every train and evaluate message), or None."""
    if not message.has_content():
        return None
    for rec in message.content.config_records.values():
        value = rec.get("server-round")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


#: The ClientApp's own error text inside an engine's report (Ray's wraps it in a
#: traceback): ``app 'NAME': ClientApp on node N raised in ...``.
_USER_ERROR = re.compile(r"app '[^']*': ClientApp on node \S+ raised [^\n]*")


def _clean_error(reason: str | None) -> str:
    """Flower's error reason, reduced to the ClientApp's own message when it has one."""
    found = _USER_ERROR.search(reason or "")
    return found.group(0) if found else (reason or "")


# -- the ClientApp ---------------------------------------------------------------------
def observed_client_app(ref: str, app_name: str) -> ClientApp:
    """A ClientApp running the app's ClientApp ``ref`` and reporting its node and times."""
    inner: ClientApp = _load(ref, ClientApp, app_name, "clientapp")
    app = ClientApp()

    def call(message: Message, context: Context) -> Message:
        node = str(context.node_config.get("node-name", context.node_id))
        control_path = context.node_config.get("control-path")
        group = message.metadata.group_id
        rnd = int(group) if group.isdigit() else (message_round(message) or 0)
        control = read_control(str(control_path) if control_path else None).active(rnd)
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            reply = inner(message, user_context(context, node))
        except Exception as e:
            raise UserAppError(
                f"app {app_name!r}: ClientApp on node {node} raised in "
                f"{message.metadata.message_type} (round {rnd}): {type(e).__name__}: {e}"
            ) from e
        wall_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
        speed = float(str(context.node_config.get("speed-factor", 1.0)))
        stretch(wall_s, speed, control.slowdown, cpu_s=cpu_s)
        if reply.has_content():
            reply.content[OBSERVED] = ConfigRecord(
                {
                    "node": node,
                    "compute-s": wall_s,
                    "cpu-s": cpu_s,
                    "device-s": time.perf_counter() - t0,
                }
            )
        return reply

    app._call = call  # every message through ``call`` (Flower's own dispatch inside)
    return app


# -- the ServerApp ---------------------------------------------------------------------
@dataclass
class Sent:
    """One message the app pushed, and what became of it."""

    node_id: int
    mtype: str
    round: int
    t: float
    nbytes: int
    call: int  # the send_and_receive call that pushed it (0: pushed directly)
    reply_t: float | None = None
    error: str | None = None
    closed: bool = False  # its call returned without it (no reply in the app's time)
    status: str = ""


@dataclass
class RoundBook:
    """What one round (group id) saw per node."""

    sent: dict[int, list[Sent]] = field(default_factory=dict)
    ended: bool = False


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
        self.msgs: dict[str, Sent] = {}
        self.rounds: dict[int, RoundBook] = {}
        self.current = 0
        self._groups: dict[str, int] = {}
        self._call = 0
        self.t0 = time.time()

    # -- instrumenting ---------------------------------------------------------------
    def attach(self, grid: Grid) -> Grid:
        """Instrument ``grid`` in place (instance attributes: Flower's own
        ``send_and_receive`` calls ``self.push_messages`` / ``self.pull_messages``)."""
        push, pull, sar = grid.push_messages, grid.pull_messages, grid.send_and_receive

        def push_messages(messages: Iterable[Message]) -> Iterable[str]:
            messages = list(messages)
            rounds = self._before_push(messages)
            ids = list(push(messages))
            self._pushed(messages, ids, rounds)
            return ids

        def pull_messages(message_ids: Iterable[str]) -> Iterable[Message]:
            replies = list(pull(message_ids))
            self._pulled(replies)
            return replies

        def send_and_receive(
            messages: Iterable[Message], *, timeout: float | None = None
        ) -> Iterable[Message]:
            self._call += 1
            call = self._call
            if self.timeout_cap_s is not None:
                timeout = min(timeout, self.timeout_cap_s) if timeout else self.timeout_cap_s
            try:
                return sar(messages, timeout=timeout)
            finally:
                self._call_returned(call, timeout)

        grid.push_messages = push_messages  # type: ignore[method-assign]
        grid.pull_messages = pull_messages  # type: ignore[method-assign]
        grid.send_and_receive = send_and_receive  # type: ignore[method-assign]
        return grid

    # -- what happens ------------------------------------------------------------------
    def round_of(self, message: Message) -> int:
        """The app's round of a message being pushed: its group id when it has one (a
        number as it is, else the order in which the group first appeared), else the
        ``server-round`` of its ConfigRecord (what Flower's strategies send), else the
        current round, or the next one when its node already got a message of its type
        in the current round."""
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
        earlier = book.sent.get(md.dst_node_id, []) if book is not None else []
        if book is None or any(s.mtype == md.message_type for s in earlier):
            return self.current + 1
        return self.current

    def name(self, node_id: int) -> str:
        """The node's name once a reply told it, else ``node-<id>`` (the control plane
        renames those rows from the SuperNodes' registrations)."""
        return self.names.get(node_id, f"node-{node_id}")

    def _before_push(self, messages: list[Message]) -> list[int]:
        """The messages' rounds; a new round's first message closes the previous round,
        starts this one, and holds it while the control plane applies faults planned
        before it."""
        rounds = []
        for m in messages:
            r = self.round_of(m)
            rounds.append(r)
            if r in self.rounds:
                continue
            self.close_round(self.current)
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

    def _pushed(self, messages: list[Message], ids: list[str], rounds: list[int]) -> None:
        now = time.time()
        for m, mid, r in zip(messages, ids, rounds, strict=False):
            md = m.metadata
            sent = Sent(md.dst_node_id, md.message_type, r, now, payload_bytes(m.content),
                        self._call)  # fmt: skip
            self.msgs[mid] = sent
            self.rounds.setdefault(r, RoundBook()).sent.setdefault(md.dst_node_id, []).append(sent)

    def _pulled(self, replies: list[Message]) -> None:
        now = time.time()
        for reply in replies:
            sent = self.msgs.get(reply.metadata.reply_to_message_id)
            obs = None
            if reply.has_content() and OBSERVED in reply.content:
                obs = reply.content.config_records[OBSERVED]
                del reply.content[OBSERVED]  # the app sees its own reply only
            if sent is None:
                continue
            if obs is not None:
                self.identify(sent.node_id, str(obs["node"]))
            sent.reply_t = now
            node = self.name(sent.node_id)
            tel, r = self.tel, sent.round
            if reply.has_error():
                sent.error = f"{_clean_error(reply.error.reason)} (Flower error {reply.error.code})"
            else:
                tel.metric("bytes_received", payload_bytes(reply.content), r, node)
                for rec_name, rec in reply.content.metric_records.items():
                    self._metrics(rec_name, rec, r, node)
                if obs is not None:
                    tel.metric("compute_s", float(obs["compute-s"]), r, node)  # type: ignore[arg-type]
                    tel.metric("cpu_s", float(obs["cpu-s"]), r, node)  # type: ignore[arg-type]
                    tel.metric("device_time_s", float(obs["device-s"]), r, node)  # type: ignore[arg-type]
            tel.metric("round_trip_s", now - sent.t, r, node)
            if sent.closed:  # its call had returned: the app never used it
                sent.status = "late"
                tel.status(r, node, "late", f"{sent.mtype} reply {now - sent.t:.1f} s after send")

    def _metrics(self, rec_name: str, rec: Any, r: int, node: str) -> None:
        """Every key of a reply's MetricRecord as a metric series (a list: one per item)."""
        for key, value in rec.items():
            if isinstance(value, list):
                for i, v in enumerate(value):
                    self.tel.metric(f"{key}[{i}]", float(v), r, node)
            else:
                self.tel.metric(str(key), float(value), r, node)

    def identify(self, node_id: int, name: str) -> None:
        """Node ``node_id`` is ``name`` (event ``node_identified``, once)."""
        if node_id not in self.names:
            self.names[node_id] = name
            self.tel.event("node_identified", node=name, node_id=str(node_id))

    def _call_returned(self, call: int, timeout: float | None) -> None:
        """Messages of a ``send_and_receive`` that returned without their reply."""
        for sent in self.msgs.values():
            if sent.call == call and sent.reply_t is None:
                sent.closed = True
                sent.error = f"no reply within the app's timeout ({timeout} s)"

    def close_round(self, r: int) -> None:
        """Record round ``r``'s statuses and bytes per node, then ``round_end``."""
        book = self.rounds.get(r)
        if book is None or book.ended:
            return
        book.ended = True
        replies = 0
        for nid, sents in book.sent.items():
            node = self.name(nid)
            self.tel.metric("bytes_sent", sum(s.nbytes for s in sents), r, node)
            failed = [s for s in sents if s.reply_t is None or s.error]
            replies += sum(s.reply_t is not None for s in sents)
            if any(s.status == "late" for s in sents):
                continue  # (recorded when it came)
            if failed:
                why = "; ".join(f"{s.mtype}: {s.error or 'no reply'}" for s in failed)
                self.tel.status(r, node, "failed", why[:500])
                self.tel.metric("bytes_lost", sum(s.nbytes for s in failed), r, node)
            else:
                self.tel.status(r, node, "completed")
        duration = max((s.reply_t or s.t for ss in book.sent.values() for s in ss), default=0.0)
        start = min((s.t for ss in book.sent.values() for s in ss), default=0.0)
        self.tel.metric("round_duration_s", duration - start, r)
        self.tel.event("round_end", round=r, replies=replies, duration_s=duration - start)

    def finish(self) -> None:
        """Close the last round (the app's ``main`` returned or raised)."""
        for sent in self.msgs.values():
            if sent.reply_t is None and not sent.closed:
                sent.error = "no reply before the ServerApp ended"
        self.close_round(self.current)


def observed_server_app(ref: str, app_name: str) -> ServerApp:
    """A ServerApp running the app's ServerApp ``ref`` on an observed Grid."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        rc = context.run_config
        tel = Telemetry(str(rc.get(f"{TESTBED_PREFIX}telemetry-path", "")) or None)
        names = node_names(str(rc.get(f"{TESTBED_PREFIX}node-names", "[]")))
        if rc.get(f"{TESTBED_PREFIX}protocol-timing") == "fast":
            from nodes.fl.timing import SERVERAPP, fleet_scale, install

            install(SERVERAPP, fleet_scale(len(names)))
        cap = float(str(rc.get(f"{TESTBED_PREFIX}round-timeout-s", 0))) or None
        observer = GridObserver(
            tel,
            names,
            json.loads(str(rc.get(f"{TESTBED_PREFIX}hold-rounds", "[]"))),
            str(rc.get(f"{TESTBED_PREFIX}hold-path", "")),
            cap,
        )
        inner: ServerApp = _load(ref, ServerApp, app_name, "serverapp")
        _wait_fleet(grid, len(names), cap or 60.0, tel)
        tel.event("run_start", app=app_name, **names_record(names))
        observer.attach(grid)
        for hook in list(ON_ATTACH):
            hook(observer)
        try:
            inner(grid, user_context(context))
        except Exception as e:
            observer.finish()
            tel.event("app_error", app=app_name, error=f"{type(e).__name__}: {e}"[:500])
            raise UserAppError(
                f"app {app_name!r}: ServerApp raised: {type(e).__name__}: {e}"
            ) from e
        observer.finish()
        tel.event("run_end", rounds=max(observer.rounds, default=0), app=app_name)

    return app


def _wait_fleet(grid: Grid, expected: int, timeout_s: float, tel: Telemetry) -> None:
    """Wait until every client node is connected (at most ``timeout_s``), as the
    testbed's own ServerApp does: the app then samples the whole fleet."""
    deadline = time.time() + timeout_s
    while len(list(grid.get_node_ids())) < expected and time.time() < deadline:
        time.sleep(0.2)
    tel.event("fleet_connected", connected=len(list(grid.get_node_ids())), expected=expected)


#: (what a test may call to check the module is wired) the two factories by component.
FACTORIES: dict[str, Callable[[str, str], Any]] = {
    "serverapp": observed_server_app,
    "clientapp": observed_client_app,
}
