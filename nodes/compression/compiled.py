"""The two-phase SVD compiled with numba: same algorithm and counters as the torch code.

:mod:`nodes.compression.bidiag` (``gebrd``, ``orgbr``) and :mod:`nodes.compression.bdsqr`
are the readable reference; this module runs the same steps as machine code
(``numba.njit``, cached on disk next to the module, so only the first process compiles,
~10-20 s on this machine). Every reflector, shift, sweep and rotation is the reference's,
in the same order, so the counters the engine model consumes (FLOPs, bytes, sweeps per
phase) are identical to the reference's (tested); the Givens rotations are applied to the
rows of ``U^T`` / ``V^T`` one by one as the chase produces them (LAPACK ``dlasr``) instead
of as one sweep matrix, on n x n identities that then multiply ``U^T`` and ``V^T`` once
(BLAS), so the vectors agree with the reference to rounding only and the counted rotation
FLOPs stay those of rotating the full rows (what the engine would execute).

Counting conventions: those of the reference modules (float64, 8-byte elements).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np

from nodes.compression.bdsqr import EPS, SCALAR_FLOPS_PER_STEP, TOL, UNFL, BdsqrError

F = TypeVar("F", bound=Callable[..., Any])
ITEM = 8  # bytes per float64 element
Array = np.ndarray[Any, np.dtype[np.float64]]


def _jit(fn: F) -> F:
    """``numba.njit`` with an on-disk cache, keeping the function's static type."""
    return cast(F, numba.njit(cache=True)(fn))


def _jit_fast(fn: F) -> F:
    """As :func:`_jit` with ``fastmath`` (reassociation, SIMD): only for the bulk updates
    of reflectors and rotations, never for the scalar recurrence that decides the sweeps."""
    return cast(F, numba.njit(cache=True, fastmath=True)(fn))


@_jit
def _reflector(x: Array, v: Array) -> tuple[float, float]:
    """Householder reflector of ``x`` into ``v`` (LAPACK ``dlarfg``); (tau, beta)."""
    alpha = x[0]
    ss = 0.0
    for i in range(1, x.shape[0]):
        ss += x[i] * x[i]
    xnorm = math.sqrt(ss)
    v[0] = 1.0
    if xnorm == 0.0:
        v[1:] = 0.0
        return 0.0, alpha
    beta = -math.copysign(math.hypot(alpha, xnorm), alpha)
    scale = 1.0 / (alpha - beta)
    for i in range(1, x.shape[0]):
        v[i] = x[i] * scale
    return (beta - alpha) / beta, beta


@_jit_fast
def _apply_left(block: Array, v: Array, tau: float) -> None:
    """``block <- (I - tau v v^T) block``."""
    rows, cols = block.shape
    tmp = np.zeros(cols)
    for i in range(rows):
        vi = v[i]
        for j in range(cols):
            tmp[j] += vi * block[i, j]
    for i in range(rows):
        tv = tau * v[i]
        for j in range(cols):
            block[i, j] -= tv * tmp[j]


@_jit_fast
def _apply_right(block: Array, v: Array, tau: float) -> None:
    """``block <- block (I - tau v v^T)``."""
    rows, cols = block.shape
    for i in range(rows):
        acc = 0.0
        for j in range(cols):
            acc += block[i, j] * v[j]
        acc *= tau
        for j in range(cols):
            block[i, j] -= acc * v[j]


@_jit
def _gebrd(wt: Array, vl: Array, taul: Array, vr: Array, taur: Array,
           d: Array, e: Array) -> tuple[int, int]:
    """Bidiagonalize ``w`` (m, n), m >= n, given as ``wt = w^T`` (n, m) and overwritten
    (so every update runs along contiguous rows of length ~m); reflectors into vl/vr.
    Returns (flops, bytes)."""
    n, m = wt.shape
    flops = 0
    nbytes = 0
    for k in range(n):
        rows = m - k
        taul[k], d[k] = _reflector(wt[k, k:], vl[k:, k])
        flops += 3 * rows
        nbytes += 2 * rows * ITEM
        cols = n - k - 1
        if cols > 0 and taul[k] != 0.0:
            _apply_right(wt[k + 1:, k:], vl[k:, k].copy(), taul[k])  # H_k w[k:, k+1:]
            flops += 4 * rows * cols
            nbytes += (2 * rows * cols + rows + cols) * ITEM
        if cols > 0:
            taur[k], e[k] = _reflector(wt[k + 1:, k].copy(), vr[k, k + 1:])
            flops += 3 * cols
            nbytes += 2 * cols * ITEM
            if k + 1 < m and taur[k] != 0.0:
                _apply_left(wt[k + 1:, k + 1:], vr[k, k + 1:].copy(), taur[k])  # w G_k
                flops += 4 * (m - k - 1) * cols
                nbytes += (2 * (m - k - 1) * cols + (m - k - 1) + cols) * ITEM
    return flops, nbytes


@_jit
def _orgbr(vl: Array, taul: Array, vr: Array, taur: Array,
           q: Array, p: Array) -> tuple[int, int]:
    """Form Q (m, n) and P (n, n) in place from the reflectors (start: identities)."""
    m, n = q.shape
    flops = 0
    nbytes = 0
    for k in range(n - 1, -1, -1):
        if taul[k] != 0.0:
            _apply_left(q[k:, k:], vl[k:, k].copy(), taul[k])
            flops += 4 * (m - k) * (n - k)
            nbytes += (2 * (m - k) * (n - k) + (m - k) + (n - k)) * ITEM
    for k in range(n - 2, -1, -1):
        if taur[k] != 0.0:
            _apply_left(p[k + 1:, k + 1:], vr[k, k + 1:].copy(), taur[k])
            size = n - k - 1
            flops += 4 * size * size
            nbytes += (2 * size * size + 2 * size) * ITEM
    return flops, nbytes


@_jit
def _lartg(f: float, g: float) -> tuple[float, float, float]:
    """Plane rotation (LAPACK ``dlartg``), as :func:`nodes.compression.bdsqr.lartg`."""
    if g == 0.0:
        return 1.0, 0.0, f
    if f == 0.0:
        return 0.0, 1.0, g
    r = math.copysign(math.hypot(f, g), f)
    return f / r, g / r, r


@_jit
def _las2(f: float, g: float, h: float) -> float:
    """Smallest singular value of [[f, g], [0, h]], as :func:`~nodes.compression.bdsqr.las2`."""
    fa, ga, ha = abs(f), abs(g), abs(h)
    fhmn, fhmx = min(fa, ha), max(fa, ha)
    if fhmn == 0.0:
        return 0.0
    as_ = 1.0 + fhmn / fhmx
    at = (fhmx - fhmn) / fhmx
    if ga < fhmx:
        au = (ga / fhmx) ** 2
        return fhmn * (2.0 / (math.sqrt(as_ * as_ + au) + math.sqrt(at * at + au)))
    au = fhmx / ga
    if au == 0.0:
        return (fhmn * fhmx) / ga
    c = 1.0 / (math.sqrt(1.0 + (as_ * au) ** 2) + math.sqrt(1.0 + (at * au) ** 2))
    return 2.0 * (fhmn * c) * au


@_jit_fast
def _rot(mat: Array, i: int, c: float, s: float) -> None:
    """Rows i, i+1 of ``mat`` <- (c r_i + s r_{i+1}, c r_{i+1} - s r_i)."""
    for j in range(mat.shape[1]):
        a = mat[i, j]
        b = mat[i + 1, j]
        mat[i, j] = c * a + s * b
        mat[i + 1, j] = c * b - s * a


@_jit
def _threshold(d: Array, e: Array, maxit: int) -> float:
    """Absolute convergence threshold, as the reference's ``_threshold``."""
    n = d.shape[0]
    if n <= 1:
        return 0.0
    sminoa = float(abs(d[0]))
    mu = sminoa
    for i in range(1, n):
        if sminoa == 0.0:
            break
        mu = abs(d[i]) * (mu / (mu + abs(e[i - 1])))
        sminoa = min(sminoa, mu)
    sminoa /= math.sqrt(n)
    return max(TOL * sminoa, maxit * UNFL)


@_jit
def _bottom_block(d: Array, e: Array, hi: int, thresh: float) -> tuple[int, float]:
    """Start of the bottom unreduced block and its largest magnitude (reference's)."""
    smax = abs(d[hi])
    for ll in range(hi - 1, -1, -1):
        abse = abs(e[ll])
        if abse <= thresh:
            e[ll] = 0.0
            return ll + 1, smax
        smax = max(smax, abs(d[ll]), abse)
    return 0, smax


@_jit
def _relative_min(d: Array, e: Array, lo: int, hi: int) -> float:
    """Demmel-Kahan tests (reference's ``_relative_min``); -1.0 means the block split."""
    if abs(e[hi - 1]) <= TOL * abs(d[hi]):
        e[hi - 1] = 0.0
        return -1.0
    mu = float(abs(d[lo]))
    sminl = mu
    for i in range(lo, hi):
        if abs(e[i]) <= TOL * mu:
            e[i] = 0.0
            return -1.0
        mu = abs(d[i + 1]) * (mu / (mu + abs(e[i])))
        sminl = min(sminl, mu)
    return sminl


@_jit
def _shift(d: Array, e: Array, lo: int, hi: int, relative_gap: float) -> float:
    """Shift of the next sweep (reference's ``_shift``)."""
    if relative_gap <= max(EPS, 0.01 * TOL):
        return 0.0
    sll = abs(d[lo])
    shift = _las2(d[hi - 1], e[hi - 1], d[hi])
    if sll > 0.0 and (shift / sll) ** 2 < EPS:
        return 0.0
    return shift


@_jit
def _zero_shift_sweep(d: Array, e: Array, lo: int, hi: int, ut: Array, vt: Array) -> None:
    """Demmel-Kahan zero-shift sweep on block lo..hi, rotations applied as produced."""
    cs = 1.0
    oldcs = 1.0
    oldsn = 0.0
    for i in range(lo, hi):
        cs, sn, r = _lartg(d[i] * cs, e[i])
        if i > lo:
            e[i - 1] = oldsn * r
        oldcs, oldsn, d[i] = _lartg(oldcs * r, d[i + 1] * sn)
        _rot(vt, i, cs, sn)
        _rot(ut, i, oldcs, oldsn)
    h = d[hi] * cs
    d[hi] = h * oldcs
    e[hi - 1] = h * oldsn


@_jit
def _shifted_sweep(d: Array, e: Array, lo: int, hi: int, shift: float,
                   ut: Array, vt: Array) -> None:
    """Golub-Kahan implicit-shift sweep on block lo..hi, rotations applied as produced."""
    f = (abs(d[lo]) - shift) * (math.copysign(1.0, d[lo]) + shift / d[lo])
    g = e[lo]
    for i in range(lo, hi):
        cosr, sinr, r = _lartg(f, g)
        if i > lo:
            e[i - 1] = r
        f = cosr * d[i] + sinr * e[i]
        e[i] = cosr * e[i] - sinr * d[i]
        g = sinr * d[i + 1]
        d[i + 1] = cosr * d[i + 1]
        cosl, sinl, r = _lartg(f, g)
        d[i] = r
        f = cosl * e[i] + sinl * d[i + 1]
        d[i + 1] = cosl * d[i + 1] - sinl * e[i]
        if i < hi - 1:
            g = sinl * e[i + 1]
            e[i + 1] = cosl * e[i + 1]
        _rot(vt, i, cosr, sinr)
        _rot(ut, i, cosl, sinl)
    e[hi - 1] = f


@_jit
def _bdsqr(d: Array, e: Array, ut: Array, vt: Array,
           row_cost: int) -> tuple[int, int, int, int]:
    """QR iteration in place; (flops, bytes, sweeps, converged 1/0), the reference's counts
    for rotating rows of total length ``row_cost``."""
    n = d.shape[0]
    flops = 0
    nbytes = 0
    sweeps = 0
    maxit = 6 * n * n
    thresh = _threshold(d, e, maxit)
    hi = n - 1
    iters = 0
    while hi > 0:
        if iters > maxit:
            return flops, nbytes, sweeps, 0
        lo, smax = _bottom_block(d, e, hi, thresh)
        if lo == hi:
            hi -= 1
            continue
        sminl = _relative_min(d, e, lo, hi)
        if sminl < 0.0:
            continue
        shift = _shift(d, e, lo, hi, n * TOL * (sminl / smax))
        steps = hi - lo
        iters += steps
        sweeps += 1
        flops += steps * (SCALAR_FLOPS_PER_STEP + 6 * row_cost)
        nbytes += steps * 4 * row_cost * ITEM
        if shift == 0.0:
            _zero_shift_sweep(d, e, lo, hi, ut, vt)
        else:
            _shifted_sweep(d, e, lo, hi, shift, ut, vt)
        if abs(e[hi - 1]) <= thresh:
            e[hi - 1] = 0.0
    return flops + n, nbytes, sweeps, 1


class Reflectors:
    """Output of :func:`gebrd`: bidiagonal (d, e), packed reflectors and counters.

    Attributes
    ----------
    d, e : numpy.ndarray
        Diagonal (n,) and superdiagonal (n-1,) of B.
    vl, taul : numpy.ndarray
        Left reflector k in ``vl[k:, k]`` (m, n), scales (n,).
    vr, taur : numpy.ndarray
        Right reflector k in ``vr[k, k+1:]`` (n, n), scales (n,).
    flops, bytes : int
        Counted work and traffic of the reduction.
    """

    def __init__(self, m: int, n: int) -> None:
        self.d: Array = np.zeros(n)
        self.e: Array = np.zeros(max(n - 1, 1))
        self.vl: Array = np.zeros((m, n))
        self.taul: Array = np.zeros(n)
        self.vr: Array = np.zeros((n, n))
        self.taur: Array = np.zeros(n)
        self.flops = 0
        self.bytes = 0


def gebrd(a: Array) -> Reflectors:
    """Householder bidiagonalization of ``a`` (m, n), m >= n (compiled ``gebrd``).

    Parameters
    ----------
    a : numpy.ndarray
        Shape (m, n), float64; not modified.

    Returns
    -------
    Reflectors
    """
    m, n = a.shape
    if m < n:
        raise ValueError(f"gebrd needs m >= n, got shape {a.shape}; transpose first")
    out = Reflectors(m, n)
    wt = np.array(a.T, dtype=np.float64, order="C")
    out.flops, out.bytes = _gebrd(wt, out.vl, out.taul, out.vr, out.taur, out.d, out.e)
    return out


def orgbr(bd: Reflectors) -> tuple[Array, Array, int, int]:
    """Q (m, n) and P (n, n) from :func:`gebrd`'s reflectors, with (flops, bytes)."""
    m, n = bd.vl.shape
    q = np.eye(m, n)
    p = np.eye(n)
    flops, nbytes = _orgbr(bd.vl, bd.taul, bd.vr, bd.taur, q, p)
    return q, p, flops, nbytes


def bdsqr(d: Array, e: Array, ut: Array, vt: Array) -> tuple[Array, Array, Array, int, int, int]:
    """SVD of ``U B V^T`` with B = bidiag(d, e) (compiled ``bdsqr``).

    Parameters
    ----------
    d, e : numpy.ndarray
        Diagonal (n,) and superdiagonal (>= n-1,), float64 (copied).
    ut, vt : numpy.ndarray
        ``U^T`` (n, m) and ``V^T`` (n, k), float64; not modified.

    Returns
    -------
    s, ut, vt : numpy.ndarray
        Singular values (n,) descending, non-negative; permuted ``U^T``, ``V^T``.
    flops, bytes, sweeps : int
        The reference's counters for the same iteration.
    """
    n = d.shape[0]
    d = d.copy()
    e = e[: max(n - 1, 0)].copy()
    # The rotations act on n x n identities, then one product each (BLAS) applies them to
    # U^T and V^T: the same rotations, counted as dlasr on the full rows would be.
    wu = np.eye(n)
    wv = np.eye(n)
    flops, nbytes, sweeps, ok = _bdsqr(d, e, wu, wv, ut.shape[1] + vt.shape[1])
    if not ok:
        raise BdsqrError(f"bdsqr did not converge (n={n})")
    ut = wu @ ut
    vt = wv @ vt
    neg = d < 0.0
    vt[neg] *= -1.0
    s = np.abs(d)
    order = np.argsort(-s, kind="stable")
    return s[order], ut[order], vt[order], flops, nbytes, sweeps
