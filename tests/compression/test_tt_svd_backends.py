"""The two SVD back-ends agree; the two-phase pieces are correct on their own."""

import pytest
import torch

from nodes.compression.bdsqr import _rot_rows, sweep_matrix
from nodes.compression.bidiag import gebrd, orgbr
from nodes.compression.svd import SvdStats, svd

SV_REL_TOL = 1e-5  # issue 5: back-ends agree to < 1e-5 relative on singular values
SHAPES = [(1, 1), (7, 1), (1, 9), (6, 4), (4, 6), (33, 33), (64, 576), (300, 40)]


def gebrd_flops_by_hand(m: int, n: int) -> int:
    """FLOPs of Householder bidiagonalization of an (m, n) matrix, m >= n, by the cost
    rule of ``nodes/compression/bidiag.py``: forming a reflector of length r costs 3 r,
    applying it to an (r, c) block 4 r c; a reflector of length 1 has nothing to reflect
    (tau = 0) and is not applied."""
    total = 0
    for k in range(n):
        r, c = m - k, n - k - 1
        total += 3 * r  # left reflector of column k
        if c >= 1:
            total += 4 * r * c + 3 * c  # applied to the columns right of it; right reflector
            if c >= 2 and r > 1:
                total += 4 * (r - 1) * c  # right reflector applied to the rows below
    return total


@pytest.mark.parametrize("shape", SHAPES)
def test_two_phase_matches_lapack(shape):
    torch.manual_seed(sum(shape))
    a = torch.randn(*shape, dtype=torch.float64)
    u0, s0, vh0 = svd(a, "lapack")
    stats = SvdStats()
    u, s, vh = svd(a, "two_phase", stats)
    k = min(shape)
    assert u.shape == (shape[0], k) and s.shape == (k,) and vh.shape == (k, shape[1])
    assert float(((s - s0).abs() / s0).max()) < SV_REL_TOL
    assert float(((u * s) @ vh - a).norm() / a.norm()) < 1e-12
    assert float((u.T @ u - torch.eye(k, dtype=u.dtype)).abs().max()) < 1e-12
    assert float((vh @ vh.T - torch.eye(k, dtype=u.dtype)).abs().max()) < 1e-12
    assert bool((s[:-1] >= s[1:]).all())
    assert stats.calls == 1
    big, row = max(shape), max(shape) + k  # a rotation acts on a row of U^T and one of V^T
    assert stats.phases["gebrd"].flops == gebrd_flops_by_hand(big, k)
    # bdsqr: each inner step of a sweep is one rotation (6 FLOPs per element of the two
    # rows, both rows read and written, float64) plus 20 scalar FLOPs; n FLOPs to finish
    steps, rest = divmod(stats.phases["bdsqr"].bytes, 4 * row * 8)
    assert rest == 0 and (steps > 0) == (k > 1)  # a bidiagonal with k > 1 needs a sweep
    assert stats.phases["bdsqr"].flops == steps * (20 + 6 * row) + k
    assert stats.phases["lapack"].seconds == 0.0


def test_float32_weights_and_rank_deficient():
    torch.manual_seed(0)
    w = torch.randn(64, 16, 3, 3).permute(1, 2, 3, 0).reshape(16, -1)  # float32 conv unfolding
    s0 = svd(w, "lapack")[1]
    s1 = svd(w, "two_phase")[1]
    assert s1.dtype == torch.float32
    assert float(((s1 - s0).abs() / s0).max()) < SV_REL_TOL
    low = torch.randn(20, 5, dtype=torch.float64) @ torch.randn(5, 30, dtype=torch.float64)
    u, s, vh = svd(low, "two_phase")
    s0 = torch.linalg.svdvals(low)
    assert float((s - s0).abs().max() / s0[0]) < 1e-12  # normwise for the zero tail
    assert float(((u * s) @ vh - low).norm() / low.norm()) < 1e-12
    assert float(svd(torch.zeros(5, 4, dtype=torch.float64), "two_phase")[1].abs().max()) == 0.0


def test_graded_matrix_relative_accuracy():
    torch.manual_seed(1)
    q = torch.linalg.qr(torch.randn(12, 12, dtype=torch.float64))[0]
    a = torch.diag(torch.logspace(0, -10, 12, dtype=torch.float64)) @ q
    s0 = torch.linalg.svdvals(a)
    s1 = svd(a, "two_phase")[1]
    assert float(((s1 - s0).abs() / s0).max()) < SV_REL_TOL


def test_gebrd_orgbr_factorization():
    torch.manual_seed(2)
    a = torch.randn(9, 5, dtype=torch.float64)
    bd = gebrd(a)
    q, p, flops, nbytes = orgbr(bd, torch.float64)
    b = torch.diag(torch.tensor(bd.d, dtype=torch.float64))
    b += torch.diag(torch.tensor(bd.e, dtype=torch.float64), 1)
    assert torch.allclose(q @ b @ p.T, a, atol=1e-12)
    assert flops > 0 and nbytes > 0 and bd.flops > 0
    with pytest.raises(ValueError, match="m >= n"):
        gebrd(a.T)


def test_sweep_matrix_equals_sequential_rotations():
    torch.manual_seed(3)
    k = 9
    ang = torch.rand(k, dtype=torch.float64) * 6.0
    ang[4] = 0.0  # an exact zero sine inside the sequence
    c, s = ang.cos().tolist(), ang.sin().tolist()
    rows = torch.randn(k + 1, 7, dtype=torch.float64)
    seq = rows.clone()
    for i in range(k):
        _rot_rows(seq, i, c[i], s[i])
    batched = sweep_matrix(c, s, torch.float64) @ rows
    assert torch.allclose(batched, seq, atol=1e-13)


def test_unknown_backend_names_allowed():
    with pytest.raises(ValueError, match="two_phase"):
        svd(torch.eye(2), "magma")
