"""Bookkeeping every link kind keeps the same way: parameters, partitions, time, changes.

A link is *partitioned* while a manual partition is on (``partition(True, mode)``) or its
current :class:`~testbed.emulation.link.LinkParams` say ``partitioned`` (a schedule or
``set_params``); a manual partition wins, and a scheduled one is a ``"blackhole"``.
:class:`LinkState` accounts the time spent partitioned (``partitioned_s``) from the link's
start to its stop and keeps the log of schedule changes that
:class:`~testbed.emulation.schedule.ScheduleDriver` records. Times are
``time.monotonic()`` seconds.
"""

from __future__ import annotations

import threading
import time

from testbed.emulation.link import LinkParams

#: Manual partition modes: ``blackhole`` holds traffic, ``refuse`` resets and refuses.
PARTITION_MODES = ("blackhole", "refuse")


def check_partition_mode(mode: str) -> str:
    """Return ``mode`` if it is a partition mode, else raise ValueError naming it."""
    if mode not in PARTITION_MODES:
        raise ValueError(f"mode: must be one of {PARTITION_MODES}, got {mode!r}")
    return mode


def check_params(params: object) -> LinkParams:
    """Return ``params`` if it is a :class:`LinkParams`, else raise ValueError."""
    if not isinstance(params, LinkParams):
        raise ValueError(f"params: expected LinkParams, got {type(params).__name__}")
    return params


class LinkState:
    """Current parameters, manual partition, partitioned time and change log of a link.

    Thread-safe. Partitioned time is only accounted between :meth:`start` and
    :meth:`stop` (a link that never started was never partitioned).

    Parameters
    ----------
    params
        Initial link parameters.
    """

    def __init__(self, params: LinkParams) -> None:
        from kernel.dilation import tdf

        self.tdf = tdf()  # the run's time dilation when the link was made
        self._params = check_params(params)
        self._wall = self._params.on_wall_clock(self.tdf)  # (read per chunk: kept)
        self._manual: str | None = None
        self._lock = threading.Lock()
        self._running = False
        self._since: float | None = None  # start of the ongoing partition
        self._partitioned_s = 0.0
        self.t_start = 0.0
        self.t_stop: float | None = None
        self._changes: list[dict[str, object]] = []

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        """Mark the link started (origin of ``t_s`` and of partition accounting)."""
        with self._lock:
            self.t_start = time.monotonic()
            self.t_stop = None
            self._running = True
            self._account(self.t_start)

    def stop(self) -> None:
        """Mark the link stopped: an ongoing partition stops counting."""
        with self._lock:
            now = time.monotonic()
            self._account(now, closing=True)
            self._running = False
            self.t_stop = now

    # -- state -----------------------------------------------------------------------
    @property
    def params(self) -> LinkParams:
        """The parameters in force."""
        return self._params

    @property
    def wall_params(self) -> LinkParams:
        """What the shaper applies: the parameters on the dilated wall clock
        (:meth:`LinkParams.on_wall_clock`; the same without dilation)."""
        return self._wall

    @property
    def manual(self) -> str | None:
        """The manual partition mode, or ``None`` when none is on."""
        return self._manual

    @property
    def mode(self) -> str | None:
        """The partition in force: the manual mode, ``"blackhole"`` for partitioned
        parameters, or ``None`` when traffic passes."""
        if self._manual is not None:
            return self._manual
        return "blackhole" if self._params.partitioned else None

    def set_params(self, params: LinkParams) -> str | None:
        """Record new parameters; return the partition mode now in force."""
        check_params(params)
        with self._lock:
            self._params = params
            self._wall = params.on_wall_clock(self.tdf)
            self._account(time.monotonic())
            return self.mode

    def set_partition(self, mode: str | None) -> str | None:
        """Turn the manual partition on (a mode) or off (``None``); return the mode now
        in force (a scheduled partition stays on after a manual heal)."""
        if mode is not None:
            check_partition_mode(mode)
        with self._lock:
            self._manual = mode
            self._account(time.monotonic())
            return self.mode

    def _account(self, now: float, closing: bool = False) -> None:
        closed = self.mode is not None and self._running and not closing
        if closed and self._since is None:
            self._since = now
        elif not closed and self._since is not None:
            self._partitioned_s += now - self._since
            self._since = None

    # -- records ---------------------------------------------------------------------
    def partitioned_s(self) -> float:
        """Seconds spent partitioned (manual or scheduled) while running, so far."""
        with self._lock:
            ongoing = time.monotonic() - self._since if self._since is not None else 0.0
            return self._partitioned_s + ongoing

    def uptime_s(self) -> float:
        """Seconds since :meth:`start` (until :meth:`stop`), 0 before the start."""
        if not self.t_start:
            return 0.0
        end = self.t_stop if self.t_stop is not None else time.monotonic()
        return end - self.t_start

    def record_change(self, params: LinkParams, due: float, applied: float) -> None:
        """Log a schedule change applied at ``applied`` that was due at ``due``."""
        entry: dict[str, object] = {
            "t_s": applied - self.t_start,
            "lag_ms": (applied - due) * 1e3,
            "params": params.to_dict(),
        }
        with self._lock:
            self._changes.append(entry)

    def changes(self) -> list[dict[str, object]]:
        """Applied schedule changes ``[{"t_s", "lag_ms", "params"}]`` (a copy)."""
        with self._lock:
            return list(self._changes)

    def counters(self) -> dict[str, object]:
        """The counters every link kind reports from this bookkeeping.

        Returns
        -------
        dict
            ``partitioned_s`` (s), ``partition`` (mode or ``None``), ``params`` (dict),
            ``changes`` (``[{"t_s" (s since start), "lag_ms", "params"}]``).
        """
        return {
            "partitioned_s": self.partitioned_s(),
            "partition": self.mode,
            "params": self._params.to_dict(),
            "changes": self.changes(),
        }
