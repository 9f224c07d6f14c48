"""Orbit propagation and ground geometry, vectorized with numpy.

Satellites come from Walker-delta shells (two-body circular orbits with J2 secular
drift, or SGP4 initialised from the same elements) and TLE files (SGP4, WGS-72 as TLEs
are fitted with). Positions are computed in an Earth-centred inertial frame of date
(TEME for SGP4) and rotated to Earth-fixed by Greenwich mean sidereal time (IAU-82,
UT1 taken as UTC; polar motion neglected). Ground stations sit on the WGS-84 ellipsoid.

Sources: WGS-84 (NIMA TR8350.2: a = 6378137 m, 1/f = 298.257223563,
GM = 3.986004418e14 m^3/s^2, omega = 7.292115e-5 rad/s); J2 = 1.08262668e-3 (EGM96);
GMST: Vallado, *Fundamentals of Astrodynamics and Applications*, 4th ed., eq. 3-47;
SGP4: Vallado et al., AIAA 2006-6753 (the ``sgp4`` package).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import overload

import numpy as np
from sgp4.api import WGS72, WGS84, Satrec, SatrecArray

from testbed.space.config import DEFAULT_START_UTC, GroundStation, SpaceSpec, WalkerShell
from testbed.space.config import resolve_path as _resolve_path

C_M_S = 299_792_458.0  #: speed of light in vacuum, m/s (SI, exact)
WGS84_A_M = 6_378_137.0  #: WGS-84 semi-major axis, m
WGS84_F = 1.0 / 298.257223563  #: WGS-84 flattening
WGS84_E2 = WGS84_F * (2.0 - WGS84_F)  #: first eccentricity squared
MU_M3_S2 = 3.986004418e14  #: WGS-84 Earth gravitational parameter, m^3/s^2
J2 = 1.08262668e-3  #: second zonal harmonic (EGM96)
OMEGA_EARTH_RAD_S = 7.292115e-5  #: WGS-84 Earth rotation rate, rad/s
_JD_1949 = 2433281.5  #: Julian date of 1949-12-31 00:00 UTC (sgp4init epoch origin)


def julian_date(t: datetime) -> tuple[float, float]:
    """Julian date of a UTC instant, split in a whole part (ending in .5) and a fraction.

    Parameters
    ----------
    t
        Timezone-aware (or naive UTC) instant.

    Returns
    -------
    tuple of float
        ``(jd, fr)`` with ``jd + fr`` the Julian date (days).
    """
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    midnight = t.replace(hour=0, minute=0, second=0, microsecond=0)
    jd = 2440587.5 + (midnight - datetime(1970, 1, 1, tzinfo=UTC)).days
    fr = (t - midnight) / timedelta(days=1)
    return float(jd), float(fr)


def gmst_rad(jd: float, fr: np.ndarray) -> np.ndarray:
    """Greenwich mean sidereal time (IAU-82), radians in [0, 2 pi).

    Parameters
    ----------
    jd
        Whole part of the UT1 Julian date (days).
    fr
        Fractions of a day added to ``jd``, shape ``(n,)``.
    """
    tut1 = ((jd - 2451545.0) + np.asarray(fr, dtype=float)) / 36525.0
    sec = (
        -6.2e-6 * tut1**3
        + 0.093104 * tut1**2
        + (876600.0 * 3600.0 + 8640184.812866) * tut1
        + 67310.54841
    )
    return np.mod(np.deg2rad(sec / 240.0), 2.0 * np.pi)


def inertial_to_ecef(r: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Rotate inertial-of-date positions to Earth-fixed by the sidereal angle.

    Parameters
    ----------
    r
        Positions, shape ``(..., n_t, 3)``, any length unit.
    theta
        GMST in radians, shape ``(n_t,)``.
    """
    c, s = np.cos(theta), np.sin(theta)
    x, y, z = r[..., 0], r[..., 1], r[..., 2]
    return np.stack([c * x + s * y, -s * x + c * y, z], axis=-1)


def geodetic_to_ecef(lat_deg: float, lon_deg: float, alt_m: float) -> np.ndarray:
    """WGS-84 geodetic coordinates to Earth-fixed Cartesian, metres, shape ``(3,)``."""
    lat, lon = math.radians(lat_deg), math.radians(lon_deg)
    n = WGS84_A_M / math.sqrt(1.0 - WGS84_E2 * math.sin(lat) ** 2)
    return np.array(
        [
            (n + alt_m) * math.cos(lat) * math.cos(lon),
            (n + alt_m) * math.cos(lat) * math.sin(lon),
            (n * (1.0 - WGS84_E2) + alt_m) * math.sin(lat),
        ]
    )


@dataclass(frozen=True)
class Site:
    """A ground station's Earth-fixed position and local up/east/north axes."""

    station: GroundStation
    ecef_m: np.ndarray = field(repr=False)
    up: np.ndarray = field(repr=False)

    @classmethod
    def of(cls, g: GroundStation) -> Site:
        lat, lon = math.radians(g.lat_deg), math.radians(g.lon_deg)
        up = np.array([math.cos(lat) * math.cos(lon), math.cos(lat) * math.sin(lon), math.sin(lat)])
        return cls(g, geodetic_to_ecef(g.lat_deg, g.lon_deg, g.alt_m), up)

    def look(self, sat_ecef_m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Elevation (deg) and slant range (m) of satellite positions.

        Parameters
        ----------
        sat_ecef_m
            Earth-fixed satellite positions in metres, shape ``(..., 3)``.

        Returns
        -------
        tuple of numpy.ndarray
            ``(elevation_deg, range_m)``, each of shape ``(...)`` (NaN where the
            position is NaN, e.g. a decayed SGP4 satellite).
        """
        d = sat_ecef_m - self.ecef_m
        rng = np.linalg.norm(d, axis=-1)
        with np.errstate(invalid="ignore"):
            el = np.degrees(np.arcsin(np.clip((d @ self.up) / rng, -1.0, 1.0)))
        return el, rng


@overload
def slant_range_m(elevation_deg: float, altitude_m: float, radius_m: float) -> float: ...


@overload
def slant_range_m(elevation_deg: np.ndarray, altitude_m: float, radius_m: float) -> np.ndarray: ...


def slant_range_m(
    elevation_deg: float | np.ndarray, altitude_m: float, radius_m: float
) -> float | np.ndarray:
    """Slant range from a spherical Earth's surface to a satellite at ``altitude_m``.

    ``r = sqrt((R sin e)^2 + h^2 + 2 R h) - R sin e`` (m); ``R`` = Earth radius (m).
    """
    s = radius_m * np.sin(np.radians(elevation_deg))
    r: float | np.ndarray = np.sqrt(s**2 + altitude_m**2 + 2.0 * radius_m * altitude_m) - s
    return r


def _walker_elements(shell: WalkerShell) -> tuple[np.ndarray, np.ndarray]:
    """RAAN and argument of latitude at epoch (rad), each shape ``(t,)``."""
    k = np.repeat(np.arange(shell.planes), shell.sats_per_plane)
    j = np.tile(np.arange(shell.sats_per_plane), shell.planes)
    raan = np.radians(shell.raan_offset_deg + k * shell.raan_spread_deg / shell.planes)
    u = np.radians(360.0 * j / shell.sats_per_plane + 360.0 * shell.phasing * k / shell.total)
    return np.mod(raan, 2 * np.pi), np.mod(u, 2 * np.pi)


class _Kepler:
    """Circular orbits with J2 secular drift of the node and argument of latitude."""

    def __init__(self, shell: WalkerShell, epoch: datetime, start: datetime) -> None:
        self.a = WGS84_A_M + shell.altitude_km * 1e3
        self.inc = math.radians(shell.inclination_deg)
        self.raan0, self.u0 = _walker_elements(shell)
        n = math.sqrt(MU_M3_S2 / self.a**3)
        k = 0.75 * n * J2 * (WGS84_A_M / self.a) ** 2
        ci2 = math.cos(self.inc) ** 2
        self.raan_rate = -2.0 * k * math.cos(self.inc)
        self.u_rate = n + k * (5.0 * ci2 - 1.0) + k * (3.0 * ci2 - 1.0)
        self.dt0 = (start - epoch).total_seconds()

    def inertial_m(self, t_s: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Positions (m) of satellites ``idx`` at times ``t_s``, shape ``(n_idx, n_t, 3)``."""
        return self.inertial_pairs_m(t_s[None, :], np.asarray(idx)[:, None])

    def inertial_pairs_m(self, t_s: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Positions (m) of satellite ``idx[i]`` at ``t_s[i]`` (broadcast), shape ``(..., 3)``."""
        tt = self.dt0 + t_s
        raan = self.raan0[idx] + self.raan_rate * tt
        u = self.u0[idx] + self.u_rate * tt
        cu, su, co, so = np.cos(u), np.sin(u), np.cos(raan), np.sin(raan)
        ci, si = math.cos(self.inc), math.sin(self.inc)
        return self.a * np.stack([co * cu - so * su * ci, so * cu + co * su * ci, su * si], -1)


class _SGP4:
    """SGP4 satellites (TLEs, or Walker elements through ``sgp4init``)."""

    def __init__(self, satrecs: list[Satrec], start: datetime) -> None:
        self.satrecs = satrecs
        self.jd, self.fr = julian_date(start)

    def inertial_pairs_m(self, t_s: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Positions (m) of satellite ``idx[i]`` at ``t_s[i]``, shape ``(n, 3)``."""
        out = np.empty((len(idx), 3))
        for i in np.unique(idx):
            m = idx == i
            out[m] = self.inertial_m(t_s[m], np.array([i]))[0]
        return out

    def inertial_m(self, t_s: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Positions (m) of satellites ``idx`` at times ``t_s``, shape ``(n_idx, n_t, 3)``."""
        fr = self.fr + t_s / 86400.0
        jd = np.full_like(fr, self.jd)
        arr = SatrecArray([self.satrecs[i] for i in idx])
        err, r_km, _v = arr.sgp4(jd, fr)
        r = np.asarray(r_km, dtype=float) * 1e3
        r[err != 0] = np.nan
        return r


def walker_satrecs(shell: WalkerShell, epoch: datetime, first_satnum: int = 90000) -> list[Satrec]:
    """SGP4 records of a Walker shell (mean elements, no drag), WGS-84 constants."""
    raan, u = _walker_elements(shell)
    a = WGS84_A_M + shell.altitude_km * 1e3
    n_rad_min = math.sqrt(MU_M3_S2 / a**3) * 60.0
    jd, fr = julian_date(epoch)
    out = []
    for i in range(shell.total):
        s = Satrec()
        s.sgp4init(
            WGS84,
            "i",
            first_satnum + i,
            jd + fr - _JD_1949,
            0.0,
            0.0,
            0.0,
            1e-7,
            0.0,
            math.radians(shell.inclination_deg),
            float(u[i]),
            n_rad_min,
            float(raan[i]),
        )
        out.append(s)
    return out


@dataclass(frozen=True)
class TleSatellite:
    """A satellite read from a TLE file."""

    name: str
    satrec: Satrec = field(repr=False)
    line1: str = field(repr=False)
    line2: str = field(repr=False)

    @property
    def epoch_utc(self) -> datetime:
        """Epoch of the elements (UTC)."""
        days = self.satrec.jdsatepoch - 2440587.5 + self.satrec.jdsatepochF
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=days)


def _checksum(line: str) -> int:
    return sum(int(c) if c.isdigit() else c == "-" for c in line[:68]) % 10


def read_tle_file(path: str | Path) -> list[TleSatellite]:
    """Parse a 2- or 3-line TLE file (checksums verified).

    Raises
    ------
    ValueError
        Naming ``file:line`` for a malformed or mis-summed line.
    """
    p = Path(path)
    lines = [(i + 1, ln.rstrip()) for i, ln in enumerate(p.read_text().splitlines())]
    lines = [(i, ln) for i, ln in lines if ln.strip()]
    out: list[TleSatellite] = []
    k = 0
    while k < len(lines):
        name = None
        if not lines[k][1].startswith("1 "):
            name = lines[k][1].strip().removeprefix("0 ").strip()
            k += 1
        if k + 1 >= len(lines):
            raise ValueError(f"{p}:{lines[-1][0]}: incomplete TLE (need lines 1 and 2)")
        (n1, l1), (n2, l2) = lines[k], lines[k + 1]
        for n, ln, first in ((n1, l1, "1 "), (n2, l2, "2 ")):
            if not ln.startswith(first) or len(ln) < 69:
                raise ValueError(f"{p}:{n}: expected TLE line {first.strip()} of 69 characters")
            if not ln[68].isdigit() or _checksum(ln) != int(ln[68]):
                raise ValueError(f"{p}:{n}: checksum mismatch (computed {_checksum(ln)})")
        sat = Satrec.twoline2rv(l1, l2, WGS72)
        out.append(TleSatellite(name or f"norad-{sat.satnum}", sat, l1, l2))
        k += 2
    return out


class Constellation:
    """All satellites of a :class:`SpaceSpec`, in order: shells, then TLE files.

    Parameters
    ----------
    spec
        The space section.
    start_utc
        Orbital time origin (``t_s = 0``); ``None`` resolves as :func:`resolve_start`.
    """

    def __init__(self, spec: SpaceSpec, start_utc: datetime | None = None) -> None:
        tles: list[TleSatellite] = []
        for f in spec.tle_files:
            path = _resolve_path(f)
            if path is None:
                raise ValueError(f"space.tle_files: no such file {f!r}")
            tles += read_tle_file(path)
        self.tles = tles
        self.start_utc = start_utc or resolve_start(spec, tles)
        self.names: list[str] = []
        self._groups: list[tuple[object, np.ndarray]] = []  # (propagator, global indices)
        for shell in spec.shells:
            epoch = shell.epoch_utc or self.start_utc
            prop: object
            if shell.propagator == "sgp4":
                prop = _SGP4(walker_satrecs(shell, epoch), self.start_utc)
            else:
                prop = _Kepler(shell, epoch, self.start_utc)
            self._add(prop, shell.satellite_names())
        if tles:
            self._add(_SGP4([t.satrec for t in tles], self.start_utc), [t.name for t in tles])
        dup = sorted({n for n in self.names if self.names.count(n) > 1})
        if dup:
            raise ValueError(f"space: duplicate satellite names {dup}")
        self.index = {n: i for i, n in enumerate(self.names)}
        self._jd, self._fr = julian_date(self.start_utc)

    def _add(self, prop: object, names: Sequence[str]) -> None:
        self._groups.append((prop, np.arange(len(self.names), len(self.names) + len(names))))
        self.names += list(names)

    def gmst(self, t_s: np.ndarray) -> np.ndarray:
        """Sidereal angle (rad) at orbital times ``t_s`` (s after start), shape ``(n_t,)``."""
        return gmst_rad(self._jd, self._fr + np.asarray(t_s, dtype=float) / 86400.0)

    def ecef_m(
        self, t_s: np.ndarray, sats: Sequence[int] | np.ndarray | None = None
    ) -> np.ndarray:
        """Earth-fixed positions, metres, shape ``(n_sat, n_t, 3)``.

        Parameters
        ----------
        t_s
            Orbital seconds after ``start_utc``, shape ``(n_t,)``.
        sats
            Global satellite indices (default: all).
        """
        t = np.atleast_1d(np.asarray(t_s, dtype=float))
        want = np.arange(len(self.names)) if sats is None else np.asarray(sats, dtype=int)
        out = np.full((len(want), len(t), 3), np.nan)
        for prop, gidx in self._groups:
            pos = np.nonzero(np.isin(want, gidx))[0]
            if len(pos):
                local = want[pos] - gidx[0]
                out[pos] = prop.inertial_m(t, local)  # type: ignore[attr-defined]
        return inertial_to_ecef(out, self.gmst(t))

    def ecef_pairs_m(self, sats: np.ndarray, t_s: np.ndarray) -> np.ndarray:
        """Positions of satellite ``sats[i]`` at time ``t_s[i]``, shape ``(n, 3)``."""
        sats, t = np.asarray(sats, dtype=int), np.asarray(t_s, dtype=float)
        out = np.full((len(sats), 3), np.nan)
        for prop, gidx in self._groups:
            m = (sats >= gidx[0]) & (sats <= gidx[-1])
            if np.any(m):
                out[m] = prop.inertial_pairs_m(t[m], sats[m] - gidx[0])  # type: ignore[attr-defined]
        return inertial_to_ecef(out, self.gmst(t))


def resolve_start(spec: SpaceSpec, tles: Sequence[TleSatellite] = ()) -> datetime:
    """Orbital time origin: ``spec.start_utc``, else the latest TLE epoch (freshest
    elements), else the first shell epoch, else :data:`DEFAULT_START_UTC`."""
    if spec.start_utc is not None:
        return spec.start_utc
    if tles:
        return max(t.epoch_utc for t in tles)
    epochs = [s.epoch_utc for s in spec.shells if s.epoch_utc is not None]
    return epochs[0] if epochs else DEFAULT_START_UTC
