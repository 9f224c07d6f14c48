"""Phase 1 of the two-phase SVD: Householder bidiagonalization (LAPACK ``gebrd`` + ``orgbr``).

For a real matrix ``A`` of shape (m, n) with m >= n, Householder reflectors from the left
(``H_k``, zeroing column k below the diagonal) and from the right (``G_k``, zeroing row k
right of the superdiagonal) reduce ``A`` to an upper bidiagonal ``B``::

    A = Q @ B @ P.T,  Q = H_0 H_1 ... H_{n-1} (thin, (m, n)),  P = G_0 ... G_{n-2} ((n, n))

as in Golub & Van Loan, *Matrix Computations* (4th ed.), Alg. 5.4.2, and LAPACK's
``dgebrd`` (reduction) followed by ``dorgbr`` (forming Q and P from the reflectors).

Counting conventions (used by the cost model): FLOPs are the multiply-adds this code
performs (a rank-1 reflector application on an (r, c) block costs ``4 r c``), bytes are the
compulsory traffic of each operation with no cache reuse between operations (read and
write the block once, read the vectors once), in the working dtype's element size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class Reflector:
    """One Householder reflector ``H = I - tau v v^T`` with ``v[0] == 1``.

    Attributes
    ----------
    v : torch.Tensor
        Householder vector, shape (k,).
    tau : float
        Scale; ``tau == 0`` means ``H = I``.
    """

    v: torch.Tensor
    tau: float


@dataclass
class Bidiagonal:
    """Result of :func:`gebrd`: the bidiagonal and the reflectors that produced it.

    Attributes
    ----------
    d : list[float]
        Diagonal of B, length n.
    e : list[float]
        Superdiagonal of B, length n - 1.
    left : list[Reflector]
        ``H_k`` acting on rows k..m-1, k = 0..n-1.
    right : list[Reflector]
        ``G_k`` acting on columns k+1..n-1, k = 0..n-2.
    m, n : int
        Shape of the reduced matrix (m >= n).
    flops, bytes : int
        Counted work and traffic of the reduction (see module docstring).
    """

    d: list[float]
    e: list[float]
    left: list[Reflector] = field(default_factory=list)
    right: list[Reflector] = field(default_factory=list)
    m: int = 0
    n: int = 0
    flops: int = 0
    bytes: int = 0


def householder(x: torch.Tensor) -> tuple[Reflector, float]:
    """Reflector mapping ``x`` to ``beta * e_1`` (LAPACK ``dlarfg``).

    Parameters
    ----------
    x : torch.Tensor
        Vector, shape (k,), k >= 1.

    Returns
    -------
    reflector : Reflector
        ``H`` with ``H @ x = beta * e_1``.
    beta : float
        The new leading entry.
    """
    alpha = float(x[0])
    xnorm = float(torch.linalg.vector_norm(x[1:])) if x.numel() > 1 else 0.0
    if xnorm == 0.0:
        v = torch.zeros_like(x)
        v[0] = 1.0
        return Reflector(v, 0.0), alpha
    beta = -math.copysign(math.hypot(alpha, xnorm), alpha)
    tau = (beta - alpha) / beta
    v = x / (alpha - beta)
    v[0] = 1.0
    return Reflector(v, tau), beta


def gebrd(a: torch.Tensor) -> Bidiagonal:
    """Reduce ``a`` to upper bidiagonal form with Householder reflectors.

    Parameters
    ----------
    a : torch.Tensor
        Matrix, shape (m, n) with m >= n; not modified.

    Returns
    -------
    Bidiagonal
        Diagonal, superdiagonal, reflectors and counted FLOPs/bytes.
    """
    m, n = a.shape
    if m < n:
        raise ValueError(f"gebrd needs m >= n, got shape {tuple(a.shape)}; transpose first")
    w = a.clone()
    item = w.element_size()
    out = Bidiagonal(d=[0.0] * n, e=[0.0] * max(n - 1, 0), m=m, n=n)
    for k in range(n):
        refl, beta = householder(w[k:, k])
        out.left.append(refl)
        out.d[k] = beta
        rows = m - k
        out.flops += 3 * rows
        out.bytes += 2 * rows * item
        if k + 1 < n and refl.tau != 0.0:
            block = w[k:, k + 1 :]
            block.addr_(refl.v, refl.v @ block, alpha=-refl.tau)
            cols = n - k - 1
            out.flops += 4 * rows * cols
            out.bytes += (2 * rows * cols + rows + cols) * item
        if k + 1 < n:
            refl_r, beta_r = householder(w[k, k + 1 :])
            out.right.append(refl_r)
            out.e[k] = beta_r
            cols = n - k - 1
            out.flops += 3 * cols
            out.bytes += 2 * cols * item
            if k + 1 < m and refl_r.tau != 0.0:
                block = w[k + 1 :, k + 1 :]
                block.addr_(block @ refl_r.v, refl_r.v, alpha=-refl_r.tau)
                rows_r = m - k - 1
                out.flops += 4 * rows_r * cols
                out.bytes += (2 * rows_r * cols + rows_r + cols) * item
    return out


def orgbr(bd: Bidiagonal, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Form ``Q`` (thin) and ``P`` from the reflectors of :func:`gebrd`.

    Parameters
    ----------
    bd : Bidiagonal
        Output of :func:`gebrd` for an (m, n) matrix.
    dtype : torch.dtype
        Working dtype.

    Returns
    -------
    q : torch.Tensor
        Shape (m, n), orthonormal columns.
    p : torch.Tensor
        Shape (n, n), orthogonal.
    flops, bytes : int
        Counted work and traffic.
    """
    m, n = bd.m, bd.n
    item = torch.empty((), dtype=dtype).element_size()
    flops = 0
    nbytes = 0
    q = torch.eye(m, n, dtype=dtype)
    for k in range(n - 1, -1, -1):
        refl = bd.left[k]
        if refl.tau == 0.0:
            continue
        block = q[k:, k:]
        block.addr_(refl.v, refl.v @ block, alpha=-refl.tau)
        rows, cols = m - k, n - k
        flops += 4 * rows * cols
        nbytes += (2 * rows * cols + rows + cols) * item
    p = torch.eye(n, dtype=dtype)
    for k in range(n - 2, -1, -1):
        refl = bd.right[k]
        if refl.tau == 0.0:
            continue
        block = p[k + 1 :, k + 1 :]
        block.addr_(refl.v, refl.v @ block, alpha=-refl.tau)
        size = n - k - 1
        flops += 4 * size * size
        nbytes += (2 * size * size + 2 * size) * item
    return q, p, flops, nbytes
