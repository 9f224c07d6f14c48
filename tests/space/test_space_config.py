"""SpaceSpec validation, the experiment's space block, TLE parsing, satellite mapping."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from testbed.space.config import SpaceSpec
from testbed.space.orbits import read_tle_file
from testbed.space.schedule import SpaceModel, assign_satellites

ROOT = Path(__file__).resolve().parents[2]
GS = [{"name": "gw", "lat_deg": 0.0, "lon_deg": 0.0}]
SHELL = {"planes": 2, "sats_per_plane": 3, "altitude_km": 550, "inclination_deg": 53}


def test_leo_fl_space_block_validates_and_drives_every_node() -> None:
    raw = yaml.safe_load((ROOT / "experiments" / "leo_fl.yaml").read_text())
    spec = SpaceSpec.model_validate(raw["space"])
    assert spec.time_compression == 30
    space_nodes = [
        f"{n['id']}-{i}"
        for n in raw["fleet"]["nodes"]
        if n["tier"] == "space"
        for i in range(1, n.get("count", 1) + 1)
    ]
    fleet = {n["id"] for n in raw["fleet"]["nodes"]}
    assert {r.node for r in spec.relays} <= fleet
    model = SpaceModel(spec, space_nodes, horizon_s=400.0)
    assert set(model.nodes) == set(space_nodes) | {"buoy"}
    for node in model.nodes:  # every node gets at least one pass in 400 s (2 orbits)
        assert model.passes(node), node


def test_errors_are_reported_together() -> None:
    with pytest.raises(ValidationError) as e:
        SpaceSpec.model_validate(
            {
                "ground_stations": GS + GS,
                "relays": [{"node": "x", "terminal": "nowhere", "gateway": "gw"}],
                "tle_files": ["missing.tle"],
            }
        )
    msg = str(e.value)
    for part in ("duplicate names ['gw']", "relays.0.terminal", "tle_files.0: no such file"):
        assert part in msg


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"shells": [SHELL | {"phasing": 2}], "ground_stations": GS}, "phasing"),
        ({"ground_stations": GS}, "shells and/or tle_files"),
        ({"shells": [SHELL], "ground_stations": [GS[0] | {"kind": "terminal"}]}, "gateway"),
        ({"shells": [SHELL], "ground_stations": GS, "time_compression": 0.5}, "time_compression"),
        ({"shells": [SHELL], "ground_stations": GS, "satellites": {"a": "walker-9-9"}}, "unknown"),
        ({"shells": [SHELL], "ground_stations": GS, "handover": "random"}, "handover"),
        ({"shells": [SHELL], "ground_stations": GS, "latency_ms": 3}, "extra"),
    ],
)
def test_invalid_specs_name_the_field(raw: dict, needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        SpaceSpec.model_validate(raw)


def test_tle_checksum_and_names(tmp_path: Path, iss_tle: Path) -> None:
    sats = read_tle_file(iss_tle)
    assert [s.name for s in sats] == ["ISS (ZARYA)"]
    assert sats[0].epoch_utc.isoformat().startswith("2014-01-20T22:23:04")
    lines = iss_tle.read_text().splitlines()
    bad = tmp_path / "bad.tle"
    bad.write_text("\n".join([lines[0], lines[1], lines[2][:-1] + "0"]) + "\n")
    with pytest.raises(ValueError, match=r"bad.tle:3: checksum"):
        read_tle_file(bad)
    two = tmp_path / "two.tle"
    two.write_text("\n".join(lines[1:]) + "\n")
    assert [s.name for s in read_tle_file(two)] == ["norad-25544"]


def test_assign_satellites_explicit_then_in_order() -> None:
    spec = SpaceSpec.model_validate(
        {"shells": [SHELL], "ground_stations": GS, "satellites": {"sat-2": "walker-1-1"}}
    )
    names = spec.shells[0].satellite_names()
    got = assign_satellites(spec, ["sat-1", "sat-2", "sat-3"], names)
    assert got == {"sat-2": "walker-1-1", "sat-1": "walker-1-2", "sat-3": "walker-1-3"}
    with pytest.raises(ValueError, match="only 6 satellites"):
        assign_satellites(spec, [f"s-{i}" for i in range(7)], names)
