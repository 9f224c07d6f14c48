"""Seeded request arrival processes: rates, determinism, burstiness and trace replay."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from testbed.functions.arrivals import bursty, load_trace, make_arrivals, poisson, trace

ROOT = Path(__file__).resolve().parents[2]
AZURE_SAMPLE = ROOT / "experiments" / "traces" / "azure_functions_sample.csv"
TIMESTAMPS = ROOT / "tests" / "data" / "trace_timestamps.csv"

# Poisson: 5 rps over 20000 s is ~100000 arrivals, relative sd 0.3%; 2% is > 6 sd.
POISSON_RATE_REL_TOL = 0.02
# MMPP-2 (5 s ON / 15 s OFF, factor 5): relative sd of the mean rate ~0.8% over 80000 s.
BURSTY_RATE_REL_TOL = 0.05
# Index of dispersion of per-second counts: 1 for Poisson (sd ~0.01 over 20000 bins); the
# default bursty process gives ~4.4.
POISSON_IOD_TOL = 0.1
BURSTY_IOD_MIN = 2.0


def index_of_dispersion(times: np.ndarray, duration_s: float) -> float:
    counts = np.bincount(times.astype(int), minlength=int(duration_s))
    return float(counts.var() / counts.mean())


def check_arrivals(times: np.ndarray, duration_s: float) -> None:
    assert times.dtype == np.float64 and times.ndim == 1
    assert np.all(np.diff(times) >= 0)
    assert times.size == 0 or (times[0] >= 0 and times[-1] < duration_s)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poisson_mean_rate_and_dispersion(seed: int) -> None:
    duration = 20000.0
    times = poisson(5.0, duration, np.random.default_rng(seed))
    check_arrivals(times, duration)
    assert times.size / duration == pytest.approx(5.0, rel=POISSON_RATE_REL_TOL)
    assert index_of_dispersion(times, duration) == pytest.approx(1.0, abs=POISSON_IOD_TOL)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bursty_mean_rate_and_higher_dispersion(seed: int) -> None:
    duration = 80000.0
    times = bursty(5.0, duration, np.random.default_rng(seed))
    check_arrivals(times, duration)
    assert times.size / duration == pytest.approx(5.0, rel=BURSTY_RATE_REL_TOL)
    iod = index_of_dispersion(times, duration)
    ref = index_of_dispersion(poisson(5.0, duration, np.random.default_rng(seed)), duration)
    assert iod > BURSTY_IOD_MIN and iod > 2 * ref


def test_bursty_with_factor_one_is_poisson_like() -> None:
    duration = 20000.0
    times = bursty(5.0, duration, np.random.default_rng(3), burst_factor=1.0)
    assert times.size / duration == pytest.approx(5.0, rel=POISSON_RATE_REL_TOL)
    assert index_of_dispersion(times, duration) == pytest.approx(1.0, abs=POISSON_IOD_TOL)


@pytest.mark.parametrize("kind", ["poisson", "bursty", "trace"])
def test_deterministic_per_seed(kind: str) -> None:
    kw = dict(rate_rps=2.0, duration_s=1800.0, trace_path=str(AZURE_SAMPLE))
    a = make_arrivals(kind, seed=7, **kw)
    b = make_arrivals(kind, seed=7, **kw)
    c = make_arrivals(kind, seed=8, **kw)
    assert a.size > 100
    np.testing.assert_array_equal(a, b)
    assert a.size != c.size or not np.array_equal(a, c)


def test_zero_rate_and_zero_duration() -> None:
    rng = np.random.default_rng(0)
    assert poisson(0.0, 100.0, rng).size == 0
    assert bursty(0.0, 100.0, rng).size == 0
    assert bursty(5.0, 0.0, rng).size == 0


def test_trace_timestamps_format() -> None:
    expected = np.loadtxt(TIMESTAMPS, delimiter=",", skiprows=1)
    times = load_trace(TIMESTAMPS)
    assert times.size == 20
    np.testing.assert_allclose(times, np.sort(expected))
    np.testing.assert_allclose(load_trace(TIMESTAMPS, time_scale=0.5), np.sort(expected) * 0.5)
    clipped = trace(TIMESTAMPS, 10.0, np.random.default_rng(0))
    np.testing.assert_allclose(clipped, np.sort(expected[expected < 10.0]))


def test_trace_timestamps_unsorted_other_column(tmp_path: Path) -> None:
    p = tmp_path / "ts.csv"
    p.write_text("id,when\na,5.5\nb,1.25\nc,3\n")
    np.testing.assert_allclose(load_trace(p, column="when"), [1.25, 3.0, 5.5])
    with pytest.raises(ValueError, match="unknown trace format"):
        load_trace(p)
    bad = tmp_path / "neg.csv"
    bad.write_text("t_s\n1.0\n-2.0\n")
    with pytest.raises(ValueError, match="t_s"):
        load_trace(bad)


def test_azure_format_counts_per_minute() -> None:
    header, row = AZURE_SAMPLE.read_text().splitlines()[:2]
    counts = np.array([int(c) for c in row.split(",")[4:]])
    assert header.startswith("HashOwner,HashApp,HashFunction,Trigger,1,2,")
    assert counts.size == 30 and counts.max() > 10 * np.median(counts)  # a burst

    times = load_trace(AZURE_SAMPLE)
    check_arrivals(times, 1800.0)
    assert times.size == counts.sum()
    per_minute, _ = np.histogram(times, bins=np.arange(31) * 60.0)
    np.testing.assert_array_equal(per_minute, counts)
    np.testing.assert_array_equal(times, load_trace(AZURE_SAMPLE))  # seeded 0 by default
    other = load_trace(AZURE_SAMPLE, rng=np.random.default_rng(1))
    assert not np.array_equal(times, other)


def test_azure_format_time_scale_and_clip() -> None:
    counts = np.array([int(c) for c in AZURE_SAMPLE.read_text().splitlines()[1].split(",")[4:]])
    fast = load_trace(AZURE_SAMPLE, time_scale=0.1)
    check_arrivals(fast, 180.0)
    per_bin, _ = np.histogram(fast, bins=np.arange(31) * 6.0)
    np.testing.assert_array_equal(per_bin, counts)
    clipped = trace(AZURE_SAMPLE, 600.0, np.random.default_rng(0))
    assert clipped.size == counts[:10].sum()
    via_make = make_arrivals(
        "trace",
        rate_rps=0.0,
        duration_s=60.0,
        seed=0,
        trace_path=str(AZURE_SAMPLE),
        time_scale=0.1,
    )
    assert via_make.size == counts[:10].sum() and via_make[-1] < 60.0


def test_azure_format_without_data_row(tmp_path: Path) -> None:
    p = tmp_path / "empty.csv"
    p.write_text("HashOwner,HashApp,HashFunction,Trigger,1,2\n")
    with pytest.raises(ValueError, match="no data row"):
        load_trace(p)


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="kind"):
        make_arrivals("uniform", rate_rps=1.0, duration_s=10.0, seed=0)
    with pytest.raises(ValueError, match="trace_path"):
        make_arrivals("trace", rate_rps=1.0, duration_s=10.0, seed=0)
    with pytest.raises(ValueError, match="rate_rps"):
        make_arrivals("poisson", rate_rps=-1.0, duration_s=10.0, seed=0)
    with pytest.raises(ValueError, match="duration_s"):
        make_arrivals("bursty", rate_rps=1.0, duration_s=float("nan"), seed=0)
    with pytest.raises(ValueError, match="burst_factor"):
        make_arrivals("bursty", rate_rps=1.0, duration_s=10.0, seed=0, burst_factor=0.0)
    with pytest.raises(ValueError, match="time_scale"):
        load_trace(TIMESTAMPS, time_scale=0.0)


def test_phases_follow_each_phase_rate_and_stop_after_the_last() -> None:
    steps = [(20.0, 2.0), (20.0, 20.0), (10.0, 0.0), (10.0, 5.0)]
    t = make_arrivals("phases", rate_rps=1.0, duration_s=100.0, seed=4, steps=steps)
    assert np.all(np.diff(t) >= 0) and t[-1] < 60.0
    counts = np.histogram(t, bins=[0, 20, 40, 50, 60])[0]
    assert 20 <= counts[0] <= 65 and 320 <= counts[1] <= 480
    assert counts[2] == 0 and 25 <= counts[3] <= 80
    same = make_arrivals("phases", rate_rps=1.0, duration_s=100.0, seed=4, steps=steps)
    assert np.array_equal(t, same)
    cut = make_arrivals("phases", rate_rps=1.0, duration_s=30.0, seed=4, steps=steps)
    assert cut[-1] < 30.0


def test_phases_reject_bad_input_naming_the_field() -> None:
    with pytest.raises(ValueError, match="at least one"):
        make_arrivals("phases", rate_rps=1.0, duration_s=10.0, seed=0)
    with pytest.raises(ValueError, match=r"phases\.1\.rate_rps"):
        make_arrivals("phases", rate_rps=1.0, duration_s=10.0, seed=0, steps=[(1, 1), (1, -1)])
