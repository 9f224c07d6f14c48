"""Gaia's Dynamic Function Runtime: decision cases 0-4 on synthetic latency streams."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from testbed.functions.runtime import Decision, DynamicRuntime, RuntimeThresholds

TH = RuntimeThresholds()
STEP = TH.eval_interval_s


def feed(rt: DynamicRuntime, t0: float, t1: float, rps: float, latency_ms: float) -> None:
    """Observe evenly spaced requests in ``(t0, t1]`` at ``rps``, all with ``latency_ms``."""
    n = int(round((t1 - t0) * rps))
    for k in range(1, n + 1):
        rt.observe(t0 + k * (t1 - t0) / n, latency_ms)


def simulate(
    rt: DynamicRuntime,
    t_end: float,
    rps_of: Callable[[float], float],
    latency_of: Callable[[str, float], float],
    t_start: float = 0.0,
    gpu_available: bool = True,
) -> list[Decision]:
    """Drive ``rt``: per evaluation interval, requests at ``rps_of(t)`` with a latency that
    depends on the backend serving them, then ``evaluate``. Returns the applied decisions."""
    t = t_start
    while t < t_end:
        rps = rps_of(t)
        n = int(round(STEP * rps))
        for k in range(1, n + 1):
            tk = t + k * STEP / n
            rt.observe(tk, latency_of(rt.backend, tk))
        t += STEP
        rt.evaluate(t, gpu_available)
    return [d for d in rt.decisions if d.applied]


def const(cpu_ms: float, gpu_ms: float) -> Callable[[str, float], float]:
    return lambda backend, t: cpu_ms if backend == "cpu" else gpu_ms


# ---------------------------------------------------------------- case 2: promotion


def test_promote_when_cpu_misses_bound_and_gpu_unknown() -> None:
    rt = DynamicRuntime("cpu_preferred", TH)
    feed(rt, 0, 60, 1.0, 1500.0)
    d = rt.evaluate(60.0)
    assert d is not None and d.applied
    assert (d.old, d.new) == ("cpu_preferred", "gpu_preferred")
    assert d.reason == "case 2: p95 1500 ms > bound 1000 ms and GPU (none yet) + gap <= p95"
    assert d.p95_ms == pytest.approx(1500.0) and d.rate_rps == pytest.approx(1.0)
    assert rt.mode == "gpu_preferred" and rt.backend == "gpu"
    assert rt.cpu_latency_ms == pytest.approx(1500.0) and rt.gpu_latency_ms is None
    assert rt.last_switch_t == 60.0
    # a new revision: the CPU samples are gone
    assert rt.p95_ms(60.0, TH.long_window_s) is None
    assert rt.decisions == [d]


def test_no_promotion_below_bound() -> None:
    rt = DynamicRuntime("cpu_preferred", TH)
    assert simulate(rt, 3 * 3600, lambda t: 1.0, const(950.0, 100.0)) == []
    assert rt.mode == "cpu_preferred" and rt.decisions == []


def test_no_promotion_when_rate_too_low_to_decide() -> None:
    rt = DynamicRuntime("cpu_preferred", TH)
    feed(rt, 0, 60, 0.1, 5000.0)  # 6 requests/min = 0.1 rps < 0.2
    assert rt.rate_rps(60.0, TH.rate_window_s) == pytest.approx(0.1)
    assert rt.evaluate(60.0) is None
    feed(rt, 60, 120, 0.25, 5000.0)  # 15 requests/min = 0.25 rps
    d = rt.evaluate(120.0)
    assert d is not None and d.reason.startswith("case 2") and rt.mode == "gpu_preferred"


def test_no_promotion_when_known_gpu_not_faster_by_gap() -> None:
    rt = DynamicRuntime("cpu_preferred", TH)
    rt.gpu_latency_ms = 1300.0
    feed(rt, 0, 60, 1.0, 1400.0)  # 1300 + 200 > 1400
    assert rt.evaluate(60.0) is None
    rt2 = DynamicRuntime("cpu_preferred", TH)
    rt2.gpu_latency_ms = 1300.0
    feed(rt2, 0, 60, 1.0, 1500.0)  # 1300 + 200 <= 1500 (Gaia's <=)
    d = rt2.evaluate(60.0)
    assert d is not None and d.reason.startswith("case 2") and "GPU (1300 ms)" in d.reason


# ---------------------------------------------------------------- case 3: recent change


def test_case_3_1_demote_after_cold_start_wait_when_gpu_not_faster() -> None:
    rt = DynamicRuntime("cpu_preferred", TH)
    feed(rt, 0, 60, 1.0, 1200.0)
    assert rt.evaluate(60.0).new == "gpu_preferred"
    feed(rt, 60, 120, 1.0, 1100.0)  # GPU barely faster: 1100 + 200 >= 1200
    assert rt.evaluate(120.0) is None  # 60 s since the switch: still in the cold-start wait
    assert rt.mode == "gpu_preferred"
    feed(rt, 120, 180, 1.0, 1100.0)
    d = rt.evaluate(180.0)  # 120 s since the switch
    assert d is not None and d.reason.startswith("case 3.1")
    assert (d.old, d.new) == ("gpu_preferred", "cpu_preferred")
    assert rt.gpu_latency_ms == pytest.approx(1100.0) and rt.cpu_latency_ms == pytest.approx(1200)
    # back on the CPU at 1200 ms: above the bound, but GPU 1100 + gap 200 > 1200: stays
    applied = simulate(rt, 4 * 3600, lambda t: 1.0, const(1200.0, 1100.0), t_start=180.0)
    assert applied[-1] == d and len(applied) == 2


def test_gpu_much_faster_is_kept_at_steady_load() -> None:
    rt = DynamicRuntime("cpu_preferred", TH)
    applied = simulate(rt, 6 * 3600, lambda t: 1.0, const(1500.0, 300.0))
    assert [d.reason[:6] for d in applied] == ["case 2"]
    assert rt.mode == "gpu_preferred"


def _demoted_by_low_rate(gpu_ms: float = 400.0) -> DynamicRuntime:
    """A fresh gpu_preferred function that serves one request (at 60 s) and is then demoted by
    case 4.2 (it never switched, so the recent-update window does not hold case 4 back)."""
    rt = DynamicRuntime("gpu_preferred", TH)
    applied = simulate(rt, 600.0, lambda t: 1 / 60 if t == 0 else 0.0, const(0, gpu_ms))
    assert len(applied) == 1 and applied[0].reason.startswith("case 4.2"), applied
    assert rt.gpu_latency_ms == pytest.approx(gpu_ms) and rt.cpu_latency_ms is None
    return rt


def test_case_3_2_promote_back_when_gpu_significantly_faster() -> None:
    rt = _demoted_by_low_rate(gpu_ms=400.0)
    t0 = rt.last_switch_t
    assert t0 is not None
    # CPU at 700 ms: within the bound (no case 2), but 700 - 200 >= 400
    applied = simulate(rt, t0 + 600, lambda t: 1.0, const(700.0, 400.0), t_start=t0)
    d = applied[-1]
    assert d.reason.startswith("case 3.2") and d.new == "gpu_preferred"
    assert d.t == t0 + TH.cold_start_wait_s  # not earlier: cold-start wait
    assert rt.cpu_latency_ms == pytest.approx(700.0)


def test_case_3_2_only_within_recent_update_window() -> None:
    rt = _demoted_by_low_rate(gpu_ms=400.0)
    t0 = rt.last_switch_t
    assert t0 is not None
    # no traffic until the recent-update window is over, then CPU 700 ms: 3.2 no longer applies
    applied = simulate(
        rt,
        t0 + 3 * 3600,
        lambda t: 1.0 if t >= t0 + TH.window_s else 0.0,
        const(700.0, 400.0),
        t_start=t0,
    )
    assert len(applied) == 1 and rt.mode == "cpu_preferred"


# ---------------------------------------------------------------- case 4: low-rate demotion


def test_case_4_2_low_rate_demotion_only_after_recent_update_window() -> None:
    rt = DynamicRuntime("cpu_preferred", TH)
    # 1 rps for 6 minutes (CPU 1500 ms, then GPU 300 ms), then silence
    applied = simulate(rt, 3 * 3600, lambda t: 1.0 if t < 360 else 0.0, const(1500.0, 300.0))
    assert [d.reason[:8] for d in applied] == ["case 2: ", "case 4.2"]
    promote, demote = applied
    assert promote.t == 60.0
    # GPU requests end at 360 s and leave the 30-min rate window at 2160 s
    assert demote.t == 360.0 + TH.low_rate_window_s
    assert demote.rate_rps == 0.0
    assert demote.t - promote.t >= TH.window_s
    assert rt.mode == "cpu_preferred" and rt.gpu_latency_ms == pytest.approx(300.0)


def test_no_low_rate_demotion_while_rate_above_threshold() -> None:
    rt = DynamicRuntime("gpu_preferred", TH)
    # 0.0125 rps on average (one request every 80 s): above 0.01 but too low for cases 1-3
    applied = simulate(rt, 4 * 3600, lambda t: 1 / 60 if (t // 60) % 4 != 3 else 0.0, const(0, 300))
    assert applied == []


def test_no_low_rate_demotion_when_cpu_too_slow() -> None:
    rt = DynamicRuntime("cpu_preferred", TH)
    applied = simulate(rt, 4 * 3600, lambda t: 1.0 if t < 360 else 0.0, const(2500.0, 300.0))
    assert [d.reason[:6] for d in applied] == ["case 2"]  # CPU 2500 >= 2000: stays on the GPU


def test_case_4_1_rate_not_available_after_recent_update_window() -> None:
    rt = DynamicRuntime("cpu_preferred", TH)
    feed(rt, 0, 60, 1.0, 1500.0)
    assert rt.evaluate(60.0).new == "gpu_preferred"
    # the new GPU revision never serves a request: no request rate at all
    for t in np.arange(120.0, 60.0 + TH.window_s, STEP):
        assert rt.evaluate(float(t)) is None, t
    assert rt.rate_rps(1800.0, TH.low_rate_window_s) is None
    d = rt.evaluate(60.0 + TH.window_s)
    assert d is not None and d.new == "cpu_preferred"
    assert d.reason == "case 4.1: request rate not available and CPU 1500 ms < 2000 ms"
    assert rt.gpu_latency_ms is None  # nothing to record


def test_case_4_1_fresh_gpu_preferred_without_traffic_demoted_at_once() -> None:
    rt = DynamicRuntime("gpu_preferred", TH)
    d = rt.evaluate(60.0, gpu_available=False)  # a demotion needs no free GPU
    assert d is not None and d.applied
    assert d.reason == "case 4.1: request rate not available and CPU latency not available"


def test_young_revision_rate_uses_its_age() -> None:
    rt = DynamicRuntime("gpu_preferred", TH, now=1000.0)
    feed(rt, 1000, 1060, 0.5, 300.0)
    assert rt.rate_rps(1060.0, TH.low_rate_window_s) == pytest.approx(0.5)
    assert rt.evaluate(1060.0) is None  # 0.5 rps, not "low rate"
    assert rt.rate_rps(1000.5, 60.0) is None  # nothing served yet
    rt.observe(999.0, 1.0)  # before the revision started: ignored
    assert rt.p95_ms(1060.0, 1e9) == pytest.approx(300.0)


# ---------------------------------------------------------------- case 0, pinned modes, GPU


def test_case_0_lock_to_gpu() -> None:
    rt = _demoted_by_low_rate(gpu_ms=500.0)
    t0 = rt.last_switch_t
    assert t0 is not None
    # the CPU times out (top histogram bucket): case 2 promotes, then case 0 locks
    applied = simulate(rt, t0 + 3600, lambda t: 1.0, const(120000.0, 500.0), t_start=t0)
    assert [(d.reason[:6], d.new) for d in applied[1:]] == [
        ("case 2", "gpu_preferred"),
        ("case 0", "gpu"),
    ]
    assert applied[2].t == applied[1].t + STEP
    assert rt.mode == "gpu" and rt.backend == "gpu"
    # final: nothing moves it any more, not even silence
    assert simulate(rt, t0 + 5 * 3600, lambda t: 0.0, const(0, 500.0), t_start=t0 + 3600) == (
        applied
    )


@pytest.mark.parametrize(
    ("cpu", "gpu", "locks"),
    [(150000.0, 800.0, True), (100000.0, 99800.0, False), (99999.0, 10.0, False)],
)
def test_case_0_boundaries(cpu: float, gpu: float, locks: bool) -> None:
    rt = DynamicRuntime("cpu_preferred", TH)
    rt.cpu_latency_ms, rt.gpu_latency_ms = cpu, gpu
    d = rt.evaluate(60.0)
    assert (d is not None and d.new == "gpu") == locks


def test_case_0_from_cpu_blocked_without_free_gpu() -> None:
    rt = DynamicRuntime("cpu_preferred", TH)
    rt.cpu_latency_ms, rt.gpu_latency_ms = 150000.0, 800.0
    d = rt.evaluate(60.0, gpu_available=False)
    assert d is not None and not d.applied and rt.mode == "cpu_preferred"


@pytest.mark.parametrize("mode", ["cpu", "gpu"])
def test_pinned_modes_never_move(mode: str) -> None:
    rt = DynamicRuntime(mode, TH)
    rt.cpu_latency_ms, rt.gpu_latency_ms = 200000.0, 100.0
    applied = simulate(rt, 3 * 3600, lambda t: 1.0 if t < 600 else 0.0, const(5000.0, 5000.0))
    assert applied == [] and rt.decisions == [] and rt.mode == mode


def test_blocked_promotion_without_free_gpu() -> None:
    rt = DynamicRuntime("cpu_preferred", TH)
    feed(rt, 0, 60, 1.0, 1500.0)
    d = rt.evaluate(60.0, gpu_available=False)
    assert d is not None and not d.applied
    assert d.new == d.old == "cpu_preferred"
    assert d.reason.startswith("case 2") and d.reason.endswith("blocked: no GPU free")
    assert rt.mode == "cpu_preferred" and rt.last_switch_t is None
    assert rt.cpu_latency_ms is None and rt.p95_ms(60.0, TH.window_s) == pytest.approx(1500.0)
    feed(rt, 60, 120, 1.0, 1500.0)
    d2 = rt.evaluate(120.0, gpu_available=True)
    assert d2 is not None and d2.applied and rt.mode == "gpu_preferred"
    assert rt.decisions == [d, d2]


# ---------------------------------------------------------------- thresholds, windows


def test_scaled_multiplies_only_durations() -> None:
    s = TH.scaled(0.1)
    assert s.eval_interval_s == pytest.approx(6.0)
    assert s.window_s == pytest.approx(180.0)
    assert s.long_window_s == pytest.approx(3000.0)
    assert s.rate_window_s == pytest.approx(6.0)
    assert s.low_rate_window_s == pytest.approx(180.0)
    assert s.cold_start_wait_s == pytest.approx(12.0)
    for name in ("upper_bound_ms", "low_rate_upper_bound_ms", "gap_ms", "lock_gpu_ms"):
        assert getattr(s, name) == getattr(TH, name)
    assert (s.low_rate_rps, s.too_low_rps) == (TH.low_rate_rps, TH.too_low_rps)
    assert TH.window_s == 1800.0  # frozen original untouched
    with pytest.raises(ValueError, match="time_scale"):
        TH.scaled(0.0)


def test_scaled_thresholds_drive_a_faster_runtime() -> None:
    s = TH.scaled(0.1)
    rt = DynamicRuntime("cpu_preferred", s)
    feed(rt, 0, 6, 1.0, 1200.0)
    assert rt.evaluate(6.0).new == "gpu_preferred"
    feed(rt, 6, 12, 1.0, 1100.0)
    assert rt.evaluate(12.0) is None  # 6 s < 12 s cold-start wait
    feed(rt, 12, 18, 1.0, 1100.0)
    d = rt.evaluate(18.0)
    assert d is not None and d.reason.startswith("case 3.1")


def test_p95_and_rate_windows() -> None:
    rt = DynamicRuntime("cpu", TH)
    for i in range(100):
        rt.observe(float(i + 1), float(i + 1))  # latency == time, 1..100
    assert rt.p95_ms(100.0, 1e9) == pytest.approx(np.percentile(np.arange(1, 101), 95))
    assert rt.p95_ms(100.0, 10.0) == pytest.approx(np.percentile(np.arange(91, 101), 95))
    assert rt.rate_rps(100.0, 10.0) == pytest.approx(1.0)
    assert rt.rate_rps(100.0, 1000.0) == pytest.approx(1.0)  # over the revision's 100 s age
    assert rt.rate_rps(500.0, 60.0) == 0.0  # requests served before, none in the window
    rt.observe(50.5, 7.0)  # out of order is kept sorted
    assert rt.p95_ms(51.0, 1.0) == pytest.approx(np.percentile([7.0, 51.0], 95))


def test_samples_are_bounded_by_longest_window() -> None:
    th = RuntimeThresholds(long_window_s=100.0, window_s=50.0, low_rate_window_s=50.0)
    rt = DynamicRuntime("cpu", th)
    for i in range(10000):
        rt.observe(float(i), 1.0)
    assert len(rt._samples) <= 101
    assert rt.rate_rps(9999.0, 100.0) == pytest.approx(1.0)


def test_bad_mode_rejected() -> None:
    with pytest.raises(ValueError, match="mode"):
        DynamicRuntime("tpu_preferred", TH)


# ---------------------------------------------------------------- hysteresis


def test_latency_oscillating_around_bound_does_not_flap() -> None:
    """CPU p95 swings 800 <-> 1200 ms around the 1000 ms bound every 10 min, the GPU gives
    ~1100 ms: Gaia tries the GPU once, finds it not faster by the gap and stays on the CPU."""
    rng = np.random.default_rng(1)

    def latency(backend: str, t: float) -> float:
        base = (1200.0 if (t // 600) % 2 else 800.0) if backend == "cpu" else 1100.0
        return base + float(rng.normal(0.0, 20.0))

    rt = DynamicRuntime("cpu_preferred", TH)
    applied = simulate(rt, 12 * 3600, lambda t: 1.0, latency)
    assert [d.reason[:8] for d in applied] == ["case 2: ", "case 3.1"]
    assert applied[1].t - applied[0].t == TH.cold_start_wait_s
    assert rt.mode == "cpu_preferred"


def test_on_off_load_switches_no_faster_than_windows_allow() -> None:
    """20 min of traffic every hour with a much faster GPU: promoted in each busy period and
    demoted for low rate only once a full rate window without requests has passed."""
    rt = DynamicRuntime("cpu_preferred", TH)
    hours = 8
    applied = simulate(
        rt, hours * 3600, lambda t: 1.0 if t % 3600 < 1200 else 0.0, const(1500.0, 300.0)
    )
    assert len(applied) <= 2 * hours
    assert len(applied) >= 2 * (hours - 1)  # it does follow the load
    for prev, d in zip(applied, applied[1:], strict=False):
        if d.new == "cpu_preferred":  # a low-rate demotion
            assert d.reason.startswith("case 4.2")
            assert d.t - prev.t >= TH.window_s
            assert d.t % 3600 == pytest.approx(1200.0 + TH.low_rate_window_s)
