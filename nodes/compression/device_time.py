"""TT-SVD time on the device: measured, stretched to the node's profile, and MODELLED on
the TT-Edge engine beside it (the FL uplink's ``compression: tt``).

:func:`encode_on_device` runs the codec with the SVD back-end the spec names
(``lapack`` or ``two_phase``), measures it, waits so that it takes the device's time
(:func:`nodes.device_control.stretch`, like local training) and returns the reply
metrics:

- ``tt-encode-s``: measured wall time of the whole encode on this host, s;
- ``tt-encode-cpu-s``: measured CPU time of the encoding thread, s: the work that is
  stretched (like local training's, so other processes contending for this host's
  cores do not enter the device time);
- ``tt-svd-s``: measured wall time of its SVDs, s;
- ``tt-device-s``: the encode's emulated device time (stretched), s;
- ``tt-engine-modelled-s`` / ``tt-gemm-only-modelled-s``: MODELLED time of the same
  SVDs on the TT-Edge engine / the GEMM-only baseline of the engine profile
  (:mod:`nodes.compression.cost_model`). With ``two_phase`` the FLOPs per phase are
  counted; with ``lapack`` (whose phases are internal) they are the Golub-Reinsch
  counts of each decomposed shape (Golub & Van Loan, Matrix Computations, 4th ed.,
  Fig. 8.6.1: bidiagonalisation with forming U1 and V ``8mn^2 - 4n^3/3`` of the
  ``14mn^2 + 8n^3`` total; the rest is diagonalisation).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from nodes.compression.cost_model import get_profile, modelled_cost
from nodes.compression.svd import SvdStats
from nodes.device_control import stretch

_T = TypeVar("_T")

__all__ = ["TT_METRICS", "encode_on_device", "lapack_flops", "modelled_engine"]

#: reply metric key -> telemetry metric name (recorded for every train reply with it).
TT_METRICS = (
    ("tt-encode-s", "tt_encode_s"),
    ("tt-encode-cpu-s", "tt_encode_cpu_s"),
    ("tt-svd-s", "tt_svd_s"),
    ("tt-device-s", "tt_device_s"),
    ("tt-engine-modelled-s", "tt_engine_modelled_s"),
    ("tt-gemm-only-modelled-s", "tt_gemm_only_modelled_s"),
)


def lapack_flops(shapes: list[tuple[int, int]]) -> tuple[float, float]:
    """Golub-Reinsch FLOPs (bidiagonalisation, diagonalisation) of thin SVDs of
    ``shapes`` (m, n), m >= n after transposing."""
    bi = di = 0.0
    for a, b in shapes:
        m, n = max(a, b), min(a, b)
        total = 14.0 * m * n * n + 8.0 * n**3
        bidiag = 8.0 * m * n * n - 4.0 * n**3 / 3.0
        bi += bidiag
        di += total - bidiag
    return bi, di


def modelled_engine(stats: SvdStats, backend: str, profile: str) -> dict[str, float | str]:
    """MODELLED engine and GEMM-only seconds of the SVDs in ``stats``."""
    if backend == "two_phase":
        paper = stats.by_paper_phase()
        bi, di = float(paper["bidiagonalization"].flops), float(paper["diagonalization"].flops)
    else:
        bi, di = lapack_flops(stats.shapes)
    return modelled_cost(bi, di, get_profile(profile))


def encode_on_device(
    encode: Callable[[SvdStats], _T],
    backend: str,
    profile: str,
    speed_factor: float,
    slowdown: float = 1.0,
) -> tuple[_T, dict[str, float]]:
    """Run ``encode(stats)`` as the device would: measured, stretched, modelled.

    Parameters
    ----------
    encode : callable
        The codec call; it passes ``stats`` to the SVDs (``tt_svd(..., stats=stats)``).
    backend : {"lapack", "gram", "two_phase"}
        The SVD back-end ``encode`` uses.
    profile : str
        Engine profile of the modelled times (``cost_model.PROFILES``).
    speed_factor, slowdown : float
        The node's device speed relative to this host and its straggler factor.

    Returns
    -------
    encoded
        What ``encode`` returned.
    metrics : dict[str, float]
        The :data:`TT_METRICS` keys.
    """
    stats = SvdStats()
    t0, c0 = time.perf_counter(), time.thread_time()
    encoded = encode(stats)
    real_s, cpu_s = time.perf_counter() - t0, time.thread_time() - c0
    device_s = stretch(real_s, speed_factor, slowdown, cpu_s=cpu_s)
    cost = modelled_engine(stats, backend, profile)
    return encoded, {
        "tt-encode-s": real_s,
        "tt-encode-cpu-s": cpu_s,
        "tt-svd-s": stats.seconds,
        "tt-device-s": device_s,
        "tt-engine-modelled-s": float(cost["engine_s"]),
        "tt-gemm-only-modelled-s": float(cost["gemm_only_s"]),
    }
