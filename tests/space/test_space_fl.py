"""A real Flower fleet in which a satellite silo is out of view at first: the rounds go
on without it (round deadline), and it takes part once its pass begins."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from testbed.runner import run_experiment
from testbed.space.schedule import SpaceModel
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.conftest import processes_under

RISE_WALL_S = 20.0  #: the satellite rises this long after the fleet is ready, s
K = 5.0  #: time compression: the ~510 s pass lasts ~100 s of wall time
#: Scheduled vs measured time partitioned (fleet start-up and schedule start jitter), s.
PARTITION_TOL_S = 2.5


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
        "workload": {"fl": {"rounds": 4, "local_epochs": 1, "round_timeout_s": 8}},
    }
    store = RunStore(tmp_path)
    res = run_experiment(parse_spec(yaml.safe_dump(exp, sort_keys=False)), store)
    assert res.status == "completed"
    rows = store.round_status(res.run_id)
    st = {(r.round, r.node): r.status for r in rows}
    # out of view: its reply cannot come back in time; it fails, or arrives (held by the
    # link while partitioned) in a later round and is recorded late (staleness >= 1)
    assert st[(1, "sat")] in {"failed", "late"}
    if st[(1, "sat")] == "late":
        stale = [v for _r, n, _k, v, _t in store.metrics(res.run_id, "staleness") if n == "sat"]
        assert max(stale) >= 1, stale  # (a reply of the current round may be late by 0)
    assert all(st[(r, "edge")] == "completed" for r in range(1, 5))  # the round went on
    assert st[(4, "sat")] == "completed"  # in view: it takes part again
    part = {n: v for _r, n, _k, v, _t in store.metrics(res.run_id, "link_partitioned_s")}
    assert part["sat"] == pytest.approx(RISE_WALL_S, abs=PARTITION_TOL_S)
    assert part["edge"] == 0.0
    changes = [e for e in store.events(res.run_id) if e[2] == "link_changed" and e[4] == "sat"]
    assert len(changes) >= 3  # the pass's latency/bandwidth updates were applied
    assert processes_under(tmp_path) == []
