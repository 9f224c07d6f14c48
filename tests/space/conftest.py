"""Shared helpers of the space tests: the shipped ISS TLE and an equatorial setup."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.space.config import SpaceSpec

ROOT = Path(__file__).resolve().parents[2]
ISS_TLE = ROOT / "experiments" / "tle" / "iss-2014-01-20.tle"


def equatorial_spec(**overrides: object) -> SpaceSpec:
    """One satellite on an equatorial circular orbit (550 km) and a gateway on the
    equator: every pass goes through the zenith, and the geometry is exactly planar."""
    raw: dict[str, object] = {
        "shells": [
            {
                "name": "eq",
                "planes": 1,
                "sats_per_plane": 1,
                "altitude_km": 550.0,
                "inclination_deg": 0.0,
                "epoch_utc": "2025-03-20T00:00:00Z",
            }
        ],
        "ground_stations": [
            {"name": "gw", "lat_deg": 0.0, "lon_deg": 0.0, "min_elevation_deg": 10.0}
        ],
        "start_utc": "2025-03-20T00:00:00Z",
        "processing_delay_ms": 2.0,
    }
    raw.update(overrides)
    return SpaceSpec.model_validate(raw)


@pytest.fixture
def iss_tle() -> Path:
    """The shipped ISS TLE (epoch 2014-01-20 22:23:04 UTC)."""
    return ISS_TLE


@pytest.fixture
def equatorial():
    """Factory of equatorial specs (see :func:`equatorial_spec`)."""
    return equatorial_spec
