"""``kind: mmwave`` links: the userspace shaping proxy driven by a modelled radio.

An :class:`MmwaveLink` is a :class:`~testbed.emulation.proxy.ShapingProxy` whose
bandwidth is not a number from the YAML but the goodput of a Sionna channel
(:class:`radio.link_model.RadioLinkModel`): a radio thread computes one window
(``update_s``, emulated time: TDF x on the wall clock under time dilation) at a time,
over ``ceil(update_s / max(T_c, slot))`` blocks whose number follows the UE's speed
(the model's docstring), and applies its rate live through ``set_params``, as a
schedule would. A window in which
every block failed partitions the link (blackhole: bytes wait, connections stay) until a
window succeeds again. Latency, jitter and loss still come from the YAML (and its
``schedule``); a radio ``schedule`` (SNR, distance, UE speed over time) is played from
the fleet's ready time (``run_schedule``), or from the link's start when none is played.

Every window is kept (``counters()["radio"]["windows"]``: time, rate, BLER, SNR, speed),
with the model's parameters; all of it is MODELLED.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from radio.config import MmwaveLinkSpec
from testbed.emulation.link import LinkParams, LinkSchedule
from testbed.emulation.proxy import ShapingProxy

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MMWAVE", "MmwaveLink"]

#: The radio of an mmwave link given no ``mmwave:`` parameters (``links.mode: mmwave``).
DEFAULT_MMWAVE = MmwaveLinkSpec(snr_db=20.0)


class MmwaveLink(ShapingProxy):
    """A shaping proxy whose rate follows a modelled mmWave channel.

    Parameters
    ----------
    name, target_host, target_port, params, seed, listen_host
        As :class:`~testbed.emulation.proxy.ShapingProxy` (``params.bandwidth_mbps`` is
        replaced by the radio's rate).
    radio
        The channel parameters.
    """

    def __init__(
        self,
        name: str,
        target_host: str,
        target_port: int,
        params: LinkParams,
        radio: MmwaveLinkSpec,
        seed: int = 0,
        listen_host: str = "127.0.0.1",
    ) -> None:
        from radio.link_model import RadioLinkModel

        self.radio = radio
        self.model = RadioLinkModel(radio, seed=seed)
        self._t0 = time.monotonic()
        self._rate_mbps: float | None = None
        self._windows: list[dict[str, Any]] = []
        self._stop_radio = threading.Event()
        self._radio_thread: threading.Thread | None = None
        self._blocked = False  # the radio's outage (a window with rate 0)
        self._faulted: str | None = None  # a partition fault's mode, kept apart from it
        self._cap_mbps: float | None = None  # a degrade fault's bandwidth (a ceiling)
        first = self.model.window(self.model.state)
        self._rate_mbps = first.rate_mbps
        super().__init__(
            name, target_host, target_port, self._shaped(params), listen_host, seed=seed
        )
        self._note(first, 0.0)

    # -- the radio drives the bandwidth ----------------------------------------------------
    def _shaped(self, params: LinkParams) -> LinkParams:
        """``params`` with the radio's current rate, under a degrade fault's bandwidth
        when one is set (a tiny floor while the rate is 0: the window partitions the link
        instead)."""
        rate = self._rate_mbps if self._rate_mbps else 1e-3
        if self._cap_mbps is not None:
            rate = min(rate, self._cap_mbps)
        return params.replace(bandwidth_mbps=round(rate, 6))

    def set_params(self, params: LinkParams) -> None:
        """Apply latency, jitter, loss and partition of ``params``; the bandwidth is the
        radio's, capped by ``params.bandwidth_mbps`` when set (a ``degrade`` fault: the
        link spec itself has none)."""
        self._cap_mbps = params.bandwidth_mbps
        super().set_params(self._shaped(params))

    def partition(self, on: bool, mode: str = "blackhole") -> None:
        """A partition fault (or its heal), kept apart from the radio's outages: the link
        is cut while either holds."""
        self._faulted = mode if on else None
        self._cut()

    def _cut(self) -> None:
        """Partition the proxy while a fault or the radio says so, heal it otherwise."""
        if self._faulted is not None:
            super().partition(True, self._faulted)
        else:
            super().partition(self._blocked)

    def start(self) -> int:
        port = super().start()
        self._t0 = time.monotonic()
        self._radio_thread = threading.Thread(
            target=self._radio_loop, name=f"radio-{self.name}", daemon=True
        )
        self._radio_thread.start()
        return port

    def run_schedule(self, schedule: LinkSchedule, t0: float) -> None:
        """Play ``schedule`` (latency, loss...) and restart the radio schedule's clock at
        ``t0``."""
        self.restart_radio_clock(t0)
        super().run_schedule(schedule, t0)

    def restart_radio_clock(self, t0: float) -> None:
        """The radio ``schedule``'s origin (``time.monotonic()``): the fleet's ready time
        (windows noted before, e.g. the first at the link's start, move to that clock)."""
        for w in self._windows:
            w["t_s"] = round(w["t_s"] + (self._t0 - t0) / self._state.tdf, 4)
        self._t0 = t0

    def stop(self) -> None:
        self._stop_radio.set()
        if self._radio_thread is not None:
            self._radio_thread.join(timeout=5.0)
        super().stop()

    def _radio_loop(self) -> None:
        factor = self._state.tdf  # radio time is emulated: a window lasts TDF x on the wall
        period = self.radio.update_s * factor
        k = 1
        start = time.monotonic()
        while not self._stop_radio.wait(max(0.0, start + k * period - time.monotonic())):
            t_s = (time.monotonic() - self._t0) / factor
            try:
                w = self.model.window(self.model.state_at(t_s))
                self._apply_window(w, t_s)
            except Exception:  # noqa: BLE001 - a radio failure keeps the last rate, logged
                log.exception("mmwave link %s: radio window failed", self.name)
            k = max(k + 1, int((time.monotonic() - start) / period) + 1)

    def _apply_window(self, w: Any, t_s: float) -> None:
        self._rate_mbps = w.rate_mbps
        if w.rate_mbps <= 0 and not self._blocked:
            self._blocked = True
            self._cut()
        elif w.rate_mbps > 0:
            super().set_params(self._shaped(self.params))
            if self._blocked:
                self._blocked = False
                self._cut()
        self._note(w, t_s)

    def _note(self, w: Any, t_s: float) -> None:
        self._windows.append({"t_s": round(t_s, 4), **w.as_dict()})

    # -- counters ----------------------------------------------------------------------
    def windows(self) -> list[dict[str, Any]]:
        """Every window so far (``t_s`` after the radio clock's origin)."""
        return list(self._windows)

    def mean_rate_mbps(self, since_s: float = 0.0, until_s: float | None = None) -> float:
        """Mean modelled rate [Mbit/s] of the windows between two radio-clock times."""
        rates = [
            w["rate_mbps"]
            for w in self._windows
            if w["t_s"] >= since_s and (until_s is None or w["t_s"] <= until_s)
        ]
        return sum(rates) / len(rates) if rates else float(self._rate_mbps or 0.0)

    def radio_time_s(self) -> float:
        """Seconds on the radio clock now (emulated: wall / TDF)."""
        return (time.monotonic() - self._t0) / self._state.tdf

    def counters(self) -> dict[str, Any]:
        """The proxy's counters plus ``radio``: the model's record and its windows."""
        out = super().counters()
        wins = self.windows()
        out["radio"] = {
            **self.model.record(),
            "windows": wins,
            "mean_rate_mbps": self.mean_rate_mbps(),
            "mean_bler": sum(w["bler"] for w in wins) / len(wins) if wins else 0.0,
        }
        return out
