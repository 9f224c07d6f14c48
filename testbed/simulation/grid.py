"""The ServerApp's grid on virtual time: sampling, deadlines and late replies.

:class:`ClockedGrid` is installed on the grid instance (as the ServerApp's own
``tolerate_superlink_restarts`` is); the ServerApp's code is unchanged:

* ``get_node_ids`` (once armed, i.e. after the ServerApp's wait for its fleet) leaves
  out the clients that are down at the current virtual time, so the strategy does not
  sample them (the store says ``excluded``, as for a node the SuperLink does not list);
* ``send_and_receive`` of a train (or query) round times every reply on the virtual clock
  (:class:`testbed.simulation.clock.VirtualClock`): a reply past the round deadline is
  withheld (the Grid's observer records ``failed``) and delivered by ``pull_messages``
  once virtual time has passed its arrival (``late``, ``workload.fl.stale_updates``); a
  reply of a client that went down during its exchange is withheld for good;
* records ``virtual_client_s`` per (round, node), ``virtual_round_s`` (slowest kept
  reply, or the deadline when one was withheld or missing) and ``virtual_time_s``
  (cumulative), and drives the virtual faults (:mod:`testbed.simulation.vfaults`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flwr.app import Message, MessageType
from flwr.serverapp import Grid

from nodes.fl.observed_client import OBSERVED
from nodes.fl.telemetry import Telemetry
from testbed.simulation.clock import VirtualClock
from testbed.simulation.protocol import server_queue_end


def _payload(msg: Message) -> int:
    """Array payload bytes of a message (0 without arrays)."""
    from nodes.fl.task import array_nbytes  # torch: only in the simulation process

    return sum(array_nbytes(a) for a in msg.content.array_records.values())


def _scalar(msg: Message, key: str, default: float) -> float:
    """A scalar metric of a reply (``default`` if absent)."""
    recs = msg.content.metric_records
    if "metrics" not in recs or key not in recs["metrics"]:
        return default
    value = recs["metrics"][key]
    return float(value) if isinstance(value, int | float) else default


#: Message types whose exchange is a round on the virtual clock: a strategy's (or a
#: legacy workflow's) training, and an analytics app's query. Evaluation is not timed.
TIMED = frozenset({MessageType.TRAIN, MessageType.QUERY})


def _round_of(messages: list[Message]) -> int | None:
    """The round of a batch of messages: the ``server-round`` of their ConfigRecord
    (Flower's Message API strategies), else a numeric group id (Flower's legacy
    workflows: the server round), else None."""
    for m in messages:
        cfg = m.content.config_records
        if "config" in cfg and "server-round" in cfg["config"]:
            return int(str(cfg["config"]["server-round"]))
    for m in messages:
        if m.metadata.group_id.isdigit():
            return int(m.metadata.group_id)
    return None


@dataclass
class _Flight:
    """A train round's messages being sent: what is still undecided, and the kept
    replies' virtual arrivals."""

    round: int
    down: dict[int, int]  # destination node id -> payload bytes sent
    pending: set[str]  # message ids whose reply is not decided yet
    arrivals: list[float] = field(default_factory=list)
    late: bool = False  # a reply withheld (late or lost)


class ClockedGrid:
    """Decide a Grid's rounds on virtual time, and record it.

    Parameters
    ----------
    grid : Grid
        The ServerApp's grid (its methods are replaced on the instance).
    clock : VirtualClock
        The model.
    names : sequence of str
        Client names by partition id (:class:`nodes.fl.identity.NodeNames` for a
        fleet planned by groups).
    tel : Telemetry
        The run's telemetry.
    wall_cap_s : float
        Wall seconds a round waits for its replies at most.
    partitions : mapping of int to int
        Flower node id -> partition id (from the Simulation Engine's registration).
    """

    def __init__(
        self,
        grid: Grid,
        clock: VirtualClock,
        names: Sequence[str],
        tel: Telemetry,
        wall_cap_s: float,
        partitions: Mapping[int, int],
    ) -> None:
        self.clock, self.names, self.tel, self.wall_cap_s = clock, names, tel, wall_cap_s
        self.partitions = partitions
        self.elapsed_s = 0.0
        self.armed = False
        self.started = 0  # last round begun on the clock
        self.ended = 0  # last round ended on the clock
        self.withheld: dict[str, tuple[float, Message]] = {}  # reply-to id -> (arrival, reply)
        self.grid = grid
        self.pull_interval_s = float(getattr(grid, "pull_interval", 0.1))
        self._flight: _Flight | None = None  # the train round being sent
        self._send: Callable[..., Iterable[Message]] = grid.send_and_receive
        self._ids: Callable[[], Iterable[int]] = grid.get_node_ids
        self._pull: Callable[[Iterable[str]], Iterable[Message]] = grid.pull_messages
        grid.send_and_receive = self.send_and_receive  # type: ignore[method-assign]
        grid.get_node_ids = self.get_node_ids  # type: ignore[method-assign]
        grid.pull_messages = self.pull_messages  # type: ignore[method-assign]

    def name_of(self, node_id: int) -> str:
        """The client name of a Flower node id (``node-<id>`` if unknown)."""
        pid = self.partitions.get(node_id, -1)
        return self.names[pid] if 0 <= pid < len(self.names) else f"node-{node_id}"

    def arm(self) -> None:
        """From now on, sampling sees only the clients up at the current virtual time."""
        self.armed = True

    def get_node_ids(self) -> Iterable[int]:
        """Flower's call: the registered nodes, less those down now (once armed)."""
        ids = list(self._ids())
        if not self.armed:
            return ids
        self._begin(self.ended + 1)  # (sampling for the next round happens now)
        if self.clock.faults is None and self.clock.availability is None:
            return ids  # (nothing takes a client down: no look at each of them)
        t = self.elapsed_s
        return [i for i in ids if self.clock.down_reason(self.name_of(i), t, t) is None]

    @contextlib.contextmanager
    def sampling_waits(self) -> Iterator[None]:
        """While inside: Flower's ``sample_nodes`` waits for nodes on virtual time
        (:meth:`sampling_sleep` is its module's ``sleep``)."""
        from flwr.serverapp.strategy import strategy_utils

        module: Any = strategy_utils  # (its ``sleep`` is ``from time import sleep``)
        sleep = module.sleep
        module.sleep = self.sampling_sleep
        try:
            yield
        finally:
            module.sleep = sleep

    def sampling_sleep(self, seconds: float) -> None:
        """Flower's ``sample_nodes`` sleeping between its polls while too few nodes are
        up (installed as its module's ``sleep``).

        On a real fleet the ServerApp keeps polling until enough clients come back;
        here virtual time moves on to the next poll at which a down client is up again
        (event ``fleet_waited``). When none will ever come back the run ends with that
        cause (event ``fleet_gone``) instead of waiting forever."""
        if not self.armed:
            time.sleep(seconds)
            return
        t, rnd = self.elapsed_s, self.ended + 1
        names = [self.name_of(i) for i in self._ids()]
        down = {n: r for n in names if (r := self.clock.down_reason(n, t, t)) is not None}
        back = [u for n in down if (u := self.clock.up_at(n, t)) is not None and u > t]
        if not back:
            why = ", ".join(f"{n} ({r})" for n, r in sorted(down.items())) or "none registered"
            self.tel.event("fleet_gone", round=rnd, virtual_t_s=t, down=sorted(down))
            raise RuntimeError(
                f"after round {self.ended}: too few clients up to sample and none will "
                f"come back on the virtual clock; down: {why}"
            )
        self.elapsed_s += max(1, math.ceil((min(back) - t) / seconds - 1e-9)) * seconds
        self.tel.event(
            "fleet_waited", round=rnd, waited_s=self.elapsed_s - t, virtual_t_s=self.elapsed_s
        )
        if self.clock.faults is not None:
            self.clock.faults.flush(self.elapsed_s, rnd - 1)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Flower's call: withheld replies whose virtual arrival has passed (late
        replies), and the grid's own for the other ids. A reply to the train round in
        flight is decided here, below whatever observes the grid (the app's pulls, a
        user app's observer): kept, or withheld (late or lost) and never seen above."""
        out, rest = [], []
        for mid in message_ids:
            arrival, reply = self.withheld.get(mid, (float("inf"), None))
            if reply is None:
                rest.append(mid)
            elif arrival <= self.elapsed_s:
                out.append(reply)
                del self.withheld[mid]
        for reply in list(self._pull(rest)) if rest else []:
            flight = self._flight
            mid = reply.metadata.reply_to_message_id
            if flight is None or mid not in flight.pending:
                out.append(reply)
                continue
            flight.pending.discard(mid)
            vt = self._time(reply, flight.down, flight.round)
            if vt is None or vt <= self.clock.deadline_s:
                flight.arrivals.append(vt or 0.0)
                out.append(reply)
            else:
                flight.late = True
        return out

    def _begin(self, rnd: int) -> None:
        if rnd > self.started:
            self.started = rnd
            if self.clock.faults is not None:
                self.clock.faults.round_started(rnd, self.elapsed_s, self.clock.deadline_s)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Flower's call, with the deadline decided on virtual time."""
        messages = list(messages)
        if not messages or messages[0].metadata.message_type not in TIMED:
            # evaluation (and a legacy app's get_parameters): not timed; a wall timeout
            # means nothing on the virtual clock (Ray's start would count): the cap
            wall = None if timeout is None else max(timeout, self.wall_cap_s)
            return self._send(messages, timeout=wall)
        rnd = _round_of(messages)
        if rnd is None:  # (no round of its own, e.g. an analytics query: the next one)
            rnd = self.ended + 1
        self._begin(rnd)
        sizes: dict[int, int] = {}
        down = {m.metadata.dst_node_id: _cached(sizes, m) for m in messages}
        # Flower's send_and_receive, except that it ends once every reply is decided
        ids = set(self.grid.push_messages(messages))
        flight = self._flight = _Flight(rnd, down, set(ids))
        end_t = time.time() + self.wall_cap_s
        kept: list[Message] = []
        try:
            while ids and time.time() < end_t:
                got = list(self.grid.pull_messages(ids))
                kept.extend(got)
                ids -= {m.metadata.reply_to_message_id for m in got}
                ids &= flight.pending  # (withheld ones are decided: no need to wait)
                if ids:
                    time.sleep(self.pull_interval_s)
        finally:
            self._flight = None
        arrivals, late = flight.arrivals, flight.late or bool(ids)
        # the ServerApp handles the kept replies one at a time, in arrival order
        end = server_queue_end(arrivals, self.clock.protocol.server_reply_s)
        if self.clock.polls is not None:  # ... having seen the last one at a poll
            end = self.clock.polls.round_end(end)
        slowest = self.clock.deadline_s if late else min(end, self.clock.deadline_s)
        self.elapsed_s += slowest
        self.ended = rnd
        self.tel.metric("virtual_round_s", slowest, rnd)
        self.tel.metric("virtual_time_s", self.elapsed_s, rnd)
        if self.clock.faults is not None:
            self.clock.faults.round_ended(rnd, self.elapsed_s)
        return kept

    def _time(self, reply: Message, down: Mapping[int, int], rnd: int) -> float | None:
        """Virtual seconds of one reply (None for an error reply: the engine's own); a
        reply past the deadline or of a client that went down is withheld."""
        if reply.has_error():
            return None
        src = reply.metadata.src_node_id
        pid = self.partitions.get(src, int(_scalar(reply, "partition-id", -1)))
        name = self.names[pid] if 0 <= pid < len(self.names) else f"node-{src}"
        start = self.elapsed_s
        # the training's CPU time (the work, whatever the host's load); older apps
        # that do not report it: its wall time
        compute = _scalar(reply, "train-cpu-s", _scalar(reply, "train-duration-s", 0.0))
        if reply.content.config_records.get(OBSERVED) is not None:  # a user's app
            compute = float(str(reply.content.config_records[OBSERVED]["cpu-s"]))
        ex = self.clock.exchange(name, pid, rnd, start, compute, down.get(src, 0), _payload(reply))
        self.tel.metric("virtual_client_s", min(ex.seconds, 1e12), rnd, name)
        if ex.lost is None and ex.seconds <= self.clock.deadline_s:
            if self.clock.faults is not None:
                self.clock.faults.completed(name, rnd, start + ex.seconds)
            return ex.seconds
        # the strategy never sees it: name its rows (node-<flower id>) after the node
        self.tel.event("node_identified", node=name, node_id=str(src))
        if ex.lost is None:  # late: delivered once virtual time passes its arrival
            self.withheld[reply.metadata.reply_to_message_id] = (start + ex.seconds, reply)
            return ex.seconds
        self.tel.event("exchange_lost", round=rnd, node=name, reason=ex.lost)
        return float("inf")  # never answers: the round waits for its deadline


def _cached(sizes: dict[int, int], msg: Message) -> int:
    """Payload bytes of ``msg``, computed once per shared content."""
    key = id(msg.content)
    if key not in sizes:
        sizes[key] = _payload(msg)
    return sizes[key]
