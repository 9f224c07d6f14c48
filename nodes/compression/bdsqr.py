"""Phase 2 of the two-phase SVD: implicit-shift QR on a bidiagonal (LAPACK ``bdsqr``).

Golub-Kahan SVD steps (Golub & Kahan 1965; Golub & Van Loan Alg. 8.6.1) with the
Demmel-Kahan refinements (Demmel & Kahan 1990, "Accurate singular values of bidiagonal
matrices"): the relative convergence test driven by the ``mu`` recurrence, the
zero-shift QR sweep when the shift would spoil the smallest singular value, and the
shift from the trailing 2x2 block (``dlas2``). The sweep always chases the bulge from
top to bottom (LAPACK's ``idir = 1``); LAPACK also chases bottom-up for graded matrices.

The scalar recurrence runs on Python floats: this module is the readable reference;
:mod:`nodes.compression.compiled` runs the same iteration compiled (``two_phase``).
The Givens rotations of one sweep act on the rows of the accumulated ``U^T`` / ``V^T``
(LAPACK ``dlasr``, forward, variable pivot).
Counted FLOPs and bytes are those of that rotation algorithm (a rotation on two rows of
length L: ``6 L`` FLOPs, read and write both rows; each scalar step of the sweep: 20
FLOPs), i.e. what a rotation unit would execute. For wall-time speed in Python, this
implementation applies a long sweep's k rotations at once as the equivalent (k+1, k+1)
lower-Hessenberg orthogonal matrix (built exactly with a cumulative product, no
division) in one matrix product; short sweeps are applied rotation by rotation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

EPS = 2.0**-52
UNFL = 2.2250738585072014e-308
TOL: float = max(10.0, min(100.0, EPS**-0.125)) * EPS  # LAPACK dbdsqr's default relative tolerance
SCALAR_FLOPS_PER_STEP = 20


class BdsqrError(RuntimeError):
    """The QR iteration did not converge within its iteration budget."""


def lartg(f: float, g: float) -> tuple[float, float, float]:
    """Plane rotation with ``[c s; -s c] @ [f; g] = [r; 0]`` (LAPACK ``dlartg``).

    Returns
    -------
    c, s, r : float
    """
    if g == 0.0:
        return 1.0, 0.0, f
    if f == 0.0:
        return 0.0, 1.0, g
    r = math.copysign(math.hypot(f, g), f)
    return f / r, g / r, r


def las2(f: float, g: float, h: float) -> float:
    """Smallest singular value of ``[[f, g], [0, h]]`` (LAPACK ``dlas2``)."""
    fa, ga, ha = abs(f), abs(g), abs(h)
    fhmn, fhmx = min(fa, ha), max(fa, ha)
    if fhmn == 0.0:
        return 0.0
    if ga < fhmx:
        as_ = 1.0 + fhmn / fhmx
        at = (fhmx - fhmn) / fhmx
        au = (ga / fhmx) ** 2
        return fhmn * (2.0 / (math.sqrt(as_ * as_ + au) + math.sqrt(at * at + au)))
    au = fhmx / ga
    if au == 0.0:
        return (fhmn * fhmx) / ga
    as_ = 1.0 + fhmn / fhmx
    at = (fhmx - fhmn) / fhmx
    c = 1.0 / (math.sqrt(1.0 + (as_ * au) ** 2) + math.sqrt(1.0 + (at * au) ** 2))
    return 2.0 * (fhmn * c) * au


def _rot_rows(mat: torch.Tensor, i: int, c: float, s: float) -> None:
    """Rows i, i+1 of ``mat`` <- (c r_i + s r_{i+1}, c r_{i+1} - s r_i), in place."""
    ri = mat[i]
    rj = mat[i + 1]
    old = ri.clone()
    ri.mul_(c).add_(rj, alpha=s)
    rj.mul_(c).add_(old, alpha=-s)


BATCH_MIN_STEPS = 6


def sweep_matrices(
    c: list[list[float]], s: list[list[float]], dtype: torch.dtype
) -> torch.Tensor:
    """Products of forward rotation sequences, each as one matrix (batched).

    In sequence b, rotation i (i = 0..k-1) maps rows (i, i+1) to
    (c_i r_i + s_i r_{i+1}, c_i r_{i+1} - s_i r_i), applied in order i = 0, 1, ..., k-1.

    Parameters
    ----------
    c, s : list[list[float]]
        Cosines and sines, B sequences of equal length k.
    dtype : torch.dtype
        Output dtype.

    Returns
    -------
    torch.Tensor
        ``M``, shape (B, k+1, k+1), with ``rows_after = M[b] @ rows_before``.
    """
    ct = torch.tensor(c, dtype=dtype)
    st = torch.tensor(s, dtype=dtype)
    k = ct.shape[1]
    # n_mat[b, j, l] = -s_l for l >= j else 1; cumprod gives prod_{l'=j}^{l} (-s_l').
    mask = torch.arange(k)[None, :] >= torch.arange(k + 1)[:, None]
    n_mat = torch.where(mask, -st[:, None, :], torch.ones((), dtype=dtype))
    cp = F.pad(torch.cumprod(n_mat, dim=2), (1, 0), value=1.0)
    p_mat = torch.triu(cp)  # p_mat[b, j, i] = prod_{l=j}^{i-1} (-s_l), i >= j
    cprev = F.pad(ct, (1, 0), value=1.0)
    cext = F.pad(ct, (0, 1), value=1.0)
    m = (p_mat * cprev[:, :, None]).transpose(1, 2) * cext[:, :, None]
    idx = torch.arange(k)
    m[:, idx, idx + 1] += st
    return m


def sweep_matrix(c: list[float], s: list[float], dtype: torch.dtype) -> torch.Tensor:
    """One rotation sequence as a (k+1, k+1) matrix; see :func:`sweep_matrices`."""
    return sweep_matrices([c], [s], dtype)[0]


def _apply_sweeps(
    vt: torch.Tensor, ut: torch.Tensor, lo: int,
    rc: list[float], rs: list[float], lc: list[float], ls: list[float],
) -> None:
    """Apply a sweep's right rotations to ``vt`` and left rotations to ``ut`` from row lo."""
    k = len(rc)
    if k < BATCH_MIN_STEPS:
        for j in range(k):
            _rot_rows(vt, lo + j, rc[j], rs[j])
            _rot_rows(ut, lo + j, lc[j], ls[j])
        return
    m = sweep_matrices([rc, lc], [rs, ls], vt.dtype)
    vt[lo : lo + k + 1] = m[0] @ vt[lo : lo + k + 1]
    ut[lo : lo + k + 1] = m[1] @ ut[lo : lo + k + 1]


def _threshold(d: list[float], e: list[float], maxit: int) -> float:
    """Absolute convergence threshold (LAPACK dbdsqr, relative accuracy: ``sminoa``)."""
    n = len(d)
    if n <= 1:
        return 0.0
    sminoa = abs(d[0])
    mu = sminoa
    for i in range(1, n):
        if sminoa == 0.0:
            break
        mu = abs(d[i]) * (mu / (mu + abs(e[i - 1])))
        sminoa = min(sminoa, mu)
    sminoa /= math.sqrt(n)
    return max(TOL * sminoa, maxit * UNFL)


def _bottom_block(d: list[float], e: list[float], hi: int, thresh: float) -> tuple[int, float]:
    """Start ``lo`` of the bottom unreduced block ``lo..hi`` (negligible ``e`` zeroed) and
    the largest magnitude in it."""
    smax = abs(d[hi])
    for ll in range(hi - 1, -1, -1):
        abse = abs(e[ll])
        if abse <= thresh:
            e[ll] = 0.0
            return ll + 1, smax
        smax = max(smax, abs(d[ll]), abse)
    return 0, smax


def _relative_min(d: list[float], e: list[float], lo: int, hi: int) -> float | None:
    """Demmel-Kahan relative convergence tests on block ``lo..hi``: zero a negligible
    ``e`` and return None (the block split), else the estimate of its smallest value."""
    if abs(e[hi - 1]) <= TOL * abs(d[hi]):
        e[hi - 1] = 0.0
        return None
    mu = abs(d[lo])
    sminl = mu
    for i in range(lo, hi):
        if abs(e[i]) <= TOL * mu:
            e[i] = 0.0
            return None
        mu = abs(d[i + 1]) * (mu / (mu + abs(e[i])))
        sminl = min(sminl, mu)
    return sminl


def _shift(d: list[float], e: list[float], lo: int, hi: int, relative_gap: float) -> float:
    """Shift of the next sweep: zero when it would destroy the relative accuracy of the
    smallest value (``relative_gap = n tol sminl / smax``), else from the trailing 2x2."""
    if relative_gap <= max(EPS, 0.01 * TOL):
        return 0.0
    sll = abs(d[lo])
    shift = las2(d[hi - 1], e[hi - 1], d[hi])
    if sll > 0.0 and (shift / sll) ** 2 < EPS:
        return 0.0
    return shift


Rotations = tuple[list[float], list[float], list[float], list[float]]
"""One sweep's rotations: right cosines, right sines, left cosines, left sines."""


def _zero_shift_sweep(d: list[float], e: list[float], lo: int, hi: int) -> Rotations:
    """Demmel-Kahan zero-shift QR sweep on block ``lo..hi``, in place."""
    rc: list[float] = []
    rs: list[float] = []
    lc: list[float] = []
    ls: list[float] = []
    cs = 1.0
    oldcs = 1.0
    oldsn = 0.0
    for i in range(lo, hi):
        cs, sn, r = lartg(d[i] * cs, e[i])
        if i > lo:
            e[i - 1] = oldsn * r
        oldcs, oldsn, d[i] = lartg(oldcs * r, d[i + 1] * sn)
        rc.append(cs)
        rs.append(sn)
        lc.append(oldcs)
        ls.append(oldsn)
    h = d[hi] * cs
    d[hi] = h * oldcs
    e[hi - 1] = h * oldsn
    return rc, rs, lc, ls


def _shifted_sweep(d: list[float], e: list[float], lo: int, hi: int, shift: float) -> Rotations:
    """Golub-Kahan implicit-shift QR sweep on block ``lo..hi``, in place."""
    rc: list[float] = []
    rs: list[float] = []
    lc: list[float] = []
    ls: list[float] = []
    f = (abs(d[lo]) - shift) * (math.copysign(1.0, d[lo]) + shift / d[lo])
    g = e[lo]
    for i in range(lo, hi):
        cosr, sinr, r = lartg(f, g)
        if i > lo:
            e[i - 1] = r
        f = cosr * d[i] + sinr * e[i]
        e[i] = cosr * e[i] - sinr * d[i]
        g = sinr * d[i + 1]
        d[i + 1] = cosr * d[i + 1]
        cosl, sinl, r = lartg(f, g)
        d[i] = r
        f = cosl * e[i] + sinl * d[i + 1]
        d[i + 1] = cosl * d[i + 1] - sinl * e[i]
        if i < hi - 1:
            g = sinl * e[i + 1]
            e[i + 1] = cosl * e[i + 1]
        rc.append(cosr)
        rs.append(sinr)
        lc.append(cosl)
        ls.append(sinl)
    e[hi - 1] = f
    return rc, rs, lc, ls


def _sorted(
    d: list[float], ut: torch.Tensor, vt: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Make the values non-negative (flipping rows of ``vt``), then sort them descending."""
    for i in range(len(d)):
        if d[i] < 0.0:
            d[i] = -d[i]
            vt[i].neg_()
    s = torch.tensor(d, dtype=ut.dtype)
    order = torch.argsort(s, descending=True)
    return s[order], ut[order], vt[order]


def bdsqr(
    d: list[float], e: list[float], ut: torch.Tensor, vt: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int, int]:
    """Singular values and vectors of an upper bidiagonal matrix.

    With ``A = U @ B @ V^T`` on input (``B`` = bidiag(d, e)), returns the SVD of ``A``.

    Parameters
    ----------
    d : list[float]
        Diagonal, length n (consumed).
    e : list[float]
        Superdiagonal, length n - 1 (consumed).
    ut : torch.Tensor
        ``U^T``, shape (n, m); rotated in place.
    vt : torch.Tensor
        ``V^T``, shape (n, k); rotated in place.

    Returns
    -------
    s : torch.Tensor
        Singular values, shape (n,), descending, non-negative.
    ut, vt : torch.Tensor
        Rotated and permuted ``U^T`` (n, m) and ``V^T`` (n, k).
    flops, bytes : int
        Counted work and traffic (see module docstring).
    sweeps : int
        Number of QR sweeps performed.
    """
    n = len(d)
    flops = 0
    nbytes = 0
    sweeps = 0
    row_cost = ut.shape[1] + vt.shape[1]
    rot_flops = 6 * row_cost
    rot_bytes = 4 * row_cost * ut.element_size()
    maxit = 6 * n * n
    thresh = _threshold(d, e, maxit)
    hi = n - 1
    iters = 0
    while hi > 0:
        if iters > maxit:
            raise BdsqrError(f"bdsqr did not converge after {iters} inner steps (n={n})")
        lo, smax = _bottom_block(d, e, hi, thresh)
        if lo == hi:
            hi -= 1
            continue
        sminl = _relative_min(d, e, lo, hi)
        if sminl is None:
            continue
        shift = _shift(d, e, lo, hi, n * TOL * (sminl / smax))
        steps = hi - lo
        iters += steps
        sweeps += 1
        flops += steps * (SCALAR_FLOPS_PER_STEP + rot_flops)
        nbytes += steps * rot_bytes
        if shift == 0.0:
            rotations = _zero_shift_sweep(d, e, lo, hi)
        else:
            rotations = _shifted_sweep(d, e, lo, hi, shift)
        _apply_sweeps(vt, ut, lo, *rotations)
        if abs(e[hi - 1]) <= thresh:
            e[hi - 1] = 0.0
    s, ut, vt = _sorted(d, ut, vt)
    return s, ut, vt, flops + n, nbytes, sweeps
