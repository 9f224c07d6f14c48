"""The compiled two-phase SVD keeps the reference's counters; the randomized SVD."""

import numpy as np
import pytest
import torch

from nodes.compression import compiled
from nodes.compression import svd as svdmod
from nodes.compression.bdsqr import bdsqr as bdsqr_reference
from nodes.compression.bidiag import gebrd as gebrd_reference
from nodes.compression.bidiag import orgbr as orgbr_reference
from nodes.compression.svd import SvdStats, svd
from nodes.compression.tt import relative_error, tt_svd, tt_svd_many

SHAPES = [(1, 1), (5, 1), (6, 4), (33, 33), (64, 576), (300, 40), (27, 16)]


@pytest.mark.parametrize("shape", SHAPES)
def test_compiled_two_phase_counters_and_values(shape):
    """Against LAPACK: singular values; against the torch reference: the counters of
    gebrd and orgbr (same matrix) and of bdsqr (same bidiagonal)."""
    torch.manual_seed(sum(shape) + 1)
    a = torch.randn(*shape, dtype=torch.float64)
    fast, ref = SvdStats(), SvdStats()
    u, s, vh = svd(a, "two_phase", fast)
    svd(a, "two_phase_reference", ref)
    s0 = torch.linalg.svdvals(a)
    assert float(((s - s0).abs() / s0[0]).max()) < 1e-12
    assert float(((u * s) @ vh - a).norm() / a.norm()) < 1e-12
    for phase in ("gebrd", "orgbr"):
        assert fast.phases[phase].flops == ref.phases[phase].flops
        assert fast.phases[phase].bytes == ref.phases[phase].bytes
    # bdsqr on the reference's own bidiagonal: every sweep and counter identical
    w = a.T if shape[0] < shape[1] else a
    bd = gebrd_reference(w)
    q, p, _, _ = orgbr_reference(bd, torch.float64)
    s_ref, _, _, f_ref, b_ref, sw_ref = bdsqr_reference(
        list(bd.d), list(bd.e), q.T.contiguous(), p.T.contiguous())
    s_c, ut, vt, f_c, b_c, sw_c = compiled.bdsqr(
        np.array(bd.d), np.array(bd.e + [0.0]), q.T.numpy().copy(), p.T.numpy().copy())
    assert (f_c, b_c, sw_c) == (f_ref, b_ref, sw_ref)
    assert np.allclose(s_c, s_ref.numpy(), rtol=0, atol=1e-12 * float(s0[0]))
    rebuilt = (ut.T * s_c) @ vt
    assert np.allclose(rebuilt, w.numpy(), atol=1e-11 * float(s0[0]))


def test_compiled_counters_whole_tt_svd_match_reference():
    """End to end (gebrd rounding may differ): same bidiagonalization counts, same sweeps
    within 2 %, on a TT-SVD of a conv-shaped tensor."""
    torch.manual_seed(3)
    t = torch.randn(16, 3, 3, 32)
    fast, ref = SvdStats(), SvdStats()
    tt_svd(t, None, 8, "two_phase", fast)
    tt_svd(t, None, 8, "two_phase_reference", ref)
    assert fast.shapes == ref.shapes
    assert fast.phases["gebrd"].flops == ref.phases["gebrd"].flops
    assert fast.phases["orgbr"].flops == ref.phases["orgbr"].flops
    assert abs(fast.sweeps - ref.sweeps) <= 0.02 * ref.sweeps


def test_randomized_close_to_exact_and_deterministic():
    """On a decaying spectrum the sketch's rank-r error is within 1 % of the optimum."""
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(64, 64, generator=gen))
    v, _ = torch.linalg.qr(torch.randn(576, 64, generator=gen))
    a = (u * 0.8 ** torch.arange(64.0)) @ v.T
    r = 8
    assert svdmod.randomized_applies(tuple(a.shape), r)
    stats = SvdStats()
    ur, sr, vr = svd(a, "randomized", stats, r)
    assert ur.shape == (64, r + svdmod.OVERSAMPLE) and stats.phases["randomized"].seconds > 0
    ue, se, ve = svd(a, "lapack")
    e_rand = relative_error(a, (ur[:, :r] * sr[:r]) @ vr[:r])
    e_exact = relative_error(a, (ue[:, :r] * se[:r]) @ ve[:r])
    assert e_exact * (1 - 1e-5) <= e_rand <= 1.01 * e_exact  # float32 rounding
    assert torch.equal(svd(a, "randomized", None, r)[1], sr)  # seeded


def test_randomized_falls_back_to_exact_when_rank_not_small():
    a = torch.randn(16, 144)
    for rank in (None, 4, 16):  # 4 + 8 > 0.5 * 16: not small
        assert not svdmod.randomized_applies(tuple(a.shape), rank)
        stats = SvdStats()
        u, s, vh = svd(a, "randomized", stats, rank)
        assert torch.equal(s, torch.linalg.svd(a, full_matrices=False)[1])
        assert stats.phases["lapack"].seconds > 0 and stats.phases["randomized"].seconds == 0


def test_tt_svd_randomized_ranks_and_error():
    torch.manual_seed(1)
    t = torch.randn(64, 3, 3, 64)
    exact = tt_svd(t, None, 8)
    rand = tt_svd(t, None, 8, "randomized")
    assert rand.ranks == exact.ranks
    e_exact = relative_error(t, exact.full())
    assert e_exact <= relative_error(t, rand.full()) <= 1.03 * e_exact
    # with eps the rank is not known in advance: exact SVDs, identical result
    assert torch.equal(tt_svd(t, 0.5, None, "randomized").full(),
                       tt_svd(t, 0.5, None, "lapack").full())


@pytest.mark.parametrize("backend", ["gram", "lapack", "randomized"])
def test_tt_svd_many_equals_one_by_one(backend):
    torch.manual_seed(2)
    tensors = [torch.randn(32, 3, 3, 32), torch.randn(10, 8, 6), torch.randn(32, 3, 3, 32)]
    many = tt_svd_many(tensors, 6, backend)
    for t, tt in zip(tensors, many, strict=True):
        one = tt_svd(t, None, 6, backend)
        assert tt.ranks == one.ranks
        assert torch.allclose(tt.full(), one.full(), atol=1e-4 * float(t.abs().max()))
    with pytest.raises(ValueError, match="backend"):
        tt_svd_many(tensors, 6, "two_phase")
