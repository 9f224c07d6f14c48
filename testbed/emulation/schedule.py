"""The one schedule driver of every link kind: plays a LinkSchedule on a Link.

A :class:`ScheduleDriver` follows a :class:`~testbed.emulation.link.LinkSchedule` from an
origin ``t0`` (a ``time.monotonic()`` value) in its own thread and calls the link's
``set_params`` for each change:

- piecewise schedules: at start, the segment in force is applied if it differs from the
  link's parameters; then each later segment at its boundary ``t0 + start_s * TDF``
  (schedule times are emulated; :mod:`kernel.dilation`, TDF 1 without dilation);
- function schedules: sampled every ``poll_s`` on the grid ``t0 + k * poll_s`` and applied
  when the value differs from the link's parameters. A driver that falls behind (a slow
  ``set_params``) skips to the next grid point in the future instead of replaying the
  past.

Each applied change is logged in the link's :class:`~testbed.emulation.state.LinkState`
as ``{"t_s", "lag_ms", "params"}``: ``lag_ms`` is the time from when it was due to when
``set_params`` returned (so it includes the link's own apply time: a loop hop for the
proxy, ``tc`` and ``iptables-restore`` for netem).
"""

from __future__ import annotations

import logging
import math
import threading
import time

from kernel.dilation import tdf
from testbed.emulation.link import Link, LinkParams, LinkSchedule
from testbed.emulation.state import LinkState

log = logging.getLogger(__name__)


class ScheduleDriver:
    """Plays schedules on one link; one schedule at a time (a new one replaces it).

    Parameters
    ----------
    link
        The link whose ``set_params`` applies each change and whose ``params`` is the
        state compared against.
    state
        Where applied changes are logged (``state.record_change``).
    """

    def __init__(self, link: Link, state: LinkState) -> None:
        self.link = link
        self.state = state
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """``True`` while a schedule is being played."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, schedule: LinkSchedule, t0: float) -> None:
        """Play ``schedule`` from origin ``t0`` (``time.monotonic()``), replacing the
        schedule being played, if any."""
        if not isinstance(schedule, LinkSchedule):
            raise ValueError(f"schedule: expected LinkSchedule, got {type(schedule).__name__}")
        self.stop()
        self._stop = threading.Event()
        self.error = None
        self._thread = threading.Thread(
            target=self._run,
            args=(schedule, float(t0), self._stop),
            name=f"schedule-{self.link.name}",
            daemon=True,
        )
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop playing (a change being applied completes first)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout_s)
        self._thread = None

    # -- the driver thread -----------------------------------------------------------
    def _run(self, schedule: LinkSchedule, t0: float, stop: threading.Event) -> None:
        try:
            if schedule.is_piecewise:
                self._play_segments(schedule, t0, stop)
            else:
                self._poll(schedule, t0, stop)
        except Exception as exc:  # noqa: BLE001 - kept for the owner, and logged
            self.error = exc
            log.exception("link %s: schedule stopped", self.link.name)

    def _play_segments(self, schedule: LinkSchedule, t0: float, stop: threading.Event) -> None:
        factor = tdf()  # schedules are in emulated time: a segment starts TDF x later
        now = time.monotonic()
        current = schedule.at((now - t0) / factor)
        if current != self.link.params:
            self._apply(current, now)
        for start_s, params in schedule.segments:
            due = t0 + start_s * factor
            if due <= now:
                continue
            if stop.wait(max(0.0, due - time.monotonic())):
                return
            self._apply(params, due)

    def _poll(self, schedule: LinkSchedule, t0: float, stop: threading.Event) -> None:
        poll_s = schedule.poll_s  # wall seconds between samples (emulated: / TDF)
        factor = tdf()
        k = max(0, math.ceil((time.monotonic() - t0) / poll_s))
        while not stop.wait(max(0.0, t0 + k * poll_s - time.monotonic())):
            due = t0 + k * poll_s
            params = schedule.at((due - t0) / factor)
            if params != self.link.params:
                self._apply(params, due)
            k = max(k + 1, math.ceil((time.monotonic() - t0) / poll_s))

    def _apply(self, params: LinkParams, due: float) -> None:
        self.link.set_params(params)
        self.state.record_change(params, due, time.monotonic())
