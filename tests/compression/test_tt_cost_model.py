"""Cost model arithmetic (the figures are MODELLED; here we check the model does its sums)."""

import pytest

from nodes.compression.cost_model import PAPER_REFERENCE, get_profile, modelled_cost


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


def test_default_profile_and_errors():
    p = get_profile("riscv-edge-ttd")
    assert p.engine_power_w == pytest.approx(p.baseline_power_w * 1.04)  # paper: +4 % power
    assert PAPER_REFERENCE["speedup_x"] == 1.7
    with pytest.raises(ValueError, match="allowed"):
        get_profile("nope")
    with pytest.raises(ValueError, match="unknown"):
        get_profile("riscv-edge-ttd", {"nope": 1.0})
    with pytest.raises(ValueError, match="> 0"):
        get_profile("riscv-edge-ttd", {"engine_power_w": 0.0})
