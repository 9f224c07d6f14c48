"""Cost model arithmetic (the figures are MODELLED; here we check the model does its sums)."""

import pytest
import torch

from nodes.compression.cost_model import get_profile, modelled_cost
from nodes.compression.svd import SvdStats, svd


def test_arithmetic_by_hand():
    p = get_profile("riscv-edge-ttd", {
        "baseline_bidiag_gflops": 2.0, "baseline_diag_gflops": 1.0,
        "engine_bidiag_gflops": 4.0, "engine_diag_gflops": 4.0,
        "baseline_power_w": 1.0, "engine_power_w": 1.5,
    })
    c = modelled_cost(4e9, 2e9, p)
    assert c["kind"] == "modelled"
    assert c["gemm_only_s"] == pytest.approx(2.0 + 2.0)
    assert c["engine_s"] == pytest.approx(1.0 + 0.5)
    assert c["speedup_x"] == pytest.approx(4.0 / 1.5)
    assert c["gemm_only_j"] == pytest.approx(4.0)
    assert c["engine_j"] == pytest.approx(2.25)
    assert c["energy_saving_pct"] == pytest.approx(100 * (1 - 2.25 / 4.0))
    assert "overridden" in p.source


def test_default_profile_on_flops_counted_for_a_real_svd():
    """Relations that follow from the model's definition (time = FLOPs / throughput per
    phase, energy = power x time), on the FLOPs counted for a real two-phase SVD."""
    torch.manual_seed(0)
    stats = SvdStats()
    svd(torch.randn(64, 48, dtype=torch.float64), "two_phase", stats)
    bidiag = stats.phases["gebrd"].flops + stats.phases["orgbr"].flops
    diag = stats.phases["bdsqr"].flops
    p = get_profile("riscv-edge-ttd")
    c = modelled_cost(bidiag, diag, p)
    per_phase = (
        p.engine_bidiag_gflops / p.baseline_bidiag_gflops,
        p.engine_diag_gflops / p.baseline_diag_gflops,
    )
    # one phase alone is sped up by exactly its throughput ratio ...
    assert modelled_cost(bidiag, 0, p)["speedup_x"] == pytest.approx(per_phase[0])
    assert modelled_cost(0, diag, p)["speedup_x"] == pytest.approx(per_phase[1])
    # ... and both together by a time-weighted mean of the two, strictly between them
    base_s = bidiag / (p.baseline_bidiag_gflops * 1e9) + diag / (p.baseline_diag_gflops * 1e9)
    assert c["gemm_only_s"] == pytest.approx(base_s)
    assert min(per_phase) < c["speedup_x"] < max(per_phase)
    # the energy saving follows from the speedup and the power ratio alone
    power_ratio = p.engine_power_w / p.baseline_power_w
    assert c["energy_saving_pct"] == pytest.approx(100 * (1 - power_ratio / c["speedup_x"]))


def test_profile_errors():
    with pytest.raises(ValueError, match="allowed"):
        get_profile("nope")
    with pytest.raises(ValueError, match="unknown"):
        get_profile("riscv-edge-ttd", {"nope": 1.0})
    with pytest.raises(ValueError, match="> 0"):
        get_profile("riscv-edge-ttd", {"engine_power_w": 0.0})
