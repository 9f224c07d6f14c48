"""Availability traces: the intervals format, FedScale's, the diurnal generator."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from testbed.simulation.availability import (
    REASON,
    Availability,
    diurnal_trace,
    load_trace,
    main,
    write_intervals,
)

ROOT = Path(__file__).resolve().parents[2]


def test_intervals_csv(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("# a comment\nclient,start_s,end_s\nedge-1,0,10\nedge-1,10,20\nedge-2,5,8\n")
    traces = load_trace(p)
    assert traces["edge-1"].starts == (0.0,) and traces["edge-1"].ends == (20.0,)
    av = Availability(traces, ["edge-1", "edge-2"], time_scale=1.0)
    assert av.down_reason("edge-1", 1, 19) is None
    assert av.down_reason("edge-1", 19, 21) == REASON
    assert av.down_reason("edge-2", 0, 1) == REASON and av.down_reason("edge-2", 6, 7) is None


def test_period_repeats_and_time_scale(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("# period_s: 100\nclient,start_s,end_s\n0,0,50\n")
    av = Availability(load_trace(p), ["a", "b"], time_scale=10.0)  # by index, both -> 0
    assert av.down_reason("b", 10.1, 10.4) is None  # trace 101..104 s = 1..4 s
    assert av.down_reason("a", 4.9, 5.1) == REASON


def test_fedscale_json_and_pickle(tmp_path: Path) -> None:
    data = {1: {"active": [0, 60], "inactive": [30, 90], "finish_time": 100}}
    (tmp_path / "f.json").write_text(json.dumps(data))
    (tmp_path / "f.pkl").write_bytes(pickle.dumps(data))
    for name in ("f.json", "f.pkl"):
        av = Availability(load_trace(tmp_path / name), ["x"], 1.0)
        assert av.down_reason("x", 10, 20) is None and av.down_reason("x", 40, 41) == REASON
        assert av.down_reason("x", 165, 185) is None  # repeats every finish_time


def test_pickle_with_code_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.pkl").write_bytes(pickle.dumps({"1": {"active": [Path("/")]}}))
    with pytest.raises(ValueError, match="plain data only"):
        load_trace(tmp_path / "bad.pkl")


def test_bad_line_names_it(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("client,start_s,end_s\na,0\n")
    with pytest.raises(ValueError, match="line 2"):
        load_trace(tmp_path / "t.csv")


def test_diurnal_generator_round_trips(tmp_path: Path) -> None:
    tr = diurnal_trace(5, hours=24, seed=1)
    on = sum(e - s for iv in tr.values() for s, e in iv) / (5 * 24 * 3600)
    assert 0.4 < on < 0.8  # mean_on 0.6
    out = tmp_path / "d.csv"
    assert main(["5", "24", str(out), "1"]) == 0
    assert out.read_text() == write_intervals(tr, 24 * 3600)
    assert len(load_trace(out)) == 5


def test_shipped_trace_loads() -> None:
    traces = load_trace(ROOT / "experiments" / "traces" / "availability_diurnal_50.csv")
    assert len(traces) == 50 and all(t.period_s == 86400 for t in traces.values())
