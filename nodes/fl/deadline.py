"""Round deadline: a round's reply pulls end at ``round_timeout_s``, whatever the faults.

Flower's grid (``flwr.superlink.grid.http_grid.HttpGrid.send_and_receive``) polls the
SuperLink for replies until its timeout, but each poll (``pull_messages``) then pulls
every reply's objects with ``pull_objects``, bounded only by Flower's ``max_time``
(``PULL_MAX_TIME``, 7200 s). The SuperLink hands out a reply as soon as its sender
pushed the message, before the message's objects (a SuperNode pushes the message, then
its objects one by one), and hands it out once. A node killed in between (a crash, an
outage or a flapping node, whose kill takes 1-2 s on the local backend) leaves a reply
whose objects never come: the pull then waits until the SuperLink's object-push session
expires (``OBJECT_PUSH_SESSION_TTL_SECONDS``, 180 s), and so does the round. That was
``bench/soak.py --seed 11``'s round 14 (191 s with ``round_timeout_s`` 10: an outage's
node killed while it uploaded its reply). A slow uplink holds a round the same way, for
as long as its upload takes.

:func:`bound_pulls_by_deadline` keeps Flower's protocol and bounds the waits:

* inside ``send_and_receive`` the object pulls may wait until the round's deadline (the
  call's start plus its ``timeout``); an object still missing then ends the pull with
  :class:`RoundDeadlineReached`, which Flower's own ``pull_messages`` turns into an error
  reply (``MESSAGE_UNAVAILABLE``) for that message, so the round goes on and the node's
  status says why (:data:`REASON`). Objects already stored are still pulled after the
  deadline (a missing object is tried once before the bound applies);
* outside it (:class:`nodes.fl.late.LateReplies` pulling the replies that missed an
  earlier round, during the next round's aggregation) a pull does not wait at all: it
  takes the reply if its objects are stored, else the reply is cut as above (the
  SuperLink has handed it out; its node keeps the status of the round it missed).

It works through what Flower calls: the grid instance's ``send_and_receive`` and
``pull_messages`` (``send_and_receive`` calls ``self.pull_messages``, so instance
attributes are enough, as in :func:`nodes.fl.packing.pack_grid`), and the
``pull_objects`` name that ``HttpGrid.pull_messages`` calls in its module
(:data:`PULL_MODULE`), which outside a bounded grid's calls behaves as Flower's own.
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from flwr.app import Error, Message
from flwr.supercore.inflatable.inflatable_utils import ObjectPullError

if TYPE_CHECKING:
    from flwr.serverapp import Grid

#: The module whose ``pull_objects`` name ``HttpGrid.pull_messages`` calls.
PULL_MODULE = "flwr.superlink.grid.http_grid"
#: Reason of a reply cut at the deadline (what the node's status records).
REASON = "reply still arriving at the round deadline: its objects were not all stored"

# monotonic time by which the object pulls of the current call must end; None: no bound
_DEADLINE: ContextVar[float | None] = ContextVar("testbed_round_deadline", default=None)


class RoundDeadlineReached(ObjectPullError):
    """An object pull that the round's deadline ended (Flower makes it an error reply)."""

    def __init__(self) -> None:
        Exception.__init__(self, REASON)


def _bounded(pull_objects: Callable[..., dict[str, bytes]]) -> Callable[..., dict[str, bytes]]:
    """``pull_objects`` whose ``max_time`` ends at the current deadline, if any."""

    @functools.wraps(pull_objects)
    def bounded_pull_objects(*args: Any, **kwargs: Any) -> dict[str, bytes]:
        deadline = _DEADLINE.get()
        if deadline is None:
            return pull_objects(*args, **kwargs)
        flower_max = kwargs.get("max_time", (pull_objects.__kwdefaults__ or {}).get("max_time"))
        left = max(0.0, deadline - time.monotonic())
        kwargs["max_time"] = left if flower_max is None else min(float(flower_max), left)
        try:
            return pull_objects(*args, **kwargs)
        except ObjectPullError as exc:
            if time.monotonic() >= deadline and not isinstance(exc, RoundDeadlineReached):
                raise RoundDeadlineReached() from exc
            raise

    bounded_pull_objects._testbed_bounded = True  # type: ignore[attr-defined]
    return bounded_pull_objects


def _install_bounded_pull() -> None:
    """Make :data:`PULL_MODULE`'s ``pull_objects`` honour the deadline (once)."""
    module = importlib.import_module(PULL_MODULE)
    fn = getattr(module, "pull_objects", None)
    if fn is None or not callable(fn):
        raise RuntimeError(
            f"round deadline: {PULL_MODULE}.pull_objects not found (this Flower release "
            "pulls reply objects differently; update nodes/fl/deadline.py)"
        )
    if not getattr(fn, "_testbed_bounded", False):
        module.pull_objects = _bounded(fn)  # type: ignore[attr-defined]


def bound_pulls_by_deadline(grid: Grid) -> None:
    """Make ``grid``'s reply pulls end at each round's deadline (see the module doc)."""
    _install_bounded_pull()
    send_and_receive, pull = grid.send_and_receive, grid.pull_messages
    in_round: list[float | None] = []  # [deadline] while a send_and_receive is under way

    def bounded_send_and_receive(
        messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        in_round[:] = [None if timeout is None else time.monotonic() + timeout]
        try:
            return send_and_receive(messages, timeout=timeout)
        finally:
            in_round.clear()

    def pull_messages(message_ids: Iterable[str]) -> Iterable[Message]:
        token = _DEADLINE.set(in_round[0] if in_round else time.monotonic())
        try:
            replies = list(pull(message_ids))
        finally:
            _DEADLINE.reset(token)
        for msg in replies:
            if msg.has_error() and REASON in (msg.error.reason or ""):
                msg.error = Error(code=msg.error.code, reason=REASON)
        return replies

    grid.send_and_receive = bounded_send_and_receive  # type: ignore[method-assign]
    grid.pull_messages = pull_messages  # type: ignore[method-assign]
