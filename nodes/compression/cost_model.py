"""MODELLED time and energy of TT compression on an edge processor with a TTD engine.

Everything here is a model, not a measurement: we have neither the TT-Edge processor nor
its engine. Inputs are the FLOPs per SVD phase counted by the ``two_phase`` back-end
(:class:`nodes.compression.svd.SvdStats`) for a real TT-SVD of a real model; outputs are
modelled seconds and joules for

- ``gemm_only``: bidiagonalization (Householder, BLAS-2) on the GEMM accelerator at a
  fraction of its peak, diagonalization (Givens rotations, scalar) on the host core;
- ``engine``: both phases on the TTD engine that shares the GEMM array (TT-Edge).

time = sum_phase flops_phase / throughput_phase; energy = power * time. The paper's own
figures (1.7x faster, 40.2 % less energy, +4 % power; arXiv 2511.13738 abstract) are
carried as :data:`PAPER_REFERENCE` and shown beside, never as our result. Profile
parameters are assumptions documented in ``docs/results/tt_edge.md``; override any of
them by name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

PAPER_REFERENCE = {
    "speedup_x": 1.7,
    "energy_saving_pct": 40.2,
    "power_increase_pct": 4.0,
    "source": "arXiv 2511.13738 (TT-Edge) abstract, ResNet-32 on a RISC-V edge AI processor",
}


@dataclass(frozen=True)
class EngineProfile:
    """Throughputs and powers of one (modelled) device.

    Attributes
    ----------
    name : str
        Catalog name.
    gemm_peak_gflops : float
        Peak of the GEMM accelerator (GFLOP/s); documentation of the baseline.
    baseline_bidiag_gflops : float
        Householder bidiagonalization on the GEMM-only baseline (GFLOP/s).
    baseline_diag_gflops : float
        Givens/QR diagonalization on the baseline's host core (GFLOP/s).
    engine_bidiag_gflops : float
        Bidiagonalization on the TTD engine (GFLOP/s).
    engine_diag_gflops : float
        Diagonalization on the TTD engine (GFLOP/s).
    baseline_power_w : float
        Average power while compressing, GEMM-only (W).
    engine_power_w : float
        Average power while compressing with the engine (W).
    source : str
        Where the numbers come from.
    """

    name: str
    gemm_peak_gflops: float
    baseline_bidiag_gflops: float
    baseline_diag_gflops: float
    engine_bidiag_gflops: float
    engine_diag_gflops: float
    baseline_power_w: float
    engine_power_w: float
    source: str


NUMERIC_FIELDS = tuple(f.name for f in fields(EngineProfile) if f.name not in ("name", "source"))

_ASSUMED = (
    "ASSUMED, not from the paper (which publishes no throughputs): 8x8 MAC array at "
    "400 MHz = 51.2 GFLOP/s peak; Householder (BLAS-2) at 10 % of peak on the array; "
    "Givens rotations on a scalar RV64 core at 1 FLOP/cycle = 0.4 GFLOP/s; engine: "
    "Householder at 25 % of peak with a matrix-vector dataflow on the shared array, "
    "4 rotation lanes x 6 FLOP x 400 MHz / 2 (dependency stalls) = 4.8 GFLOP/s; "
    "0.5 W baseline; engine power +4 % as the paper reports"
)

PROFILES: dict[str, EngineProfile] = {
    "riscv-edge-ttd": EngineProfile(
        name="riscv-edge-ttd",
        gemm_peak_gflops=51.2,
        baseline_bidiag_gflops=5.12,
        baseline_diag_gflops=0.4,
        engine_bidiag_gflops=12.8,
        engine_diag_gflops=4.8,
        baseline_power_w=0.5,
        engine_power_w=0.52,
        source=_ASSUMED,
    ),
}


def get_profile(name: str, overrides: dict[str, float] | None = None) -> EngineProfile:
    """Catalog profile ``name`` with numeric fields replaced by ``overrides``.

    Raises
    ------
    ValueError
        Unknown profile or override name, or a non-positive value.
    """
    if name not in PROFILES:
        raise ValueError(f"engine profile {name!r} unknown; allowed: {sorted(PROFILES)}")
    # dict[str, Any]: the keys are checked against NUMERIC_FIELDS (float fields) below
    changes: dict[str, Any] = dict(overrides or {})
    for key, value in changes.items():
        if key not in NUMERIC_FIELDS:
            raise ValueError(f"engine override {key!r} unknown; allowed: {list(NUMERIC_FIELDS)}")
        if not value > 0:
            raise ValueError(f"engine override {key}={value} must be > 0")
    prof = replace(PROFILES[name], **changes)
    if changes:
        prof = replace(prof, source=prof.source + f"; overridden: {changes}")
    return prof


def modelled_cost(
    bidiag_flops: float, diag_flops: float, profile: EngineProfile
) -> dict[str, float | str]:
    """MODELLED time/energy of GEMM-only vs engine-assisted TT compression.

    Parameters
    ----------
    bidiag_flops : float
        FLOPs of Householder bidiagonalization incl. forming Q, P (gebrd + orgbr).
    diag_flops : float
        FLOPs of the implicit-QR diagonalization (bdsqr).
    profile : EngineProfile
        Device parameters.

    Returns
    -------
    dict
        ``gemm_only_s``, ``engine_s``, ``gemm_only_j``, ``engine_j``, ``speedup_x``,
        ``energy_saving_pct``, per-phase seconds, ``kind = "modelled"``, ``profile``.
    """
    g = 1e9
    base_bi = bidiag_flops / (profile.baseline_bidiag_gflops * g)
    base_di = diag_flops / (profile.baseline_diag_gflops * g)
    eng_bi = bidiag_flops / (profile.engine_bidiag_gflops * g)
    eng_di = diag_flops / (profile.engine_diag_gflops * g)
    base_s = base_bi + base_di
    eng_s = eng_bi + eng_di
    base_j = profile.baseline_power_w * base_s
    eng_j = profile.engine_power_w * eng_s
    return {
        "kind": "modelled",
        "profile": profile.name,
        "bidiag_flops": float(bidiag_flops),
        "diag_flops": float(diag_flops),
        "gemm_only_bidiag_s": base_bi,
        "gemm_only_diag_s": base_di,
        "engine_bidiag_s": eng_bi,
        "engine_diag_s": eng_di,
        "gemm_only_s": base_s,
        "engine_s": eng_s,
        "gemm_only_j": base_j,
        "engine_j": eng_j,
        "speedup_x": base_s / eng_s if eng_s > 0 else float("nan"),
        "energy_saving_pct": 100.0 * (1.0 - eng_j / base_j) if base_j > 0 else float("nan"),
    }


def profile_record(profile: EngineProfile) -> dict[str, object]:
    """The profile's parameters, for the run record."""
    return asdict(profile)
