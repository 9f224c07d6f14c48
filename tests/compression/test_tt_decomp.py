"""TT-SVD: error bound, rank cap, TT-matrix, agreement with TensorLy."""

import math

import pytest
import torch

from nodes.compression.tt import relative_error, tt_matrix_svd, tt_svd, tt_to_full


def structured(shape, rank, noise, seed=0):
    """A tensor with a low TT-rank part plus noise."""
    g = torch.Generator().manual_seed(seed)
    cores = []
    r_prev = 1
    for k, n in enumerate(shape):
        r = 1 if k == len(shape) - 1 else rank
        cores.append(torch.randn(r_prev, n, r, generator=g, dtype=torch.float64))
        r_prev = r
    t = tt_to_full(cores)
    return t + noise * t.norm() / math.sqrt(t.numel()) * torch.randn(shape, generator=g,
                                                                        dtype=torch.float64)


@pytest.mark.parametrize("backend", ["lapack", "two_phase"])
@pytest.mark.parametrize("eps", [0.01, 0.1, 0.3, 0.6])
def test_error_bound_holds(eps, backend):
    t = structured((6, 5, 7, 4), rank=3, noise=0.2)
    tt = tt_svd(t, eps, backend=backend)
    err = relative_error(t, tt.full())
    assert err <= eps * (1 + 1e-9)
    assert tt.ranks[0] == 1 and tt.ranks[-1] == 1
    assert tt.num_params == sum(c.numel() for c in tt.cores)


def test_error_bound_is_not_vacuous():
    t = structured((6, 5, 7, 4), rank=3, noise=0.2)
    small, big = tt_svd(t, 0.05), tt_svd(t, 0.5)
    assert big.num_params < small.num_params  # larger eps compresses more
    assert relative_error(t, big.full()) > 0.05


def test_max_rank_respected_and_exact_without_truncation():
    t = structured((8, 9, 10), rank=6, noise=0.5)
    for r in (1, 2, 4):
        assert max(tt_svd(t, None, max_rank=r).ranks) <= r
    full = tt_svd(t)
    assert relative_error(t, full.full()) < 1e-12
    assert full.ranks == (1, 8, 10, 1)
    with pytest.raises(ValueError, match="max_rank"):
        tt_svd(t, None, max_rank=0)


def test_tt_matrix_round_trip():
    torch.manual_seed(0)
    w = torch.randn(10, 64, dtype=torch.float64)
    ttm = tt_matrix_svd(w, (5, 2), (8, 8))
    assert [tuple(c.shape[1:3]) for c in ttm.cores] == [(5, 8), (2, 8)]
    assert torch.allclose(ttm.to_matrix(), w, atol=1e-12)
    assert relative_error(w, tt_matrix_svd(w, (5, 2), (8, 8), eps=0.5).to_matrix()) <= 0.5


def test_same_ranks_and_error_as_tensorly():
    tl = pytest.importorskip("tensorly")
    from tensorly.decomposition import tensor_train

    t = structured((16, 3, 3, 32), rank=5, noise=0.3).float()
    for r in (4, 8):
        ours = tt_svd(t, None, max_rank=r)
        theirs = tensor_train(t.numpy(), rank=r)
        assert ours.ranks == tuple(int(x) for x in theirs.rank)
        e_ours = relative_error(t, ours.full())
        e_theirs = relative_error(t, torch.from_numpy(tl.tt_to_tensor(theirs)))
        assert abs(e_ours - e_theirs) < 1e-5
