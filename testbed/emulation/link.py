"""Link parameters and time-varying link schedules (no heavy imports).

A *link* joins the connecting side (client, "up" is what it sends) to the accepting side
(server, "down" is what it sends). Its state at one instant is a :class:`LinkParams`;
its evolution over a run is a :class:`LinkSchedule`. Both shaping back-ends
(:mod:`testbed.emulation.proxy` and :mod:`testbed.emulation.netem`) take these objects.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from dataclasses import replace as _replace
from typing import Any, Protocol, Self, runtime_checkable

#: Maximum segment size assumed for TCP over an emulated link, in bytes (1500 B MTU,
#: IPv4 + TCP headers with timestamps).
MSS_BYTES = 1448


@dataclass(frozen=True)
class LinkParams:
    """State of one link at one instant, the same in both directions.

    Parameters
    ----------
    bandwidth_mbps
        Rate of each direction in megabits per second (10**6 bit/s); ``None`` for
        unlimited.
    latency_ms
        One-way propagation delay in milliseconds (RTT is twice this).
    jitter_ms
        Half-width of the uniform delay variation in milliseconds; each chunk (proxy) or
        packet (netem) gets ``latency_ms + U(-jitter_ms, +jitter_ms)``, clipped at 0,
        and never overtakes an earlier one (order kept).
    loss_pct
        Packet loss probability in percent (0-100) per 1448-byte segment; see
        docs/links.md for what it means for TCP.
    partitioned
        ``True`` blackholes the link (traffic held, connections kept).
    """

    bandwidth_mbps: float | None = None
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    partitioned: bool = False

    def __post_init__(self) -> None:
        if self.bandwidth_mbps is not None and not (
            math.isfinite(self.bandwidth_mbps) and self.bandwidth_mbps > 0
        ):
            raise ValueError(
                f"bandwidth_mbps: must be a positive number or None, got {self.bandwidth_mbps!r}"
            )
        for field in ("latency_ms", "jitter_ms"):
            value = getattr(self, field)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{field}: must be a finite number >= 0, got {value!r}")
        if not (0.0 <= self.loss_pct < 100.0):
            raise ValueError(f"loss_pct: must be in [0, 100), got {self.loss_pct!r}")

    @property
    def rate_bytes_per_s(self) -> float | None:
        """Bandwidth in bytes per second, or ``None`` when unlimited."""
        return None if self.bandwidth_mbps is None else self.bandwidth_mbps * 1e6 / 8.0

    @property
    def rtt_s(self) -> float:
        """Round-trip propagation time in seconds (2 x latency, jitter excluded)."""
        return 2.0 * self.latency_ms / 1000.0

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The link's fields, in order: THE list of link fields (every copy of a link's
        state, in a spec, an event, the dashboard or the virtual clock, derives from it)."""
        return tuple(f.name for f in fields(cls))

    def replace(self, **changes: Any) -> Self:
        """Return a copy with some fields changed (validated again)."""
        self._check_names(changes)
        return _replace(self, **changes)

    def on_wall_clock(self, tdf: float) -> Self:
        """What a shaper applies for these (emulated) parameters under time dilation
        ``tdf`` (:mod:`kernel.dilation`): bandwidth divided by ``tdf``, latency and jitter
        multiplied by it (loss and partitions are timeless)."""
        if tdf == 1.0:
            return self
        return _replace(
            self,
            bandwidth_mbps=None if self.bandwidth_mbps is None else self.bandwidth_mbps / tdf,
            latency_ms=self.latency_ms * tdf,
            jitter_ms=self.jitter_ms * tdf,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (for events, run records and the simulation's
        settings); :meth:`from_dict` reads it back."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Self:
        """The parameters in ``values`` (a :meth:`to_dict`, or a part of one: missing
        fields take their defaults); ValueError naming an unknown field."""
        cls._check_names(values)
        return cls(**values)

    @classmethod
    def _check_names(cls, values: Mapping[str, object]) -> None:
        unknown = set(values) - set(cls.field_names())
        if unknown:
            raise ValueError(
                f"unknown link field(s) {sorted(unknown)}; allowed: {list(cls.field_names())}"
            )


class LinkSchedule:
    """A link's parameters over run time: piecewise-constant segments or a function.

    Parameters
    ----------
    segments
        ``[(start_s, LinkParams), ...]``: each segment holds from its start (seconds
        after the schedule's origin ``t0``) until the next one; before the first start,
        the first segment holds. Or a callable ``t_s -> LinkParams``, sampled every
        ``poll_s`` seconds by the appliers.
    poll_s
        Sampling period of a callable schedule, in seconds (ignored for segments).
    """

    def __init__(
        self,
        segments: Sequence[tuple[float, LinkParams]] | Callable[[float], LinkParams],
        poll_s: float = 0.05,
    ) -> None:
        if not poll_s > 0:
            raise ValueError(f"poll_s: must be > 0, got {poll_s!r}")
        self.poll_s = float(poll_s)
        self._fn: Callable[[float], LinkParams] | None = None
        self._starts: list[float] = []
        self._params: list[LinkParams] = []
        if callable(segments):
            self._fn = segments
            return
        items = sorted(((float(s), p) for s, p in segments), key=lambda sp: sp[0])
        if not items:
            raise ValueError("segments: at least one (start_s, LinkParams) is required")
        for i, (start, params) in enumerate(items):
            if not math.isfinite(start):
                raise ValueError(f"segments[{i}].start_s: must be finite, got {start!r}")
            if not isinstance(params, LinkParams):
                raise ValueError(f"segments[{i}]: expected LinkParams, got {type(params)}")
            if i and start == items[i - 1][0]:
                raise ValueError(f"segments[{i}].start_s: duplicate start {start}")
        self._starts = [s for s, _ in items]
        self._params = [p for _, p in items]

    @property
    def is_piecewise(self) -> bool:
        """``True`` for segment schedules, ``False`` for function schedules."""
        return self._fn is None

    @property
    def segments(self) -> list[tuple[float, LinkParams]]:
        """The segments ``[(start_s, LinkParams)]`` (empty for a function schedule)."""
        return list(zip(self._starts, self._params, strict=True))

    def at(self, t_s: float) -> LinkParams:
        """Parameters in force ``t_s`` seconds after the schedule's origin."""
        if self._fn is not None:
            params = self._fn(t_s)
            if not isinstance(params, LinkParams):
                raise TypeError(f"schedule function returned {type(params)}, not LinkParams")
            return params
        i = bisect.bisect_right(self._starts, t_s) - 1
        return self._params[max(i, 0)]


def satellite_pass(
    period_s: float,
    visible_s: float,
    min_latency_ms: float,
    max_latency_ms: float,
    peak_bandwidth_mbps: float,
    edge_bandwidth_mbps: float,
    loss_pct: float = 0.0,
    offset_s: float = 0.0,
    poll_s: float = 0.05,
) -> LinkSchedule:
    """LEO satellite passes as a function schedule.

    The satellite is visible for ``visible_s`` out of every ``period_s`` seconds
    (partitioned otherwise). During a pass, with ``x`` going 0 -> 1 -> 0 from horizon to
    zenith to horizon (``x = sin(pi * tau / visible_s)``), latency goes from
    ``max_latency_ms`` to ``min_latency_ms`` and bandwidth from ``edge_bandwidth_mbps``
    to ``peak_bandwidth_mbps`` (both linear in ``x``). This is a modelled geometry, not an
    orbit propagator.

    Parameters
    ----------
    period_s, visible_s
        Pass period and visible duration in seconds (``0 < visible_s <= period_s``).
    min_latency_ms, max_latency_ms
        One-way latency at zenith and at the horizon, in milliseconds.
    peak_bandwidth_mbps, edge_bandwidth_mbps
        Bandwidth at zenith and at the horizon, in Mbit/s.
    loss_pct
        Constant loss during the pass, in percent.
    offset_s
        Time of the first pass start after the origin, in seconds.
    poll_s
        Sampling period for appliers, in seconds.
    """
    if not (0 < visible_s <= period_s):
        raise ValueError(f"visible_s: must satisfy 0 < visible_s <= period_s, got {visible_s}")
    if min_latency_ms > max_latency_ms:
        raise ValueError("min_latency_ms: must be <= max_latency_ms")
    LinkParams(bandwidth_mbps=edge_bandwidth_mbps, latency_ms=min_latency_ms, loss_pct=loss_pct)

    def fn(t_s: float) -> LinkParams:
        tau = (t_s - offset_s) % period_s
        if tau >= visible_s:
            return LinkParams(
                bandwidth_mbps=edge_bandwidth_mbps,
                latency_ms=max_latency_ms,
                loss_pct=loss_pct,
                partitioned=True,
            )
        x = math.sin(math.pi * tau / visible_s)
        return LinkParams(
            bandwidth_mbps=round(
                edge_bandwidth_mbps + x * (peak_bandwidth_mbps - edge_bandwidth_mbps), 3
            ),
            latency_ms=round(max_latency_ms - x * (max_latency_ms - min_latency_ms), 1),
            loss_pct=loss_pct,
        )

    return LinkSchedule(fn, poll_s=poll_s)


@runtime_checkable
class Link(Protocol):
    """One emulated link of a fleet, whatever shapes it (userspace proxy, kernel
    tbf/netem in namespaces, a container's namespace, a virtual clock).

    Every link kind is driven by the same schedule driver (``run_schedule``), the same
    partition and parameter calls, and reports the same counters: ``bytes_up``,
    ``bytes_down``, ``partitioned_s``, ``stalled_s``, ``params`` (current
    :class:`LinkParams` as a dict) and ``changes`` (``[{"t_s", "lag_ms", "params"}]``).
    """

    name: str

    def start(self) -> object: ...
    def stop(self) -> None: ...
    @property
    def params(self) -> LinkParams: ...
    def set_params(self, params: LinkParams) -> None: ...
    def partition(self, on: bool, mode: str = "blackhole") -> None: ...
    def run_schedule(self, schedule: LinkSchedule, t0: float) -> None: ...
    def counters(self) -> dict[str, Any]: ...
    def connect_address(self, server_port: int) -> str:
        """``host:port`` the link's client side dials to reach the server."""
        ...
