"""Visibility windows of (satellite, ground station) pairs, routes and handover.

A *window* is an interval of orbital time during which a satellite is above a ground
station's minimum elevation. Windows are found on a coarse grid and their edges refined
by bisection to ``tol_s`` (1 ms by default). A *route* is a path a node's traffic can
take: one satellite and the ground stations it must see at once (a gateway for a space
node; a terminal and a gateway for a relay node). *Handover* picks, at each instant, the
route that serves a node among those in view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from testbed.space.orbits import Constellation, Site


@dataclass(frozen=True)
class Window:
    """A satellite above a ground station's minimum elevation.

    Times are orbital seconds after the constellation's ``start_utc``; ``clipped_start``
    / ``clipped_end`` mark edges cut by the time span searched (the satellite was already
    / still in view).
    """

    satellite: str
    station: str
    start_s: float
    end_s: float
    max_elevation_deg: float
    t_max_s: float
    clipped_start: bool = False
    clipped_end: bool = False

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def _bisect(
    con: Constellation,
    site: Site,
    sats: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    rising: np.ndarray,
    tol_s: float,
) -> np.ndarray:
    """Threshold crossings of elevation in ``[lo, hi]`` per (satellite, bracket), s."""
    lo, hi = lo.copy(), hi.copy()
    min_el = site.station.min_elevation_deg
    while np.any(hi - lo > tol_s):
        mid = 0.5 * (lo + hi)
        el, _ = site.look(con.ecef_pairs_m(sats, mid))
        above = el >= min_el
        # rising: below at lo, above at hi -> an above midpoint moves hi
        move_hi = above == rising
        hi = np.where(move_hi, mid, hi)
        lo = np.where(move_hi, lo, mid)
    crossing: np.ndarray = 0.5 * (lo + hi)
    return crossing


def visibility_windows(
    con: Constellation,
    sites: Sequence[Site],
    duration_s: float,
    coarse_step_s: float = 10.0,
    tol_s: float = 1e-3,
    sats: Sequence[int] | None = None,
) -> list[Window]:
    """All windows over ``[0, duration_s]`` of orbital time, sorted by start.

    Parameters
    ----------
    con
        Satellites.
    sites
        Ground stations.
    duration_s
        Span searched, orbital seconds after ``con.start_utc``.
    coarse_step_s
        Grid step, s; a pass shorter than this may be missed (it then peaks within a
        fraction of a degree of the minimum elevation).
    tol_s
        Edge refinement tolerance, s.
    sats
        Satellite indices to search (default: all).
    """
    idx = np.arange(len(con.names)) if sats is None else np.asarray(sats, dtype=int)
    n = max(2, int(np.ceil(duration_s / coarse_step_s)) + 1)
    grid = np.linspace(0.0, duration_s, n)
    pos = con.ecef_m(grid, idx)  # (n_sat, n_t, 3)
    out: list[Window] = []
    for site in sites:
        el, _ = site.look(pos)
        above = np.nan_to_num(el, nan=-90.0) >= site.station.min_elevation_deg
        d = np.diff(above.astype(np.int8), axis=1)  # +1 rise, -1 set between k and k+1
        si, ki = np.nonzero(d)
        edges = _bisect(con, site, idx[si], grid[ki], grid[ki + 1], d[si, ki] > 0, tol_s)
        spans: list[tuple[int, float, float, bool, bool]] = []
        for row, sat in enumerate(idx):
            m = si == row
            times, rising = edges[m], d[row, ki[m]] > 0
            starts = list(times[rising])
            ends = list(times[~rising])
            clip_s = bool(above[row, 0])
            clip_e = bool(above[row, -1])
            if clip_s:
                starts.insert(0, 0.0)
            if clip_e:
                ends.append(float(duration_s))
            for w, (a, b) in enumerate(zip(starts, ends, strict=True)):
                spans.append(
                    (int(sat), float(a), float(b), clip_s and w == 0, clip_e and w == len(ends) - 1)
                )
        if not spans:
            continue
        sat_arr = np.array([x[0] for x in spans])
        t_max, el_max = _peaks(
            con, site, sat_arr, np.array([x[1] for x in spans]), np.array([x[2] for x in spans])
        )
        for k, (sat, a, b, cs, ce) in enumerate(spans):
            out.append(
                Window(
                    con.names[sat],
                    site.station.name,
                    a,
                    b,
                    float(el_max[k]),
                    float(t_max[k]),
                    cs,
                    ce,
                )
            )
    return sorted(out, key=lambda w: (w.start_s, w.satellite, w.station))


def _peaks(
    con: Constellation, site: Site, sats: np.ndarray, a: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Time (s) and value (deg) of the highest elevation of each window ``[a, b]``
    (golden-section search, all windows at once, to ~1 ms)."""
    g = (np.sqrt(5.0) - 1.0) / 2.0
    lo, hi = a.astype(float).copy(), b.astype(float).copy()

    def el(t: np.ndarray) -> np.ndarray:
        deg: np.ndarray = np.nan_to_num(site.look(con.ecef_pairs_m(sats, t))[0], nan=-90.0)
        return deg

    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = el(x1), el(x2)
    while np.any(hi - lo > 1e-3):
        left = f1 < f2  # the maximum lies in [x1, hi]
        lo = np.where(left, x1, lo)
        hi = np.where(left, hi, x2)
        x1n = np.where(left, x2, hi - g * (hi - lo))
        x2n = np.where(left, lo + g * (hi - lo), x1)
        f_new = el(np.where(left, x2n, x1n))
        f1, f2 = np.where(left, f2, f_new), np.where(left, f_new, f1)
        x1, x2 = x1n, x2n
    t = 0.5 * (lo + hi)
    return t, el(t)


@dataclass(frozen=True)
class Route:
    """One satellite and the ground stations it must see at once (in path order:
    node side first, the gateway last)."""

    satellite: str
    stations: tuple[str, ...]


@dataclass(frozen=True)
class Serving:
    """Which route serves a node over ``[start_s, end_s)`` of orbital time, and the
    hop ranges (m, in route order: node to satellite, satellite to gateway) at the
    interval's midpoint; ``route is None`` when no route is in view."""

    start_s: float
    end_s: float
    route: Route | None
    hop_ranges_m: tuple[float, ...] = ()


def route_windows(
    windows: Sequence[Window], routes: Sequence[Route]
) -> list[tuple[Route, float, float]]:
    """Intervals when every station of a route sees its satellite: ``(route, start_s,
    end_s)``, the intersection of the stations' windows."""
    by: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for w in windows:
        by.setdefault((w.satellite, w.station), []).append((w.start_s, w.end_s))
    out = []
    for r in routes:
        spans = by.get((r.satellite, r.stations[0]), [])
        for st in r.stations[1:]:
            other = by.get((r.satellite, st), [])
            spans = [
                (max(a, c), min(b, d)) for a, b in spans for c, d in other if max(a, c) < min(b, d)
            ]
        out += [(r, a, b) for a, b in spans]
    return sorted(out, key=lambda x: (x[1], x[0].satellite))


def serving_timeline(
    con: Constellation,
    sites: dict[str, Site],
    windows: Sequence[tuple[Route, float, float]],
    duration_s: float,
    sample_s: float,
    policy: Literal["nearest", "longest-pass"] = "nearest",
) -> list[Serving]:
    """Serving route over ``[0, duration_s]``: intervals cut at every window edge and
    every ``sample_s``; in each, the route is chosen among those in view at its midpoint.

    ``nearest``: the shortest total path (sum of hop ranges) at the midpoint.
    ``longest-pass``: keep the current route while it is in view; when it sets, take the
    route in view whose window ends last (fewest handovers).
    """
    cuts = {0.0, float(duration_s)} | set(np.arange(0.0, duration_s, sample_s).tolist())
    cuts |= {t for _, a, b in windows for t in (a, b) if 0.0 < t < duration_s}
    edges = np.array(sorted(cuts))
    mids = 0.5 * (edges[:-1] + edges[1:])
    routes = sorted({r for r, _, _ in windows}, key=lambda r: (r.satellite, r.stations))
    if not routes:
        return [Serving(0.0, float(duration_s), None)]
    ridx = {r: i for i, r in enumerate(routes)}
    inview = np.zeros((len(routes), len(mids)), dtype=bool)
    ends = np.full((len(routes), len(mids)), -np.inf)
    for r, a, b in windows:
        m = (mids >= a) & (mids < b)
        inview[ridx[r], m] = True
        ends[ridx[r], m] = b
    sat_names = sorted({r.satellite for r in routes})
    pos = con.ecef_m(mids, [con.index[s] for s in sat_names])
    spos = {s: pos[i] for i, s in enumerate(sat_names)}
    hops = np.stack(
        [np.stack([sites[st].look(spos[r.satellite])[1] for st in r.stations]) for r in routes]
    )  # (n_route, n_hop, n_mid) when all routes have the same number of hops
    total = np.where(inview, hops.sum(axis=1), np.inf)
    chosen = np.full(len(mids), -1)
    if policy == "nearest":
        best = np.argmin(total, axis=0)
        chosen = np.where(np.isfinite(total[best, np.arange(len(mids))]), best, -1)
    else:
        cur = -1
        for k in range(len(mids)):
            if cur < 0 or not inview[cur, k]:
                cand = np.nonzero(inview[:, k])[0]
                cur = int(cand[np.argmax(ends[cand, k])]) if len(cand) else -1
            chosen[k] = cur
    out: list[Serving] = []
    for k in range(len(mids)):
        c = int(chosen[k])
        route = routes[c] if c >= 0 else None
        ranges = tuple(float(x) for x in hops[c, :, k]) if c >= 0 else ()
        out.append(Serving(float(edges[k]), float(edges[k + 1]), route, ranges))
    return out
