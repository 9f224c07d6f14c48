"""Tensor-train (TT) format and TT-SVD (Oseledets 2011, Alg. 1).

A tensor ``W`` of shape (n_1, ..., n_d) is stored as cores ``G_k`` of shape
(r_{k-1}, n_k, r_k) with r_0 = r_d = 1, and
``W[i_1, ..., i_d] = G_1[:, i_1, :] @ ... @ G_d[:, i_d, :]``.

TT-SVD sweeps the modes left to right: reshape the remainder to
(r_{k-1} n_k, n_{k+1} ... n_d), truncated SVD, keep ``U`` as core k and carry
``diag(s) @ Vh``. With per-step tolerance ``delta = eps / sqrt(d - 1) * ||W||_F`` the result
satisfies ``||W - TT(W)||_F <= eps ||W||_F`` (Oseledets 2011, Thm. 2.2) unless a
``max_rank`` cap binds first.

A TT-matrix (``TTMatrix``) is a TT tensor whose mode k is the pair (m_k, n_k) of an
(out, in) = (prod m, prod n) matrix; its cores are viewed as (r_{k-1}, m_k, n_k, r_k).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from nodes.compression.svd import SvdStats, svd


@dataclass
class TTTensor:
    """A tensor in TT format.

    Attributes
    ----------
    cores : list[torch.Tensor]
        Core k has shape (r_{k-1}, n_k, r_k), r_0 = r_d = 1.
    """

    cores: list[torch.Tensor]

    @property
    def shape(self) -> tuple[int, ...]:
        """Mode sizes (n_1, ..., n_d)."""
        return tuple(int(c.shape[1]) for c in self.cores)

    @property
    def ranks(self) -> tuple[int, ...]:
        """TT ranks (r_0, ..., r_d), r_0 = r_d = 1."""
        return (1,) + tuple(int(c.shape[2]) for c in self.cores)

    @property
    def num_params(self) -> int:
        """Number of stored entries, sum_k r_{k-1} n_k r_k."""
        return sum(c.numel() for c in self.cores)

    def full(self) -> torch.Tensor:
        """Reconstruct the dense tensor, shape (n_1, ..., n_d)."""
        return tt_to_full(self.cores)


def tt_to_full(cores: list[torch.Tensor]) -> torch.Tensor:
    """Contract TT cores into the dense tensor (differentiable).

    Parameters
    ----------
    cores : list[torch.Tensor]
        Core k of shape (r_{k-1}, n_k, r_k).

    Returns
    -------
    torch.Tensor
        Shape (n_1, ..., n_d).
    """
    shape = [int(c.shape[1]) for c in cores]
    res = cores[0].reshape(-1, cores[0].shape[2])
    for core in cores[1:]:
        r_prev, n_k, r_next = core.shape
        res = (res @ core.reshape(r_prev, n_k * r_next)).reshape(-1, r_next)
    return res.reshape(shape)


def truncation_rank(s: torch.Tensor, delta: float | None, max_rank: int | None) -> int:
    """Smallest rank whose discarded tail has Frobenius norm <= ``delta``, capped.

    Parameters
    ----------
    s : torch.Tensor
        Singular values, shape (k,), descending.
    delta : float or None
        Absolute tolerance on the discarded tail (same units as ``s``); None keeps all.
    max_rank : int or None
        Upper bound on the rank.

    Returns
    -------
    int
        Rank in [1, k].
    """
    k = int(s.shape[0])
    r = k
    if delta is not None and delta > 0.0:
        s2 = s.double() ** 2
        tail = torch.flip(torch.cumsum(torch.flip(s2, (0,)), 0), (0,))
        r = max(1, int((tail > delta * delta).sum()))
    if max_rank is not None:
        r = min(r, max_rank)
    return max(1, r)


def tt_svd(
    tensor: torch.Tensor,
    eps: float | None = None,
    max_rank: int | None = None,
    backend: str = "gram",
    stats: SvdStats | None = None,
) -> TTTensor:
    """TT-SVD of a dense tensor.

    Parameters
    ----------
    tensor : torch.Tensor
        Shape (n_1, ..., n_d), d >= 1, floating.
    eps : float, optional
        Relative error bound: ``||W - TT||_F <= eps ||W||_F`` when ``max_rank`` does not
        bind. None (or 0) truncates only by ``max_rank``.
    max_rank : int, optional
        Cap on every TT rank.
    backend : str
        SVD back-end, ``"gram"`` (the default: exact, through the short side's Gram
        matrix, :func:`nodes.compression.svd.svd_gram`; ``lapack`` for float64 input),
        ``"lapack"``, ``"randomized"`` (sketched only when ``eps`` is None and
        ``max_rank`` is small against the unfolding, see
        :func:`nodes.compression.svd.svd_randomized`) or ``"two_phase"``.
    stats : SvdStats, optional
        Per-phase counters to update.

    Returns
    -------
    TTTensor
        Cores in the dtype of ``tensor``.
    """
    if eps is not None and eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if max_rank is not None and max_rank < 1:
        raise ValueError(f"max_rank must be >= 1 or None, got {max_rank}")
    shape = tuple(int(n) for n in tensor.shape)
    d = len(shape)
    if d == 1:
        return TTTensor([tensor.reshape(1, shape[0], 1).clone()])
    delta = None
    if eps:
        delta = eps / math.sqrt(d - 1) * float(torch.linalg.vector_norm(tensor))
    cores: list[torch.Tensor] = []
    rank = 1
    rest = tensor
    for k in range(d - 1):
        mat = rest.reshape(rank * shape[k], -1)
        # The rank is known in advance only when eps does not truncate (randomized, gram).
        u, s, vh = svd(mat, backend, stats, None if delta is not None else max_rank)
        r = truncation_rank(s, delta, max_rank)
        cores.append(u[:, :r].reshape(rank, shape[k], r))
        rest = s[:r, None] * vh[:r]
        rank = r
    cores.append(rest.reshape(rank, shape[-1], 1))
    return TTTensor(cores)


BATCHED_BACKENDS = ("gram", "lapack", "randomized")
"""SVD back-ends that take a batch (..., m, n); :func:`tt_svd_many` accepts these."""


def tt_svd_many(
    tensors: list[torch.Tensor], max_rank: int, backend: str = "gram"
) -> list[TTTensor]:
    """TT-SVD of many tensors at a fixed rank cap, equal shapes decomposed as one batch.

    With truncation by ``max_rank`` only, every tensor of a shape gets the same ranks, so
    each sweep step is one batched SVD (one LAPACK call per matrix, no Python per tensor).

    Parameters
    ----------
    tensors : list[torch.Tensor]
        Tensors of any shapes (d >= 2), floating.
    max_rank : int
        Cap on every TT rank (>= 1).
    backend : {"gram", "lapack", "randomized"}
        SVD back-end (:data:`BATCHED_BACKENDS`; the counting ``two_phase`` has no batched
        form). The default ``gram`` is exact (same truncation error as ``lapack`` up to
        rounding) and the fastest here (``bench/tt.py``).

    Returns
    -------
    list[TTTensor]
        In the order of ``tensors``; equal to :func:`tt_svd` ``(t, None, max_rank,
        backend)`` of each up to rounding.
    """
    if backend not in BATCHED_BACKENDS:
        raise ValueError(f"backend {backend!r}: allowed {', '.join(BATCHED_BACKENDS)}")
    if max_rank < 1:
        raise ValueError(f"max_rank must be >= 1, got {max_rank}")
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault(tuple(int(n) for n in t.shape), []).append(i)
    out: list[TTTensor | None] = [None] * len(tensors)
    for shape, idx in groups.items():
        batch = torch.stack([tensors[i] for i in idx])
        for i, cores in zip(idx, _tt_svd_batch(batch, shape, max_rank, backend), strict=True):
            out[i] = TTTensor(cores)
    return [t for t in out if t is not None]


def _tt_svd_batch(
    batch: torch.Tensor, shape: tuple[int, ...], max_rank: int, backend: str
) -> list[list[torch.Tensor]]:
    """Cores of each tensor of ``batch`` (B, *shape), rank-capped TT-SVD."""
    b = int(batch.shape[0])
    cores: list[torch.Tensor] = []
    rank = 1
    rest = batch
    for k in range(len(shape) - 1):
        mat = rest.reshape(b, rank * shape[k], -1)
        u, s, vh = svd(mat, backend, None, max_rank)
        r = min(max_rank, int(s.shape[-1]))
        cores.append(u[..., :r].reshape(b, rank, shape[k], r))
        rest = s[..., :r, None] * vh[..., :r, :]
        rank = r
    cores.append(rest.reshape(b, rank, shape[-1], 1))
    return [[c[i] for c in cores] for i in range(b)]


def relative_error(reference: torch.Tensor, approx: torch.Tensor) -> float:
    """``||reference - approx||_F / ||reference||_F`` (0 when both are zero)."""
    den = float(torch.linalg.vector_norm(reference))
    num = float(torch.linalg.vector_norm(reference - approx.reshape(reference.shape)))
    return num / den if den > 0 else num


@dataclass
class TTMatrix:
    """A matrix of shape (prod(out_modes), prod(in_modes)) in TT-matrix format.

    Attributes
    ----------
    tt : TTTensor
        TT tensor over paired modes (m_k * n_k).
    out_modes, in_modes : tuple[int, ...]
        Factorizations of the row and column counts, same length d.
    """

    tt: TTTensor
    out_modes: tuple[int, ...]
    in_modes: tuple[int, ...]

    @property
    def cores(self) -> list[torch.Tensor]:
        """Cores viewed as (r_{k-1}, m_k, n_k, r_k)."""
        return [
            c.reshape(c.shape[0], m, n, c.shape[2])
            for c, m, n in zip(self.tt.cores, self.out_modes, self.in_modes, strict=True)
        ]

    @property
    def num_params(self) -> int:
        """Stored entries."""
        return self.tt.num_params

    def to_matrix(self) -> torch.Tensor:
        """Dense matrix, shape (prod(out_modes), prod(in_modes))."""
        d = len(self.out_modes)
        pairs = zip(self.out_modes, self.in_modes, strict=True)
        full = self.tt.full().reshape([x for pair in pairs for x in pair])
        inv = [2 * k for k in range(d)] + [2 * k + 1 for k in range(d)]
        return full.permute(inv).reshape(math.prod(self.out_modes), math.prod(self.in_modes))


def tt_matrix_svd(
    matrix: torch.Tensor,
    out_modes: tuple[int, ...],
    in_modes: tuple[int, ...],
    eps: float | None = None,
    max_rank: int | None = None,
    backend: str = "gram",
    stats: SvdStats | None = None,
) -> TTMatrix:
    """TT-matrix decomposition of a (out, in) matrix (e.g. a Linear weight).

    Parameters
    ----------
    matrix : torch.Tensor
        Shape (prod(out_modes), prod(in_modes)).
    out_modes, in_modes : tuple[int, ...]
        Mode factorizations of equal length d.
    eps, max_rank, backend, stats
        As in :func:`tt_svd`.

    Returns
    -------
    TTMatrix
    """
    if len(out_modes) != len(in_modes):
        raise ValueError(f"out_modes {out_modes} and in_modes {in_modes} differ in length")
    if matrix.shape != (math.prod(out_modes), math.prod(in_modes)):
        raise ValueError(
            f"matrix shape {tuple(matrix.shape)} != ({math.prod(out_modes)}, {math.prod(in_modes)})"
        )
    d = len(out_modes)
    t = matrix.reshape(*out_modes, *in_modes)
    perm = [x for k in range(d) for x in (k, d + k)]
    paired = t.permute(perm).reshape([m * n for m, n in zip(out_modes, in_modes, strict=True)])
    tt = tt_svd(paired, eps, max_rank, backend, stats)
    return TTMatrix(tt, tuple(out_modes), tuple(in_modes))
