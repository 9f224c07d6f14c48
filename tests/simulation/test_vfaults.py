"""Faults decided on virtual time (no Ray): what each kind does to a client's rounds,
played through the clocked grid (testbed/simulation/grid.py on Flower's in-memory grid
and LinkState) as a simulation run plays them."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Literal

import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from pydantic import Field

from nodes.fl.telemetry import Telemetry
from testbed.emulation.link import LinkParams
from testbed.faults import FaultKind, FaultParams, register_fault
from testbed.simulation import vfaults
from testbed.simulation.clock import ClientModel, VirtualClock
from testbed.simulation.grid import ClockedGrid
from testbed.simulation.vfaults import VirtualFaults
from testbed.spec.models import FaultSpec
from tests.simulation.inmemory import answer as answer_msg
from tests.simulation.inmemory import inmemory_grid

DEADLINE_S = 10.0
MB = 1_000_000  # payload bytes each way (1 s at the clients' 8 Mbit/s)
NAMES = ["edge-1", "edge-2", "edge-3", "fog-1"]


class Tel(Telemetry):
    """The run's telemetry, with its path (the test reads its events back)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.path = path


def make(tmp_path: Path, *faults: dict[str, object]) -> tuple[VirtualClock, Path]:
    path = tmp_path / "telemetry.jsonl"
    tiers = {n: n.split("-")[0] for n in NAMES}
    vf = VirtualFaults(
        [FaultSpec.model_validate(f) for f in faults], tiers, 3, Tel(path), tmp_path / "c"
    )
    model = ClientModel(params=LinkParams(bandwidth_mbps=8.0, latency_ms=0.0))
    return VirtualClock(dict.fromkeys(NAMES, model), DEADLINE_S, 0.0, 3, vf), path


def play(clock: VirtualClock, rounds: int, compute_s: float = 1.0) -> dict[tuple[int, str], str]:
    """Train rounds through the clocked grid (:class:`ClockedGrid` on Flower's in-memory
    grid and LinkState, no Ray: a thread answers as the Simulation Engine's workers do,
    1 MB each way, ``compute_s`` of measured training). Statuses as the recording
    strategy and the store see them: ``excluded`` (not listed by ``get_node_ids``, so not
    sampled), ``completed`` (reply kept), ``lost`` (``exchange_lost``), else ``late``."""
    tel = clock.faults.tel if clock.faults else None
    assert isinstance(tel, Tel)
    grid, state, mapping = inmemory_grid(len(NAMES), 11)
    clocked = ClockedGrid(grid, clock, NAMES, tel, 30.0, mapping)
    clocked.arm()  # (the ServerApp arms it once its fleet has registered)
    payload = ArrayRecord(array_dict={"w": Array("uint8", (MB,), "numpy.ndarray", bytes(MB))})
    stop = threading.Event()

    def answer() -> None:  # the Simulation Engine's workers
        while not stop.wait(0.005):
            for node_id in mapping:
                for msg in state.get_message_ins(node_id=node_id, limit=1):
                    metrics = MetricRecord({"train-cpu-s": compute_s})
                    content = RecordDict({"metrics": metrics, "arrays": payload})
                    answer_msg(state, msg, content)

    thread = threading.Thread(target=answer)
    thread.start()
    name = {n: NAMES[p] for n, p in mapping.items()}
    out: dict[tuple[int, str], str] = {}
    try:
        for r in range(1, rounds + 1):
            ids = list(grid.get_node_ids())  # the round's sampling
            cfg = ConfigRecord({"server-round": r})
            msgs = [
                Message(RecordDict({"config": cfg, "arrays": payload}), i, MessageType.TRAIN)
                for i in ids
            ]
            kept = {name[m.metadata.src_node_id] for m in grid.send_and_receive(msgs)}
            lost = {e["node"] for e in events(tel.path) if e["name"] == "exchange_lost"
                    and e["round"] == r}  # fmt: skip
            sampled = {name[i] for i in ids}
            for n in NAMES:
                out[(r, n)] = (
                    "excluded" if n not in sampled
                    else "completed" if n in kept
                    else "lost" if n in lost
                    else "late"
                )  # fmt: skip
    finally:
        stop.set()
        thread.join()
    return out


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if '"event"' in x]


def test_crash_before_round_excludes_from_then_on(tmp_path: Path) -> None:
    clock, tel = make(tmp_path, {"kind": "crash", "node": "edge-2", "at_round": 3})
    st = play(clock, 5)
    assert [st[(r, "edge-2")] for r in range(1, 6)] == ["completed"] * 2 + ["excluded"] * 3
    downs = [e for e in events(tel) if e["name"] == "node_down"]
    assert [(e["node"], e["round"]) for e in downs] == [("edge-2", 3)]  # the round it acts in


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


# -- a kind's virtual effect is its class's (FaultKind.apply_virtual) ------------------
class BlackoutParams(FaultParams):
    duration_s: float = Field(gt=0, description="seconds without power")
    mode: Literal["dark", "dim"] = Field(description="dark: down; dim: compute x 4")


@register_fault("blackout")
class Blackout(FaultKind):
    """The node's site loses power: down for ``duration_s`` (dark), or its compute is 4
    times slower in the round it fires in (dim). Defined here, not in testbed/."""

    Params = BlackoutParams
    label = "blackout (site power lost)"

    def apply_virtual(self, vf: VirtualFaults, name: str, t: float, rnd: int) -> None:
        d = float(self.params.duration_s)
        if self.params.mode == "dark":
            vf.down(name, t, t + d, rnd=rnd, kind=self.spec.kind, why=f"blackout for {d} s")
        else:
            vf.slow(name, rnd + 1, rnd + 1, 4.0)
        vf.later(t, "blackout", name, mode=self.params.mode)


@register_fault("reboot")
class Reboot(FaultKind):
    """A kind with no effect on the virtual clock (the base's apply_virtual)."""

    not_simulated = "a reboot needs the node's real firmware"


def test_a_kind_defined_here_is_decided_on_the_virtual_clock(tmp_path: Path) -> None:
    """Blackout lives in this file only: vfaults.py does not name it, yet the clock
    excludes the dark node while it is down and makes the dim node late in its round."""
    assert "blackout" not in Path(vfaults.__file__).read_text()
    dark = {"kind": "blackout", "node": "edge-1", "at_round": 2, "duration_s": 6.0, "mode": "dark"}
    dim = {"kind": "blackout", "node": "fog-1", "at_round": 3, "duration_s": 1.0, "mode": "dim"}
    vfaults.check_faults([FaultSpec.model_validate(f) for f in (dark, dim)])  # simulated
    assert "blackout" in vfaults.simulated_kinds() and "reboot" not in vfaults.simulated_kinds()
    clock, tel = make(tmp_path, dark, dim)
    st = play(clock, 5, compute_s=3.0)  # rounds of 5 s: edge-1 down in [5, 11)
    assert [st[(r, "edge-1")] for r in range(1, 6)] == [
        "completed",
        "excluded",
        "excluded",
        "completed",
        "completed",
    ]
    # fog-1: compute 12 s instead of 3 s in round 3 only: past the 10 s deadline
    assert [st[(r, "fog-1")] for r in range(1, 6)] == ["completed"] * 2 + ["late"] + [
        "completed"
    ] * 2
    names = [(e["name"], e["node"]) for e in events(tel)]
    assert ("blackout", "edge-1") in names and ("node_rejoined", "edge-1") in names


def test_a_kind_without_a_virtual_effect_is_refused_naming_the_field() -> None:
    faults = [
        FaultSpec.model_validate({"kind": "crash", "node": "edge-1", "at_round": 2}),
        FaultSpec.model_validate({"kind": "reboot", "node": "edge-2", "at_round": 2}),
        FaultSpec.model_validate({"kind": "superlink-restart", "at_round": 3}),
    ]
    with pytest.raises(ValueError) as e:
        vfaults.check_faults(faults)
    text = str(e.value)
    assert text.startswith("faults[1].kind: 'reboot' cannot be simulated")
    assert "a reboot needs the node's real firmware" in text
    assert "faults[2].kind: 'superlink-restart'" in text and "no SuperLink" in text
    assert "faults[0]" not in text
    with pytest.raises(NotImplementedError, match="real firmware"):
        Reboot(faults[1]).apply_virtual(make_vf(), "edge-2", 0.0, 1)


def make_vf() -> VirtualFaults:
    return VirtualFaults([], dict.fromkeys(NAMES, "edge"), 0, Telemetry(None))
