"""From a :class:`SpaceSpec` to per-node link schedules (compressed wall time) and the
run record of windows and handovers.

Space nodes ride a satellite and reach the server through whichever gateway ground
station serves them (handover policy); relay nodes sit at a terminal ground station and
reach a gateway through whichever satellite sees both (bent pipe). While no route is in
view the link is partitioned; otherwise one-way latency = path length / c +
``processing_delay_ms`` and bandwidth = the smallest hop rate of the link budget.

Orbital time ``t_orb`` maps to wall time ``t_orb / time_compression`` after the origin
the backend gives the schedule (the moment the fleet is ready).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cached_property

import numpy as np

from testbed.emulation.link import LinkParams, LinkSchedule
from testbed.space.budget import rate_mbps
from testbed.space.config import SpaceSpec
from testbed.space.orbits import C_M_S, Constellation, Site
from testbed.space.visibility import (
    Route,
    Serving,
    Window,
    route_windows,
    serving_timeline,
    visibility_windows,
)


def assign_satellites(
    spec: SpaceSpec, space_nodes: Sequence[str], satellites: Sequence[str]
) -> dict[str, str]:
    """Node -> satellite: ``spec.satellites`` first, then each remaining space node (in
    the given order) takes the next free satellite in constellation order.

    Raises
    ------
    ValueError
        For a mapping to an unknown satellite, or more space nodes than satellites.
    """
    known = set(satellites)
    out: dict[str, str] = {}
    for node, sat in spec.satellites.items():
        if sat not in known:
            raise ValueError(
                f"space.satellites.{node}: unknown satellite {sat!r}; "
                f"satellites: {list(satellites)[:8]}{' ...' if len(satellites) > 8 else ''}"
            )
        out[node] = sat
    free = [s for s in satellites if s not in set(out.values())]
    relay = {r.node for r in spec.relays}
    for node in space_nodes:
        if node in out or node in relay:
            continue
        if not free:
            raise ValueError(
                f"space: {len(space_nodes)} space nodes but only {len(satellites)} "
                "satellites; add satellites (shells/tle_files) or fewer space nodes"
            )
        out[node] = free.pop(0)
    return out


class SpaceModel:
    """Propagated constellation, windows and per-node serving timelines of one run.

    Parameters
    ----------
    spec
        The space section.
    space_nodes
        Fleet nodes of tier ``space`` (in plan order), each riding a satellite.
    start_utc
        Orbital time at wall ``t = 0``; default from the spec (see ``resolve_start``).
    horizon_s
        Wall seconds to cover (default ``spec.horizon_s``); after it the last state holds.
    """

    def __init__(
        self,
        spec: SpaceSpec,
        space_nodes: Sequence[str] = (),
        start_utc: datetime | None = None,
        horizon_s: float | None = None,
    ) -> None:
        self.spec = spec
        self.con = Constellation(spec, start_utc)
        self.compression = float(spec.time_compression)
        self.horizon_s = float(horizon_s if horizon_s is not None else spec.horizon_s)
        self.duration_s = self.horizon_s * self.compression
        self.assignment = assign_satellites(spec, space_nodes, self.con.names)
        self.sites = {g.name: Site.of(g) for g in spec.ground_stations}
        self.relays = {r.node: r for r in spec.relays}
        self._timelines: dict[str, list[Serving]] = {}

    @property
    def nodes(self) -> list[str]:
        """Nodes whose link this model drives (space nodes, then relay nodes)."""
        return list(self.assignment) + list(self.relays)

    def routes(self, node: str) -> list[Route]:
        """Every route that can carry ``node``'s traffic."""
        if node in self.assignment:
            return [Route(self.assignment[node], (g.name,)) for g in self.spec.gateways]
        if node in self.relays:
            r = self.relays[node]
            return [Route(s, (r.terminal, r.gateway)) for s in self.con.names]
        raise ValueError(f"node {node!r} is neither a space node nor a relay: {self.nodes}")

    @cached_property
    def windows(self) -> list[Window]:
        """Windows of the satellites and stations the nodes use, orbital seconds."""
        sats = sorted({self.con.index[r.satellite] for n in self.nodes for r in self.routes(n)})
        stations = sorted({s for n in self.nodes for r in self.routes(n) for s in r.stations})
        if not sats:
            return []
        return visibility_windows(
            self.con,
            [self.sites[s] for s in stations],
            self.duration_s,
            self.spec.coarse_step_s,
            sats=sats,
        )

    def timeline(self, node: str) -> list[Serving]:
        """Serving route of ``node`` per interval of orbital time."""
        if node not in self._timelines:
            rw = route_windows(self.windows, self.routes(node))
            self._timelines[node] = serving_timeline(
                self.con, self.sites, rw, self.duration_s, self.spec.sample_s, self.spec.handover
            )
        return self._timelines[node]

    def params(self, serving: Serving) -> LinkParams:
        """Link state of one served interval (latency rounded to 0.01 ms, rate to
        0.1 Mbit/s); partitioned when nothing serves."""
        return self._params_of([serving])[0]

    def _params_of(self, timeline: Sequence[Serving]) -> list[LinkParams]:
        budget = self.spec.link_budget
        hops = max((len(s.hop_ranges_m) for s in timeline), default=0)
        ranges = np.full((len(timeline), max(hops, 1)), np.nan)
        for i, s in enumerate(timeline):
            ranges[i, : len(s.hop_ranges_m)] = s.hop_ranges_m
        path_m = np.nansum(ranges, axis=1)
        hop_rate = rate_mbps(budget, np.nan_to_num(ranges, nan=1.0))
        rate = np.min(np.where(np.isnan(ranges), np.inf, hop_rate), axis=1)  # slowest hop
        latency = np.round(path_m / C_M_S * 1e3 + self.spec.processing_delay_ms, 2)
        rate = np.maximum(np.round(rate, 1), budget.min_rate_mbps)
        cut = LinkParams(bandwidth_mbps=budget.min_rate_mbps, partitioned=True)
        return [
            cut
            if s.route is None
            else LinkParams(bandwidth_mbps=float(rate[i]), latency_ms=float(latency[i]))
            for i, s in enumerate(timeline)
        ]

    def link_schedule(self, node: str, poll_s: float = 0.05) -> LinkSchedule:
        """Piecewise-constant schedule of ``node``'s link, starts in WALL seconds after
        the origin (orbital seconds / ``time_compression``); equal neighbours merged."""
        timeline = self.timeline(node)
        segs: list[tuple[float, LinkParams]] = []
        for s, p in zip(timeline, self._params_of(timeline), strict=True):
            if segs and segs[-1][1] == p:
                continue
            segs.append((s.start_s / self.compression, p))
        return LinkSchedule(segs, poll_s=poll_s)

    def link_segments(self, node: str) -> list[dict[str, object]]:
        """The schedule as plain data, one dict per change in the shape of the spec's
        ``LinkSegment`` (``at_s`` in wall seconds and every ``LinkParams`` field):
        usable as ``links.nodes.<node>.schedule``."""
        return [{"at_s": t, **p.to_dict()} for t, p in self.link_schedule(node).segments]

    def passes(self, node: str) -> list[dict[str, object]]:
        """Served periods of ``node`` (consecutive intervals on one route merged)."""
        out: list[dict[str, object]] = []
        for s in self.timeline(node):
            if s.route is None:
                continue
            key = (s.route.satellite, s.route.stations)
            if out and out[-1]["_key"] == key and out[-1]["end_s"] == s.start_s:
                out[-1]["end_s"] = s.end_s
                continue
            out.append(
                {
                    "_key": key,
                    "start_s": s.start_s,
                    "end_s": s.end_s,
                    "satellite": s.route.satellite,
                    "stations": list(s.route.stations),
                }
            )
        for p in out:
            del p["_key"]
            p["wall_start_s"] = p["start_s"] / self.compression  # type: ignore[operator]
            p["wall_end_s"] = p["end_s"] / self.compression  # type: ignore[operator]
        return out

    def utc(self, t_s: float) -> str:
        """ISO UTC time of orbital second ``t_s``."""
        return (self.con.start_utc + timedelta(seconds=t_s)).isoformat()

    def record(self) -> dict[str, object]:
        """What the run should keep: time base, compression, mapping, windows, passes."""
        return {
            "start_utc": self.con.start_utc.isoformat(),
            "time_compression": self.compression,
            "horizon_s": self.horizon_s,
            "orbital_duration_s": self.duration_s,
            "handover": self.spec.handover,
            "satellites": list(self.con.names),
            "assignment": dict(self.assignment),
            "relays": {n: r.model_dump() for n, r in self.relays.items()},
            "windows": [
                {
                    "satellite": w.satellite,
                    "station": w.station,
                    "start_s": w.start_s,
                    "end_s": w.end_s,
                    "wall_start_s": w.start_s / self.compression,
                    "wall_end_s": w.end_s / self.compression,
                    "start_utc": self.utc(w.start_s),
                    "end_utc": self.utc(w.end_s),
                    "max_elevation_deg": w.max_elevation_deg,
                    "clipped": [w.clipped_start, w.clipped_end],
                }
                for w in self.windows
            ],
            "passes": {n: self.passes(n) for n in self.nodes},
            "model": "modelled: orbits (Keplerian+J2 / SGP4), free-space link budget",
        }


def space_link_schedule(
    spec: SpaceSpec,
    node_name: str,
    start_utc: datetime | None = None,
    space_nodes: Sequence[str] = (),
    horizon_s: float | None = None,
) -> LinkSchedule:
    """One node's link schedule (builds a :class:`SpaceModel`; build the model once
    and call :meth:`SpaceModel.link_schedule` per node when there are several)."""
    nodes = list(space_nodes) or ([node_name] if node_name not in spec.satellites else [])
    model = SpaceModel(spec, nodes, start_utc, horizon_s)
    return model.link_schedule(node_name)


def space_windows(
    spec: SpaceSpec,
    start_utc: datetime | None = None,
    space_nodes: Sequence[str] = (),
    horizon_s: float | None = None,
) -> dict[str, object]:
    """The run record of :meth:`SpaceModel.record` (windows, passes, compression)."""
    return SpaceModel(spec, space_nodes, start_utc, horizon_s).record()
