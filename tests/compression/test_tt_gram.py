"""The ``gram`` SVD back-end: exact truncation (same error as LAPACK), reconstruction,
rank truncation, rank-deficient and degenerate inputs, batches, and TT-SVD with it."""

import pytest
import torch

from nodes.compression.svd import SvdStats, svd
from nodes.compression.tt import relative_error, tt_svd, tt_svd_many

ERR_TOL = 1e-5
"""Largest |gram - lapack| difference of a relative truncation error (float32 input: both
are exact up to float32 rounding, ~1e-7; a wrong subspace moves it by >> 1e-3)."""
SV_TOL = 1e-5
"""Largest singular-value difference relative to ``s[0]`` (float32 input)."""
RECON_TOL = 1e-5
"""Largest relative reconstruction error with all triplets (float32 input)."""
ORTH_TOL = 1e-5
"""Largest deviation of the eigenvector factor's Gram matrix from the identity."""

SHAPES = [(1, 1), (7, 1), (1, 9), (6, 4), (4, 6), (33, 33), (64, 576), (576, 64),
          (48, 192), (48, 16)]


def decaying(shape, rate=0.85, seed=0):
    """A float32 matrix of the given shape with singular values ``rate ** i``."""
    g = torch.Generator().manual_seed(seed)
    m, n = shape
    k = min(shape)
    u, _ = torch.linalg.qr(torch.randn(m, k, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(n, k, generator=g, dtype=torch.float64))
    return ((u * rate ** torch.arange(k, dtype=torch.float64)) @ v.T).float()


def truncation_error(a, u, s, vh, r):
    """Relative error of the rank-r truncation ``u[:, :r] diag(s[:r]) vh[:r]``."""
    return relative_error(a, (u[:, :r] * s[:r]) @ vh[:r])


@pytest.mark.parametrize("shape", SHAPES)
def test_gram_equals_lapack_error_and_values(shape):
    for a in (decaying(shape, seed=sum(shape)), torch.randn(*shape)):
        ue, se, ve = svd(a, "lapack")
        stats = SvdStats()
        u, s, vh = svd(a, "gram", stats)
        k = min(shape)
        assert u.shape == (shape[0], k) and s.shape == (k,) and vh.shape == (k, shape[1])
        assert u.dtype == s.dtype == vh.dtype == torch.float32
        assert bool((s[:-1] >= s[1:]).all())
        assert float((s - se).abs().max()) <= SV_TOL * float(se[0])
        assert relative_error(a, (u * s) @ vh) <= RECON_TOL
        for r in sorted({1, 2, 4, 16, k}):
            if r <= k:
                e_gram = truncation_error(a, u, s, vh, r)
                assert abs(e_gram - truncation_error(a, ue, se, ve, r)) <= ERR_TOL
        assert stats.calls == 1 and stats.phases["gram"].seconds > 0
        assert stats.phases["lapack"].seconds == 0 and stats.shapes == [shape]


@pytest.mark.parametrize("shape", [(64, 576), (576, 64), (20, 20)])
def test_gram_rank_truncation_forms_only_the_leading_triplets(shape):
    a = decaying(shape, seed=1)
    u_all, s_all, vh_all = svd(a, "gram")
    for rank in (1, 5, 16, 10_000):
        u, s, vh = svd(a, "gram", None, rank)
        k = min(rank, *shape)
        assert u.shape == (shape[0], k) and s.shape == (k,) and vh.shape == (k, shape[1])
        assert torch.allclose(s, s_all[:k], rtol=0, atol=SV_TOL * float(s_all[0]))
        # the same rank-k approximation as truncating the full result
        approx = (u * s) @ vh
        full_k = (u_all[:, :k] * s_all[:k]) @ vh_all[:k]
        assert relative_error(full_k, approx) <= RECON_TOL
    # the eigenvector side is orthonormal: u for a wide matrix, vh for a tall one
    u, s, vh = svd(a, "gram", None, 16)
    q = u if shape[0] <= shape[1] else vh.T
    assert float((q.T @ q - torch.eye(q.shape[1])).abs().max()) <= ORTH_TOL


@pytest.mark.parametrize("shape", [(20, 50), (50, 20)])
def test_gram_rank_deficient_input_is_reconstructed_without_nans(shape):
    g = torch.Generator().manual_seed(3)
    a = torch.randn(shape[0], 3, generator=g) @ torch.randn(3, shape[1], generator=g)
    u, s, vh = svd(a, "gram")
    assert all(bool(torch.isfinite(x).all()) for x in (u, s, vh))
    assert relative_error(a, (u * s) @ vh) <= RECON_TOL
    assert float(s[3:].max()) <= 1e-4 * float(s[0])  # rank 3 (float32 rounding above 0)
    assert relative_error(a, (u[:, :3] * s[:3]) @ vh[:3]) <= RECON_TOL  # exact at rank 3
    assert abs(float(s[2]) - float(torch.linalg.svdvals(a.double())[2])) <= SV_TOL * float(s[0])


def test_gram_zero_and_repeated_singular_values():
    z = torch.zeros(8, 30)
    u, s, vh = svd(z, "gram", None, 4)
    assert bool((s == 0).all()) and bool((vh == 0).all())
    assert bool(torch.isfinite(u).all()) and bool(((u * s) @ vh == 0).all())
    # an orthogonal matrix times 2: every singular value 2, any rank-r subspace optimal
    q, _ = torch.linalg.qr(torch.randn(16, 16, dtype=torch.float64))
    a = (2 * q).float()
    u, s, vh = svd(a, "gram", None, 5)
    assert torch.allclose(s, torch.full((5,), 2.0), atol=SV_TOL * 2)
    assert abs(truncation_error(a, u, s, vh, 5) - (11 / 16) ** 0.5) <= ERR_TOL


def test_gram_float64_input_goes_to_lapack():
    a = torch.randn(12, 40, dtype=torch.float64)
    stats = SvdStats()
    u, s, vh = svd(a, "gram", stats, 4)
    u0, s0, vh0 = torch.linalg.svd(a, full_matrices=False)
    assert torch.equal(s, s0) and torch.equal(u, u0) and torch.equal(vh, vh0)
    assert stats.phases["lapack"].seconds > 0 and stats.phases["gram"].seconds == 0


def test_gram_batch_equals_one_by_one():
    batch = torch.stack([decaying((48, 192), seed=i) for i in range(4)])
    u, s, vh = svd(batch, "gram", None, 8)
    assert u.shape == (4, 48, 8) and s.shape == (4, 8) and vh.shape == (4, 8, 192)
    for i in range(4):
        u1, s1, vh1 = svd(batch[i], "gram", None, 8)
        assert torch.allclose(s[i], s1, rtol=0, atol=SV_TOL * float(s1[0]))
        assert relative_error((u1 * s1) @ vh1, (u[i] * s[i]) @ vh[i]) <= RECON_TOL


@pytest.mark.parametrize("max_rank", [1, 4, 8, 16])
def test_tt_svd_gram_same_ranks_and_error_as_lapack(max_rank):
    torch.manual_seed(4)
    t = torch.randn(64, 3, 3, 64) * torch.linspace(1.0, 0.01, 64)
    exact = tt_svd(t, None, max_rank, "lapack")
    gram = tt_svd(t, None, max_rank, "gram")
    assert gram.ranks == exact.ranks
    e_exact = relative_error(t, exact.full())
    assert abs(relative_error(t, gram.full()) - e_exact) <= ERR_TOL
    many = tt_svd_many([t, t[:32, :, :, :32].contiguous()], max_rank)  # default: gram
    assert abs(relative_error(t, many[0].full()) - e_exact) <= ERR_TOL


@pytest.mark.parametrize("eps", [0.05, 0.3, 0.6])
def test_tt_svd_gram_with_eps_keeps_the_bound_and_lapack_ranks(eps):
    torch.manual_seed(5)
    t = torch.randn(16, 3, 3, 32) * torch.linspace(1.0, 0.05, 32)
    gram, exact = tt_svd(t, eps, None, "gram"), tt_svd(t, eps, None, "lapack")
    assert relative_error(t, gram.full()) <= eps * (1 + 1e-6)
    assert gram.ranks == exact.ranks
    assert abs(relative_error(t, gram.full()) - relative_error(t, exact.full())) <= ERR_TOL
