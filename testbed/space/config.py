"""Typed settings of the space tier (``space:`` in an experiment YAML); pydantic only.

A *constellation* is Walker-delta shells and/or satellites from TLE files; *ground
stations* are gateways (where traffic lands, towards the server) or terminals (where a
ground node sits and reaches a gateway through a satellite, bent pipe). Space nodes
(fleet tier ``space``) ride satellites; relay nodes reach the server through the
constellation. Everything here is validated at load time; propagation lives in
:mod:`testbed.space.orbits` and is imported only when a run needs it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from kernel.frozen import Frozen, SpecPath

#: Run start used when neither ``start_utc`` nor a TLE epoch gives one (reproducible).
DEFAULT_START_UTC = datetime(2025, 1, 1, tzinfo=UTC)


_Frozen = Frozen  # (the spec models' one base, kernel/frozen.py)


def _utc(v: datetime | None) -> datetime | None:
    if v is None:
        return None
    return v.replace(tzinfo=UTC) if v.tzinfo is None else v.astimezone(UTC)


class WalkerShell(_Frozen):
    """A Walker-delta shell ``i: t/p/f`` (t = planes x sats_per_plane).

    Circular orbits; plane ``k`` (0-based) has right ascension of the ascending node
    ``raan_offset_deg + k * raan_spread_deg / planes`` and satellite ``j`` of it the
    argument of latitude ``360 * j / sats_per_plane + 360 * phasing * k / t`` (deg) at
    ``epoch_utc``. Satellites are named ``{name}-{k+1}-{j+1}``.
    """

    name: str = Field("walker", pattern=r"^[a-z][a-z0-9-]*$")
    planes: int = Field(ge=1, le=100)
    sats_per_plane: int = Field(ge=1, le=100)
    altitude_km: float = Field(gt=160, lt=2000, description="LEO: above the drag-dominated zone")
    inclination_deg: float = Field(ge=0, le=180)
    phasing: int = Field(0, ge=0, description="Walker f, 0 <= f < planes")
    raan_spread_deg: float = Field(360.0, gt=0, le=360, description="360 delta, 180 star")
    raan_offset_deg: float = 0.0
    epoch_utc: datetime | None = Field(None, description="epoch of the elements; None = start")
    propagator: Literal["keplerian", "sgp4"] = Field(
        "keplerian", description="keplerian: two-body + J2 secular drift; sgp4: sgp4init"
    )

    @field_validator("epoch_utc")
    @classmethod
    def _epoch_utc(cls, v: datetime | None) -> datetime | None:
        return _utc(v)

    @model_validator(mode="after")
    def _phasing(self) -> WalkerShell:
        if self.phasing >= max(self.planes, 1) and self.planes > 1:
            raise ValueError(f"phasing: must be < planes ({self.planes}), got {self.phasing}")
        if self.planes == 1 and self.phasing != 0:
            raise ValueError("phasing: must be 0 with a single plane")
        return self

    @property
    def total(self) -> int:
        """Number of satellites ``t``."""
        return self.planes * self.sats_per_plane

    def satellite_names(self) -> list[str]:
        """Names plane by plane: ``{name}-{plane}-{slot}`` (1-based)."""
        return [
            f"{self.name}-{k + 1}-{j + 1}"
            for k in range(self.planes)
            for j in range(self.sats_per_plane)
        ]


class GroundStation(_Frozen):
    """A ground station on the WGS-84 ellipsoid."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    lat_deg: float = Field(ge=-90, le=90)
    lon_deg: float = Field(ge=-180, le=360)
    alt_m: float = Field(0.0, ge=-500, le=9000)
    min_elevation_deg: float = Field(10.0, ge=0, lt=90)
    kind: Literal["gateway", "terminal"] = Field(
        "gateway", description="gateway: lands traffic for the server; terminal: user side"
    )


class RelaySpec(_Frozen):
    """A ground node whose uplink goes terminal -> satellite -> gateway (bent pipe)."""

    node: str
    terminal: str = Field(description="ground station where the node is")
    gateway: str = Field(description="ground station (kind gateway) towards the server")


class LinkBudget(_Frozen):
    """Downlink-style budget of one satellite-ground hop, evaluated at the slant range.

    ``C/N0 = eirp_dbw + g_over_t_dbk - FSPL(range, frequency_hz) - losses_db + 228.6``
    (dB-Hz, 228.6 = -10 log10 of Boltzmann's constant); rate = ``(1 - overhead_fraction)
    * bandwidth_hz * log2(1 + C/N / gap)``, capped at ``max_rate_mbps``. Defaults: an
    X-band small-satellite downlink (10 dBW EIRP) into a 3-4 m dish (G/T 20 dB/K).
    """

    frequency_hz: float = Field(8.2e9, gt=1e8, lt=1e12)
    bandwidth_hz: float = Field(50e6, gt=0)
    eirp_dbw: float = 10.0
    g_over_t_dbk: float = 20.0
    losses_db: float = Field(3.0, ge=0, description="atmosphere, pointing, polarisation")
    implementation_gap_db: float = Field(3.0, ge=0)
    overhead_fraction: float = Field(0.1, ge=0, lt=1)
    max_rate_mbps: float | None = Field(200.0, gt=0, description="modem cap; None = none")
    min_rate_mbps: float = Field(0.1, gt=0, description="floor (link kept, never 0)")


class SpaceSpec(_Frozen):
    """The space tier of an experiment.

    Times: orbital time runs ``time_compression`` times faster than wall time, from
    ``start_utc`` at the moment the fleet is ready. Link *values* (latency, bandwidth)
    are not compressed; only *when* they change is.
    """

    shells: list[WalkerShell] = Field(default_factory=list)
    tle_files: list[SpecPath] = Field(
        default_factory=list, description="2/3-line TLE files, relative to the spec's folder"
    )
    ground_stations: list[GroundStation] = Field(min_length=1)
    start_utc: datetime | None = Field(
        None, description="orbital time at t = 0; None = latest TLE epoch, else 2025-01-01"
    )
    time_compression: float = Field(1.0, ge=1.0, le=10000.0)
    horizon_s: float = Field(3600.0, gt=0, description="wall seconds the schedule covers")
    handover: Literal["nearest", "longest-pass"] = "nearest"
    processing_delay_ms: float = Field(2.0, ge=0, description="one way, per link")
    sample_s: float = Field(10.0, gt=0, le=600, description="orbital s between link updates")
    coarse_step_s: float = Field(
        10.0, gt=0, le=60, description="orbital s of the visibility grid before refinement"
    )
    link_budget: LinkBudget = LinkBudget()
    satellites: dict[str, str] = Field(
        default_factory=dict,
        description="node -> satellite; unmapped space nodes take the next free satellite",
    )
    relays: list[RelaySpec] = Field(default_factory=list)

    @field_validator("start_utc")
    @classmethod
    def _start_utc(cls, v: datetime | None) -> datetime | None:
        return _utc(v)

    @model_validator(mode="after")
    def _references(self) -> SpaceSpec:
        errors = self._naming_errors() + self._relay_errors() + self._satellite_errors()
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def _naming_errors(self) -> list[str]:
        """A constellation, unique station and shell names, at least one gateway."""
        errors: list[str] = []
        if not self.shells and not self.tle_files:
            errors.append("space: a constellation needs shells and/or tle_files")
        names = [g.name for g in self.ground_stations]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            errors.append(f"space.ground_stations: duplicate names {dup}")
        shells = [s.name for s in self.shells]
        dup = sorted({n for n in shells if shells.count(n) > 1})
        if dup:
            errors.append(f"space.shells: duplicate shell names {dup}")
        if not any(g.kind == "gateway" for g in self.ground_stations):
            errors.append("space.ground_stations: at least one needs kind: gateway")
        return errors

    def _relay_errors(self) -> list[str]:
        """Relays name a known terminal and a gateway; relay nodes have no satellite."""
        errors: list[str] = []
        names = [g.name for g in self.ground_stations]
        kinds = {g.name: g.kind for g in self.ground_stations}
        for i, r in enumerate(self.relays):
            if r.terminal not in kinds:
                errors.append(
                    f"space.relays.{i}.terminal: unknown ground station {r.terminal!r}; "
                    f"defined: {names}"
                )
            if kinds.get(r.gateway) != "gateway":
                errors.append(
                    f"space.relays.{i}.gateway: {r.gateway!r} is not a ground station of "
                    f"kind gateway; gateways: {[n for n, k in kinds.items() if k == 'gateway']}"
                )
        relay_nodes = [r.node for r in self.relays]
        both = sorted(set(relay_nodes) & set(self.satellites))
        if both:
            errors.append(f"space.relays: nodes {both} are also mapped to satellites")
        return errors

    def _satellite_errors(self) -> list[str]:
        """One node per satellite, known satellite names, existing TLE files."""
        errors: list[str] = []
        sats = list(self.satellites.values())
        dup = sorted({s for s in sats if sats.count(s) > 1})
        if dup:
            errors.append(f"space.satellites: satellites {dup} carry more than one node")
        walker = {n for s in self.shells for n in s.satellite_names()}
        if not self.tle_files:
            for node, sat in self.satellites.items():
                if sat not in walker:
                    errors.append(
                        f"space.satellites.{node}: unknown satellite {sat!r} "
                        f"(shell satellites are named like {sorted(walker)[:3]})"
                    )
        for i, f in enumerate(self.tle_files):
            if resolve_path(f) is None:
                errors.append(f"space.tle_files.{i}: no such file {f!r}")
        return errors

    def ground_station(self, name: str) -> GroundStation:
        """The ground station called ``name``."""
        for g in self.ground_stations:
            if g.name == name:
                return g
        raise ValueError(f"unknown ground station {name!r}")

    @property
    def gateways(self) -> list[GroundStation]:
        """Ground stations of kind gateway (where space nodes' traffic lands)."""
        return [g for g in self.ground_stations if g.kind == "gateway"]


def resolve_path(path: str) -> Path | None:
    """The file ``path`` (absolute once the spec is loaded: relative ``tle_files`` are
    read from the spec's folder), ``None`` when it does not exist."""
    p = Path(path)
    return p if p.is_file() else None
