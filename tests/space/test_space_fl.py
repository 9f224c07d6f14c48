"""A real Flower fleet in which a satellite silo is out of view at first: the rounds go
on without it (round deadline), and it takes part once its pass begins.

The pass is on the wall clock (a schedule from the fleet's start), so the test judges the
rounds against the times the run recorded (``round_start``/``round_end`` and the link's
``link_changed`` events), not against where the rounds should have fallen on a quiet
machine: a round whose deadline passed before the recorded rise cannot have the
satellite's reply in time; a round started after it has the satellite again."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from testbed.runner import run_experiment
from testbed.space.schedule import SpaceModel
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.conftest import processes_under

#: The satellite rises this long after the fleet is ready, s: round 1 (deadline 8 s) ends
#: before it unless the ServerApp takes over 20 s to start its first round.
RISE_WALL_S = 30.0
K = 5.0  #: time compression: the ~510 s pass lasts ~100 s of wall time
#: Rounds 1-4 wait out their deadline (32 s > RISE_WALL_S); round 5 starts near the rise
#: (its reply may still be late: the pass's first, slow seconds and the replies the link
#: held); round 6, the last, starts seconds into the pass.
ROUNDS = 6
#: Partitioned seconds the link counted vs those between its recorded changes, s.
PARTITION_TOL_S = 1.0


@pytest.mark.slow
def test_fl_round_with_a_satellite_out_of_view(tmp_path: Path, equatorial) -> None:
    base = equatorial(time_compression=K, horizon_s=200.0)
    first = SpaceModel(base, ["sat"], horizon_s=7000.0 / K).windows[0]
    start = base.start_utc + timedelta(seconds=first.start_s - RISE_WALL_S * K)
    model = SpaceModel(base.model_copy(update={"start_utc": start}), ["sat"])
    assert model.windows[0].start_s / K == pytest.approx(RISE_WALL_S, abs=1e-3)
    segments = model.link_segments("sat")
    assert segments[0]["partitioned"] and not segments[1]["partitioned"]
    exp = {
        "name": "space-fl",
        "seed": 3,
        "fleet": {
            "nodes": [
                {"id": "cloud", "tier": "cloud"},
                {"id": "edge", "tier": "edge"},
                {"id": "sat", "tier": "space"},
            ]
        },
        "links": {
            "defaults": {"edge-cloud": {"bandwidth_mbps": 100, "latency_ms": 10}},
            # in view while the fleet registers; the space schedule takes over at t = 0
            "nodes": {"sat": {"bandwidth_mbps": 100, "latency_ms": 4, "schedule": segments}},
        },
        "workload": {"fl": {"rounds": ROUNDS, "local_epochs": 1, "round_timeout_s": 8}},
    }
    store = RunStore(tmp_path)
    res = run_experiment(parse_spec(yaml.safe_dump(exp, sort_keys=False)), store)
    assert res.status == "completed"
    st = {(r.round, r.node): r.status for r in store.round_status(res.run_id)}
    events = store.events(res.run_id)
    starts = {e.round: e.ts for e in events if e.kind == "round_start"}
    ends = {e.round: e.ts for e in events if e.kind == "round_end"}
    sat = [(e.ts, json.loads(e.data or "{}")) for e in events if e.kind == "link_changed"
           and e.node == "sat"]
    # the link starts in view; the schedule cuts it at its t = 0 (the fleet is ready) and
    # the pass opens it again: both changes at t_s seconds of the link's own clock
    cuts = [i for i, (_ts, d) in enumerate(sat) if d["params"].get("partitioned")]
    assert cuts, sat
    opened = [(ts, d) for ts, d in sat[cuts[0]:] if not d["params"].get("partitioned")]
    assert opened, sat
    rise, rise_data = opened[0]
    out_of_view_s = rise_data["t_s"] - sat[cuts[0]][1]["t_s"]
    assert out_of_view_s >= RISE_WALL_S - 0.5, sat  # not earlier than planned
    before = [r for r in sorted(ends) if ends[r] <= rise]
    after = [r for r in sorted(starts) if starts[r] >= rise]
    assert before, f"no round ended before the recorded rise: {starts=} {ends=} {rise=}"
    assert after, f"no round started after the recorded rise: {starts=} {ends=} {rise=}"
    # out of view: its reply cannot come back in time; it fails, or arrives (held by the
    # link while partitioned) in a later round and is recorded late (staleness >= 1)
    for r in before:
        assert st[(r, "sat")] in {"failed", "late"}, (r, st[(r, "sat")])
    if st[(before[0], "sat")] == "late":
        stale = [v for _r, n, _k, v, _t in store.metrics(res.run_id, "staleness") if n == "sat"]
        assert stale and max(stale) >= 1, stale  # (a round open at the rise: late by 0)
    assert all(st[(r, "edge")] == "completed" for r in range(1, ROUNDS + 1))  # rounds went on
    # in view: it takes part again (a round begun at the rise may still get it late)
    assert all(st[(r, "sat")] in {"completed", "late"} for r in after), st
    assert after[-1] == ROUNDS and st[(ROUNDS, "sat")] == "completed", (starts, rise, st)
    part = {n: v for _r, n, _k, v, _t in store.metrics(res.run_id, "link_partitioned_s")}
    assert part["sat"] == pytest.approx(out_of_view_s, abs=PARTITION_TOL_S)
    assert part["edge"] == 0.0
    assert len(sat) >= 3  # the pass's latency/bandwidth updates were applied
    assert processes_under(tmp_path) == []
