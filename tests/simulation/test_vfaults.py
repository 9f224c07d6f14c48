"""Faults decided on virtual time (no Ray): what each kind does to a client's rounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodes.fl.telemetry import Telemetry
from testbed.emulation.link import LinkParams
from testbed.simulation.clock import ClientModel, VirtualClock
from testbed.simulation.vfaults import VirtualFaults
from testbed.spec.models import FaultSpec

DEADLINE_S = 10.0
NAMES = ["edge-1", "edge-2", "edge-3", "fog-1"]


def make(tmp_path: Path, *faults: dict[str, object]) -> tuple[VirtualClock, Path]:
    path = tmp_path / "telemetry.jsonl"
    tiers = {n: n.split("-")[0] for n in NAMES}
    vf = VirtualFaults(
        [FaultSpec.model_validate(f) for f in faults], tiers, 3, Telemetry(path), tmp_path / "c"
    )
    model = ClientModel(params=LinkParams(bandwidth_mbps=8.0, latency_ms=0.0))
    return VirtualClock(dict.fromkeys(NAMES, model), DEADLINE_S, 0.0, 3, vf), path


def play(clock: VirtualClock, rounds: int, compute_s: float = 1.0) -> dict[tuple[int, str], str]:
    """Rounds as the grid plays them: sampling at the start, exchanges, round end."""
    vf, t, out = clock.faults, 0.0, {}
    assert vf is not None
    for r in range(1, rounds + 1):
        vf.round_started(r, t, DEADLINE_S)
        slowest = 0.0
        for pid, n in enumerate(NAMES):
            if clock.down_reason(n, t, t) is not None:
                out[(r, n)] = "excluded"
                continue
            ex = clock.exchange(n, pid, r, t, compute_s, 1_000_000, 1_000_000)
            ok = ex.lost is None and ex.seconds <= DEADLINE_S
            out[(r, n)] = "completed" if ok else ("lost" if ex.lost else "late")
            slowest = max(slowest, ex.seconds) if ok else DEADLINE_S
            if ok:
                vf.completed(n, r, t + ex.seconds)
        t += slowest
        vf.round_ended(r, t)
    return out


def events(path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in path.read_text().splitlines() if '"event"' in x]


def test_crash_before_round_excludes_from_then_on(tmp_path: Path) -> None:
    clock, tel = make(tmp_path, {"kind": "crash", "node": "edge-2", "at_round": 3})
    st = play(clock, 5)
    assert [st[(r, "edge-2")] for r in range(1, 6)] == ["completed"] * 2 + ["excluded"] * 3
    downs = [e for e in events(tel) if e["name"] == "node_down"]
    assert [(e["node"], e["round"]) for e in downs] == [("edge-2", 2)]  # as chaos tags it


def test_crash_during_round_loses_the_exchange(tmp_path: Path) -> None:
    f = {"kind": "crash", "node": "edge-1", "at_round": 2, "phase": "during", "delay_s": 0.5}
    st = play(make(tmp_path, f)[0], 3)
    assert [st[(r, "edge-1")] for r in (1, 2, 3)] == ["completed", "lost", "excluded"]


def test_partition_makes_late_exactly_the_rounds_it_covers(tmp_path: Path) -> None:
    # rounds with a late reply last the deadline: rounds 2 and 3 are [T2, T2 + 20 s)
    f = {"kind": "partition", "node": "edge-3", "at_round": 2, "duration_s": 2 * DEADLINE_S}
    st = play(make(tmp_path, f)[0], 5)
    assert [st[(r, "edge-3")] for r in range(1, 6)] == [
        "completed",
        "late",
        "late",
        "completed",
        "completed",
    ]


def test_straggler_slows_its_rounds_only(tmp_path: Path) -> None:
    f = {"kind": "straggler", "node": "edge-1", "at_round": 2, "factor": 20.0, "rounds": 2}
    st = play(make(tmp_path, f)[0], 5)
    assert [st[(r, "edge-1")] for r in range(1, 6)] == [
        "completed",
        "late",
        "late",
        "completed",
        "completed",
    ]


def test_outage_and_flapping_on_virtual_time(tmp_path: Path) -> None:
    # rounds last 3 s (1 MB each way at 8 Mbit/s + 1 s compute)
    out = {"kind": "outage", "node": "edge-1", "at_time_s": 4.0, "duration_s": 4.0}
    flap = {"kind": "flapping", "tier": "fog", "at_round": 2, "duration_s": 3.0, "repeat": 2}
    clock, tel = make(tmp_path, out, flap)
    st = play(clock, 6)
    # edge-1 down [4, 8): loses round 2's exchange [3, 6), is not sampled in round 3
    # (starts at 6 + ... ) and rejoins once up
    assert st[(1, "edge-1")] == "completed" and st[(2, "edge-1")] == "lost"
    assert "completed" in {st[(r, "edge-1")] for r in (4, 5, 6)}
    assert st[(2, "fog-1")] == "excluded"
    names = [e["name"] for e in events(tel) if e["node"] == "edge-1"]
    assert names.index("node_down") < names.index("node_restarted") < names.index("node_rejoined")


def test_tier_target_probability_and_seeded_draws(tmp_path: Path) -> None:
    f = {"kind": "crash", "tier": "edge", "probability": 0.5}
    a = play(make(tmp_path / "a", f)[0], 6)
    b = play(make(tmp_path / "b", f)[0], 6)
    assert a == b  # same seed, same draws
    assert any(s == "excluded" for s in a.values())
    assert all(a[(r, "fog-1")] == "completed" for r in range(1, 7))


def test_misconfig_writes_the_control_file_for_its_rounds(tmp_path: Path) -> None:
    f = {"kind": "misconfig", "node": "edge-2", "at_round": 2, "mode": "nan", "rounds": 1}
    clock, _ = make(tmp_path, f)
    vf = clock.faults
    assert vf is not None
    vf.round_started(1, 0.0, DEADLINE_S)
    assert not (tmp_path / "c" / "1.json").exists()  # before its first round: not yet
    vf.round_ended(1, 3.0)
    vf.round_started(2, 3.0, DEADLINE_S)
    ctl = json.loads((tmp_path / "c" / "1.json").read_text())
    assert ctl["misconfig"] == "nan" and ctl["until_round"] == 2


def test_pause_delays_without_losing(tmp_path: Path) -> None:
    f = {"kind": "pause", "node": "edge-1", "at_round": 1, "duration_s": 5.0}
    clock, _ = make(tmp_path, f)
    assert clock.faults is not None
    clock.faults.round_started(1, 0.0, DEADLINE_S)
    ex = clock.exchange("edge-1", 0, 1, 0.0, 1.0, 1_000_000, 1_000_000)
    assert ex.lost is None and ex.seconds == pytest.approx(5.0 + 3.0)
