"""Channel layer and semantic blocks: shapes, power normalisation, gradients, LMMSE."""

from __future__ import annotations

import pytest
import torch

from radio.channel import MIMOChannel, block_res, snr_db_to_no
from radio.semantic import SemanticMuxSystem, normalize_power

# Named tolerances
POWER_TOL = 1e-4  # relative error of unit average power
CHANNEL_ENERGY_TOL = 0.05  # Sionna normalises each block to unit energy per antenna pair
HIGH_SNR_MSE = 0.01  # LMMSE symbol MSE at 40 dB on a well-conditioned flat channel
CORR_TOL = 0.05  # empirical correlation over 4,096 x 4 draws


@pytest.mark.parametrize("model", ["cdl", "tdl", "flat"])
def test_generate_shapes_and_energy(rt, model):
    ch = MIMOChannel(model, "C", 28e9, num_tx_antennas=4, num_rx_antennas=4)
    h = ch.generate(64, 2)
    assert h.shape == (64, 4, 4, 2, 12)
    assert h.dtype == torch.complex64
    assert h.abs().square().mean().item() == pytest.approx(1.0, rel=CHANNEL_ENERGY_TOL)
    assert block_res(h, 3, 10).shape == (64, 4, 4, 10)


def test_flat_kronecker_correlation(rt):
    """Flat fast path with exponential Kronecker correlation: adjacent antennas ~ rho."""
    rho = 0.8
    h = MIMOChannel("flat", flat_correlation=rho).generate(4096, 1)[..., 0, 0]  # [B, M, N]
    tx = (h[:, :, 0] * h[:, :, 1].conj()).mean().abs().item()
    rx = (h[:, 0, :] * h[:, 1, :].conj()).mean().abs().item()
    assert tx == pytest.approx(rho, abs=CORR_TOL) and rx == pytest.approx(rho, abs=CORR_TOL)
    # constant over the block (flat in time and frequency)
    hb = MIMOChannel("flat").generate(8, 3)
    assert torch.equal(hb[..., 0, 0], hb[..., 2, 11])


def test_cdl_needs_even_antennas(rt):
    with pytest.raises(ValueError, match="num_tx_antennas"):
        MIMOChannel("cdl", num_tx_antennas=3)
    with pytest.raises(ValueError, match="model"):
        MIMOChannel("awgn")


def test_lmmse_recovers_symbols_at_high_snr(rt):
    ch = MIMOChannel("flat")
    h = ch.generate(256, 1)
    g = rt.generator()
    x = torch.randn(256, 2, 8, dtype=torch.complex64, generator=g)
    x_hat, no_eff = ch(x, block_res(h, 0, 8), snr_db_to_no(torch.tensor(40.0)))
    assert x_hat.shape == x.shape and no_eff.shape == x.shape
    assert (x_hat - x).abs().square().mean().item() < HIGH_SNR_MSE
    # and the noise variance estimate follows the SNR
    _, no_low = ch(x, block_res(h, 0, 8), snr_db_to_no(torch.tensor(0.0)))
    assert no_low.mean() > 100 * no_eff.mean()


def test_power_normalisation(rt):
    x = torch.randn(16, 4, 8, dtype=torch.complex64) * 7.0
    p = normalize_power(x).abs().square().mean(dim=(1, 2))
    assert torch.allclose(p, torch.ones(16), rtol=POWER_TOL)


def _mux(ch, k=3, vib=True):
    return SemanticMuxSystem([64] * k, [10, 2, 3][:k], 16, 32, 4, 8, vib, ch)


def test_mux_shapes_power_and_gradients_through_cdl(rt):
    ch = MIMOChannel("cdl")
    sys_ = _mux(ch)
    g = rt.generator()
    xs = [torch.randn(32, 64, generator=g) for _ in range(3)]
    sym, extra = sys_.transmit(xs)
    assert sym.shape == (32, 4, 8) and sym.is_complex()
    # one block for all K tasks: unit average power per symbol, per inference
    p = sym.abs().square().mean(dim=(1, 2))
    assert torch.allclose(p, torch.ones(32), rtol=POWER_TOL)
    assert extra["kl"].shape == (32,)
    h = ch.generate(32, 1)
    logits, _ = sys_(xs, h, snr_db_to_no(torch.full((32,), 10.0)))
    assert [tuple(lg.shape) for lg in logits] == [(32, 10), (32, 2), (32, 3)]
    # gradients of the task losses reach every encoder through Sionna's channel + LMMSE
    loss = sum(lg.logsumexp(-1).mean() for lg in logits)
    loss.backward()
    for enc in sys_.encoders:
        grad = enc.net[0].weight.grad
        assert grad is not None and grad.abs().sum() > 0
    assert sys_.mux.bindings.grad.abs().sum() > 0


def test_gradient_flows_only_through_channel_input(rt):
    """The received block depends differentiably on the transmitted one."""
    ch = MIMOChannel("cdl")
    h = block_res(ch.generate(8, 1), 0, 8)
    x = torch.randn(8, 4, 8, dtype=torch.complex64, requires_grad=True)
    x_hat, _ = ch(x, h, snr_db_to_no(torch.tensor(20.0)))
    x_hat.real.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
