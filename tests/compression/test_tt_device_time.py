"""TT-Edge on the device: the FL ClientApp's TT-SVD time counts in its device time,
stretched to its profile, with the modelled engine time beside it.

The real ClientApp (nodes/fl/client_app.py) trains and encodes through an in-process
grid (tests/fl/federation.py); two nodes differ only in their profile's speed factor.
"""

from __future__ import annotations

import time

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

from nodes.compression.device_time import TT_METRICS, encode_on_device, lapack_flops
from nodes.compression.svd import SvdStats
from nodes.compression.tt import TTTensor, tt_svd
from nodes.fl import task
from nodes.fl.config import FLSpec
from tests.fl.federation import LoopbackGrid

# Speed factor of the slow node (50x slower than this host). The work that is stretched
# is CPU time, so the slow node waits (CPU / SLOW - wall > 0) until this host's load
# stretches the wall time 1/SLOW-fold; only then do the stretch and its absence look
# alike. At 0.25 a load of 7 on 2 cores (4x wall per CPU second, measured) left no wait
# to see; at 0.05 a load of 25 (a busy loop beside the suites of 6 engineers) did not.
SLOW = 0.02
STRETCH_TOL = 0.25  # relative: device time vs measured time / speed factor
STRETCH_ABS_S = 0.02  # absolute slack of sleep()
#: Seconds the encoding thread spends off the CPU (a sleep, standing in for this host's
#: cores held by other processes): wall time that is not the encode's work.
OFF_CPU_S = 0.4
#: Speed factor of the encode-only check: CPU time / speed stays far below wall / speed.
ENCODE_SPEED = 0.1


def _train_replies(backend: str) -> list[dict[str, float]]:
    spec = FLSpec.model_validate(
        {"rounds": 1, "uplink": {"compression": "tt", "svd_backend": backend, "min_numel": 64}}
    )
    config = {
        0: {"tier": "edge", "speed-factor": "1.0"},
        1: {"tier": "edge", "speed-factor": str(SLOW)},
    }
    grid = LoopbackGrid(spec, 3, 2, config)
    splits = task.get_splits(spec, 3, 2)
    model = task.make_model(spec, splits)
    msgs = [
        Message(
            RecordDict({
                "arrays": ArrayRecord(model.state_dict()),
                "config": ConfigRecord({"server-round": 1, "lr": spec.lr}),
            }),
            node,
            "train",
            group_id="1",
        )
        for node in grid.get_node_ids()
    ]
    walls = []
    for msg in msgs:  # one at a time: each node's measured wall time
        t0 = time.perf_counter()
        grid.push_messages([msg])
        walls.append(time.perf_counter() - t0)
    return [{**r.metrics, "measured-wall-s": w} for r, w in zip(grid.replies, walls, strict=True)]


@pytest.mark.parametrize("backend", ["lapack", "two_phase"])
def test_tt_svd_time_is_stretched_into_the_device_time(backend: str) -> None:
    fast, slow = _train_replies(backend)
    for m in (fast, slow):
        assert m["tt-compressed"] == 1
        assert all(key in m for key, _ in TT_METRICS)
        assert 0 < m["tt-svd-s"] <= m["tt-encode-s"]
        # modelled: the engine beats the GEMM-only baseline (profile riscv-edge-ttd)
        assert 0 < m["tt-engine-modelled-s"] < m["tt-gemm-only-modelled-s"]
    # the slow node really waited: its measured wall time covers its training's and its
    # TT-SVD's CPU time (the work), stretched (the node's own clock, not the formula).
    # CPU bounds CPU: a loaded host stretches the wall time, not the work.
    floor = (slow["train-cpu-s"] + slow["tt-encode-cpu-s"]) / SLOW
    assert slow["measured-wall-s"] >= floor - STRETCH_ABS_S, slow
    assert slow["device-time-s"] >= floor - STRETCH_ABS_S, slow  # reported as device time
    # the encode's own device time is its CPU time stretched, and part of the wall time
    assert slow["tt-device-s"] >= slow["tt-encode-cpu-s"] / SLOW - STRETCH_ABS_S, slow
    assert slow["tt-device-s"] <= (1 + STRETCH_TOL) * slow["measured-wall-s"]
    # a node as fast as this host waits for nothing: its device time is its wall time
    assert fast["tt-device-s"] == pytest.approx(fast["tt-encode-s"], abs=STRETCH_ABS_S), fast
    # the same model and update: the same SVDs, so the same modelled engine time
    assert slow["tt-engine-modelled-s"] == pytest.approx(fast["tt-engine-modelled-s"], rel=0.5)


def test_tt_device_time_stretches_cpu_time_not_wall_time() -> None:
    """The encode's device time is its CPU time stretched, as training's
    (nodes/fl/client_app.py: ``stretch(real_s, ..., cpu_s=thread_time)``): wall time the
    encoding thread spends off the CPU, e.g. while other processes hold this host's
    cores, is not multiplied by the profile's factor. Stretching the wall time instead
    would count OFF_CPU_S / ENCODE_SPEED (4 s) of device time."""
    gen = torch.Generator().manual_seed(0)
    weights = torch.randn(64, 64, 64, generator=gen)

    def encode(stats: SvdStats) -> TTTensor:
        time.sleep(OFF_CPU_S)  # off the CPU: wall time, no work
        out = tt_svd(weights, eps=0.3, backend="lapack", stats=stats)
        busy = time.thread_time() + 0.05  # and some more work on the CPU
        while time.thread_time() < busy:
            pass
        return out

    t0 = time.perf_counter()
    _, m = encode_on_device(encode, "lapack", "riscv-edge-ttd", ENCODE_SPEED)
    waited = time.perf_counter() - t0
    cpu, wall, device = m["tt-encode-cpu-s"], m["tt-encode-s"], m["tt-device-s"]
    assert cpu < wall - OFF_CPU_S + STRETCH_ABS_S, m  # the sleep is wall, not CPU time
    # the device time is the CPU time stretched (never below the wall: no faster device)
    assert device == pytest.approx(max(wall, cpu / ENCODE_SPEED), abs=1e-9), m
    assert device < wall / ENCODE_SPEED - OFF_CPU_S, m  # not the wall time stretched
    assert waited >= device - STRETCH_ABS_S, (waited, m)  # and the node really waited
    assert m["tt-svd-s"] > 0 and m["tt-engine-modelled-s"] > 0, m


def test_lapack_flops_are_golub_reinsch_counts() -> None:
    bi, di = lapack_flops([(10, 4), (4, 10)])
    one_bi = 8 * 10 * 16 - 4 * 64 / 3
    assert bi == pytest.approx(2 * one_bi)
    assert bi + di == pytest.approx(2 * (14 * 10 * 16 + 8 * 64))


def test_unknown_engine_profile_names_the_choices() -> None:
    with pytest.raises(ValueError, match="riscv-edge-ttd"):
        FLSpec.model_validate({"uplink": {"compression": "tt", "engine_profile": "nope"}})
