"""The built-in functions cover Gaia's four execution modes, and a rising-then-falling
load drives the runtime through a promotion and a demotion (pure, clock-free)."""

from __future__ import annotations

import numpy as np

from nodes.functions.identifier import MODES, identify_file
from nodes.functions.workloads import BUILTIN, module_path
from testbed.functions.arrivals import make_arrivals
from testbed.functions.runtime import DynamicRuntime, RuntimeThresholds

# Gaia's defaults at the experiment's time scale (1/30): evaluate every 2 s, 60-s windows
TH = RuntimeThresholds(upper_bound_ms=40.0, gap_ms=8.0, low_rate_upper_bound_ms=80.0,
                       lock_gpu_ms=4000.0).scaled(1 / 30)  # fmt: skip
SERVICE_MS = {"cpu": 20.0, "gpu": 3.0}  # one worker per backend, FIFO
RISE_AND_FALL = [(20.0, 5.0), (30.0, 25.0), (10.0, 5.0)]  # then no request (peak load 0.5)


def test_the_builtin_functions_cover_all_four_modes() -> None:
    modes = {name: identify_file(module_path(name)).mode for name in BUILTIN}
    assert set(modes.values()) == set(MODES)
    assert modes["idle"] == "cpu" and modes["matmul"] == "cpu_preferred"
    assert modes["mlp"] == "gpu_preferred" and modes["conv"] == "gpu"


def drive(rt: DynamicRuntime, arrivals: np.ndarray, until_s: float) -> list[str]:
    """Serve ``arrivals`` on the runtime's current backend (one FIFO worker each), feed
    the latencies, evaluate every ``eval_interval_s``; return the modes after each switch."""
    free = {"cpu": 0.0, "gpu": 0.0}
    done: list[tuple[float, float, str]] = []  # (completion, latency ms, backend)
    i, modes = 0, [rt.mode]
    for now in np.arange(TH.eval_interval_s, until_s, TH.eval_interval_s):
        while i < len(arrivals) and arrivals[i] <= now:
            b, t = rt.backend, float(arrivals[i])
            free[b] = max(free[b], t) + SERVICE_MS[b] / 1e3
            done.append((free[b], (free[b] - t) * 1e3, b))
            i += 1
        for t_done, ms, b in [d for d in done if d[0] <= now]:
            if b == rt.backend:
                rt.observe(t_done, ms)
        done = [d for d in done if d[0] > now]
        d = rt.evaluate(float(now))
        if d is not None and d.applied:
            modes.append(d.new)
    return modes


def test_rising_load_promotes_and_falling_load_demotes() -> None:
    arrivals = make_arrivals("phases", rate_rps=1.0, duration_s=140.0, seed=0,
                             steps=RISE_AND_FALL)  # fmt: skip
    rt = DynamicRuntime("cpu_preferred", TH)
    modes = drive(rt, arrivals, 140.0)
    assert modes == ["cpu_preferred", "gpu_preferred", "cpu_preferred"]
    up, down = [d for d in rt.decisions if d.applied]
    assert up.reason.startswith("case 2") and 20.0 <= up.t <= 50.0  # during the peak
    assert down.reason.startswith("case 4.2")  # the rate fell below Gaia's low-rate bound
    assert down.t >= max(up.t, float(arrivals[-1])) + TH.window_s - TH.eval_interval_s
    assert rt.cpu_latency_ms is not None and rt.cpu_latency_ms < TH.low_rate_upper_bound_ms


def test_the_same_load_without_the_fall_keeps_the_gpu() -> None:
    steady = [*RISE_AND_FALL[:2], (90.0, 25.0)]
    arrivals = make_arrivals("phases", rate_rps=1.0, duration_s=140.0, seed=0, steps=steady)
    rt = DynamicRuntime("cpu_preferred", TH)
    assert drive(rt, arrivals, 140.0) == ["cpu_preferred", "gpu_preferred"]


def test_a_gpu_preferred_function_is_demoted_when_its_load_stops() -> None:
    arrivals = make_arrivals("phases", rate_rps=1.0, duration_s=140.0, seed=1,
                             steps=[(40.0, 4.0)])  # fmt: skip
    rt = DynamicRuntime("gpu_preferred", TH)
    assert drive(rt, arrivals, 140.0) == ["gpu_preferred", "cpu_preferred"]
    [down] = rt.decisions
    assert down.reason.startswith("case 4.2") and down.t >= float(arrivals[-1]) + 58.0
