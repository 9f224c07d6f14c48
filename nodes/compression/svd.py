"""SVD back-ends for TT-SVD, with per-phase time, FLOP and byte counters.

Back-ends (registered by name in :data:`BACKENDS`):

- ``lapack``: ``torch.linalg.svd`` (LAPACK ``gesdd`` on CPU), in the input dtype. Only
  wall time is counted; its phases are internal to LAPACK.
- ``randomized``: Halko-Martinsson-Tropp (2011, Alg. 4.4) randomized range finder with
  oversampling ``OVERSAMPLE`` and ``POWER_ITERS`` subspace (power) iterations, then the
  exact SVD of the small projected matrix, when the caller's target rank ``r`` satisfies
  ``r + OVERSAMPLE <= CROSSOVER * min(m, n)``; otherwise (rank unknown or not small) the
  exact ``lapack`` SVD. Returns only the leading ``r + OVERSAMPLE`` triplets; its error is
  larger than the exact truncation's (measured in ``bench/tt.py``). Seeded, deterministic.
- ``gram``: exact truncated SVD through the Gram matrix of the short side: for an (m, n)
  matrix with m <= n, the eigendecomposition ``A A^T = U diag(w) U^T`` (``syevd``, an
  (m, m) problem), then ``P = U^T A``, ``s`` = the row norms of ``P`` and ``vh = P / s``
  (for m > n the same on ``A^T A``). Formed in float64, so a float32 input keeps float32
  accuracy (the Gram squares the condition number; float64's ``sqrt(eps)`` ~ 1.5e-8 is
  below float32's ``eps``); a float64 input goes to ``lapack``. With a target rank ``r``
  only the leading ``r`` triplets are formed. ``u @ diag(s) @ vh`` is the orthogonal
  projection of ``A`` onto the computed leading subspace, so the truncation error equals
  ``lapack``'s up to rounding (tested; equal to 7 digits in ``bench/tt.py``). Far cheaper
  than ``gesdd`` when m << n (or m >> n), the TT unfoldings' case.
- ``two_phase``: written here in torch, float64: Householder bidiagonalization
  (:func:`nodes.compression.bidiag.gebrd`), forming the orthogonal factors
  (:func:`~nodes.compression.bidiag.orgbr`), then implicit-shift QR with Givens rotations
  on the bidiagonal (:func:`nodes.compression.bdsqr.bdsqr`). Phases ``gebrd``, ``orgbr``
  and ``bdsqr`` are timed (measured, wall clock) and their FLOPs/bytes counted.

TT-Edge (arXiv 2511.13738) groups ``gebrd`` (+ ``orgbr``) as "bidiagonalization" and
``bdsqr`` as "diagonalization"; :meth:`SvdStats.by_paper_phase` gives that grouping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from nodes.compression.bdsqr import bdsqr
from nodes.compression.bidiag import gebrd, orgbr

PHASES = ("gebrd", "orgbr", "bdsqr", "lapack", "randomized", "gram")
OVERSAMPLE = 8
"""Extra sketch columns of the randomized SVD (HMT's ``p``)."""
POWER_ITERS = 2
"""Subspace iterations of the randomized SVD (HMT's ``q``)."""
CROSSOVER = 0.5
"""The randomized SVD runs when ``rank + OVERSAMPLE <= CROSSOVER * min(m, n)``: measured
break-even on this machine (``bench/tt.py``; at 0.5 the sketch is ~as fast as ``gesdd``)."""
SEED = 0
"""Seed of the Gaussian test matrices (one generator per call: results are reproducible)."""
PAPER_PHASES = {"bidiagonalization": ("gebrd", "orgbr"), "diagonalization": ("bdsqr",)}


@dataclass
class PhaseCount:
    """Accumulated cost of one phase.

    Attributes
    ----------
    seconds : float
        Measured wall time (s).
    flops : int
        Counted floating-point operations.
    bytes : int
        Counted compulsory memory traffic (bytes).
    """

    seconds: float = 0.0
    flops: int = 0
    bytes: int = 0

    def add(self, seconds: float, flops: int = 0, nbytes: int = 0) -> None:
        """Accumulate one measurement."""
        self.seconds += seconds
        self.flops += flops
        self.bytes += nbytes


@dataclass
class SvdStats:
    """Counters over many SVD calls.

    Attributes
    ----------
    phases : dict[str, PhaseCount]
        One entry per name in :data:`PHASES`.
    calls : int
        Number of SVDs.
    sweeps : int
        QR sweeps in ``bdsqr`` (two_phase only).
    shapes : list[tuple[int, int]]
        Shape (m, n) of every decomposed matrix.
    """

    phases: dict[str, PhaseCount] = field(
        default_factory=lambda: {p: PhaseCount() for p in PHASES}
    )
    calls: int = 0
    sweeps: int = 0
    shapes: list[tuple[int, int]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        """Total measured SVD wall time (s)."""
        return sum(p.seconds for p in self.phases.values())

    def by_paper_phase(self) -> dict[str, PhaseCount]:
        """Counters grouped as the paper's two phases (two_phase back-end only)."""
        out = {}
        for name, members in PAPER_PHASES.items():
            acc = PhaseCount()
            for m in members:
                p = self.phases[m]
                acc.add(p.seconds, p.flops, p.bytes)
            out[name] = acc
        return out

    def as_dict(self) -> dict[str, float]:
        """Flat dict ``{phase_seconds, phase_flops, phase_bytes, calls, sweeps}``."""
        out: dict[str, float] = {"calls": self.calls, "sweeps": self.sweeps}
        for name, p in self.phases.items():
            out[f"{name}_seconds"] = p.seconds
            out[f"{name}_flops"] = p.flops
            out[f"{name}_bytes"] = p.bytes
        return out


SvdResult = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _count(stats: SvdStats | None, phase: str, t0: float, a: torch.Tensor) -> None:
    """Add one SVD of ``a`` (m, n), begun at ``t0``, to ``stats`` under ``phase``."""
    if stats is not None:
        stats.phases[phase].add(time.perf_counter() - t0)
        stats.calls += 1
        stats.shapes.append((int(a.shape[-2]), int(a.shape[-1])))


def svd_lapack(
    a: torch.Tensor, stats: SvdStats | None = None, rank: int | None = None
) -> SvdResult:
    """Thin SVD by ``torch.linalg.svd``.

    Parameters
    ----------
    a : torch.Tensor
        Shape (m, n) or a batch (..., m, n), floating.
    stats : SvdStats, optional
        Receives the wall time under phase ``lapack``.
    rank : int, optional
        Ignored (all ``min(m, n)`` triplets are computed).

    Returns
    -------
    u, s, vh : torch.Tensor
        Shapes (m, k), (k,), (k, n) with k = min(m, n); ``a ~= u @ diag(s) @ vh``.
    """
    t0 = time.perf_counter()
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    _count(stats, "lapack", t0, a)
    return u, s, vh


def randomized_applies(shape: tuple[int, int], rank: int | None) -> bool:
    """Whether :func:`svd_randomized` sketches (True) or falls back to the exact SVD."""
    return rank is not None and rank + OVERSAMPLE <= CROSSOVER * min(shape)


def svd_randomized(
    a: torch.Tensor, stats: SvdStats | None = None, rank: int | None = None
) -> SvdResult:
    """Truncated SVD by a randomized range finder (HMT 2011) or, if the rank is not small,
    exactly.

    Parameters
    ----------
    a : torch.Tensor
        Shape (m, n) or a batch (..., m, n), floating (a batch shares the test matrix;
        give ``stats`` only for a single matrix).
    stats : SvdStats, optional
        Receives the wall time under phase ``randomized`` (or ``lapack`` on fallback).
    rank : int, optional
        Target rank ``r``; None falls back to :func:`svd_lapack`.

    Returns
    -------
    u, s, vh : torch.Tensor
        Shapes (m, l), (l,), (l, n) with ``l = r + OVERSAMPLE`` (sketched) or
        ``min(m, n)`` (exact); ``s`` descending.
    """
    m, n = int(a.shape[-2]), int(a.shape[-1])
    if not randomized_applies((m, n), rank):
        return svd_lapack(a, stats)
    assert rank is not None
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(SEED)
    omega = torch.randn(n, rank + OVERSAMPLE, generator=gen, dtype=a.dtype)
    q, _ = torch.linalg.qr(a @ omega)
    for _ in range(POWER_ITERS):
        z, _ = torch.linalg.qr(a.mT @ q)
        q, _ = torch.linalg.qr(a @ z)
    ub, s, vh = torch.linalg.svd(q.mT @ a, full_matrices=False)
    u = q @ ub
    _count(stats, "randomized", t0, a)
    return u, s, vh


def svd_gram(
    a: torch.Tensor, stats: SvdStats | None = None, rank: int | None = None
) -> SvdResult:
    """Exact (truncated) SVD through the eigendecomposition of the short side's Gram matrix.

    For m <= n: ``A A^T = U diag(w) U^T`` in float64 (``torch.linalg.eigh``), keep the
    ``k`` leading eigenvectors ``U_k``, ``P = U_k^T A`` (k, n), ``s`` = row norms of ``P``,
    ``vh = P / s``. For m > n the same on ``A^T A`` with the roles of ``u`` and ``vh``
    swapped. ``u @ diag(s) @ vh`` is then the orthogonal projection of ``A`` onto the span
    of the computed singular vectors (``U_k U_k^T A``): the rank-k truncation error equals
    the exact SVD's up to rounding, and with all ``min(m, n)`` triplets ``A`` is
    reconstructed to rounding even when it is rank-deficient. A direction whose singular
    value is exactly 0 gets a zero row of ``vh`` (column of ``u`` for m > n); directions
    with singular values below ~1e-8 ``s[0]`` are orthogonal only to that level (the
    Gram's rounding), their product ``s * vh`` is still exact.

    Parameters
    ----------
    a : torch.Tensor
        Shape (m, n) or a batch (..., m, n), floating. Float32 (or narrower) is computed in
        float64 and returned in ``a.dtype``; float64 goes to :func:`svd_lapack` (no wider
        type to keep its precision).
    stats : SvdStats, optional
        Receives the wall time under phase ``gram`` (``lapack`` for a float64 input).
    rank : int, optional
        Triplets to form, ``k = min(rank, m, n)``; None forms all ``min(m, n)``.

    Returns
    -------
    u, s, vh : torch.Tensor
        Shapes (..., m, k), (..., k), (..., k, n); ``s`` descending.
    """
    if a.dtype == torch.float64:
        return svd_lapack(a, stats)
    t0 = time.perf_counter()
    m, n = int(a.shape[-2]), int(a.shape[-1])
    k = min(m, n) if rank is None else max(1, min(rank, m, n))
    w = a.to(torch.float64)
    wide = m <= n
    if not wide:
        w = w.mT
    _, evecs = torch.linalg.eigh(w @ w.mT)  # ascending eigenvalues
    lead = evecs[..., -k:].flip(-1)  # (.., short, k), descending
    p = lead.mT @ w  # (.., k, long): U_k^T A (or V_k^T A^T)
    s = torch.linalg.vector_norm(p, dim=-1)
    if k > 1 and not bool((s[..., :-1] >= s[..., 1:]).all()):
        # The eigenvalue order and the row norms agree except at the Gram's rounding level.
        s, order = torch.sort(s, dim=-1, descending=True, stable=True)
        lead = lead.gather(-1, order.unsqueeze(-2).expand_as(lead))
        p = p.gather(-2, order.unsqueeze(-1).expand_as(p))
    other = p / s.clamp_min(torch.finfo(torch.float64).tiny).unsqueeze(-1)
    u, vh = (lead, other) if wide else (other.mT, lead.mT)
    _count(stats, "gram", t0, a)
    return u.to(a.dtype), s.to(a.dtype), vh.to(a.dtype)


def svd_two_phase(
    a: torch.Tensor, stats: SvdStats | None = None, rank: int | None = None
) -> SvdResult:
    """Thin SVD by Householder bidiagonalization then implicit-shift QR, compiled (float64).

    Same steps and counters as :func:`svd_two_phase_reference`, run by
    :mod:`nodes.compression.compiled` (numba).

    Parameters
    ----------
    a : torch.Tensor
        Shape (m, n), floating; computed in float64, returned in ``a.dtype``.
    stats : SvdStats, optional
        Receives time, FLOPs and bytes per phase (``gebrd``, ``orgbr``, ``bdsqr``).
    rank : int, optional
        Ignored (all ``min(m, n)`` triplets are computed).

    Returns
    -------
    u, s, vh : torch.Tensor
        Shapes (m, k), (k,), (k, n) with k = min(m, n); ``a ~= u @ diag(s) @ vh``.
    """
    from nodes.compression import compiled  # numba: imported (and compiled) on first use

    transposed = a.shape[0] < a.shape[1]
    w = (a.T if transposed else a).detach().to(torch.float64).numpy()
    t0 = time.perf_counter()
    bd = compiled.gebrd(w)
    t1 = time.perf_counter()
    q, p, f_org, b_org = compiled.orgbr(bd)
    t2 = time.perf_counter()
    s, ut, vt, f_qr, b_qr, sweeps = compiled.bdsqr(
        bd.d, bd.e, np.ascontiguousarray(q.T), np.ascontiguousarray(p.T)
    )
    t3 = time.perf_counter()
    if stats is not None:
        stats.phases["gebrd"].add(t1 - t0, bd.flops, bd.bytes)
        stats.phases["orgbr"].add(t2 - t1, f_org, b_org)
        stats.phases["bdsqr"].add(t3 - t2, f_qr, b_qr)
        stats.calls += 1
        stats.sweeps += sweeps
        stats.shapes.append((int(a.shape[0]), int(a.shape[1])))
    u, vh = ut.T, vt
    if transposed:
        u, vh = vh.T, u.T
    return tuple(  # type: ignore[return-value]
        torch.from_numpy(np.ascontiguousarray(x)).to(a.dtype) for x in (u, s, vh)
    )


def svd_two_phase_reference(
    a: torch.Tensor, stats: SvdStats | None = None, rank: int | None = None
) -> SvdResult:
    """Thin SVD by Householder bidiagonalization then implicit-shift QR (float64), in torch.

    The readable reference of :func:`svd_two_phase` (same counters; 30-70x slower than LAPACK,
    measured in ``bench/tt.py``).

    Parameters
    ----------
    a : torch.Tensor
        Shape (m, n), floating; computed in float64, returned in ``a.dtype``.
    stats : SvdStats, optional
        Receives time, FLOPs and bytes per phase (``gebrd``, ``orgbr``, ``bdsqr``).
    rank : int, optional
        Ignored (all ``min(m, n)`` triplets are computed).

    Returns
    -------
    u, s, vh : torch.Tensor
        Shapes (m, k), (k,), (k, n) with k = min(m, n); ``a ~= u @ diag(s) @ vh``.
    """
    transposed = a.shape[0] < a.shape[1]
    w = (a.T if transposed else a).to(torch.float64)
    t0 = time.perf_counter()
    bd = gebrd(w)
    t1 = time.perf_counter()
    q, p, f_org, b_org = orgbr(bd, torch.float64)
    t2 = time.perf_counter()
    s, ut, vt, f_qr, b_qr, sweeps = bdsqr(
        list(bd.d), list(bd.e), q.T.contiguous(), p.T.contiguous()
    )
    t3 = time.perf_counter()
    if stats is not None:
        stats.phases["gebrd"].add(t1 - t0, bd.flops, bd.bytes)
        stats.phases["orgbr"].add(t2 - t1, f_org, b_org)
        stats.phases["bdsqr"].add(t3 - t2, f_qr, b_qr)
        stats.calls += 1
        stats.sweeps += sweeps
        stats.shapes.append((int(a.shape[0]), int(a.shape[1])))
    u, vh = ut.T, vt
    if transposed:
        u, vh = vh.T, u.T
    return u.to(a.dtype), s.to(a.dtype), vh.to(a.dtype)


BACKENDS: dict[str, Callable[[torch.Tensor, SvdStats | None, int | None], SvdResult]] = {
    "lapack": svd_lapack,
    "randomized": svd_randomized,
    "gram": svd_gram,
    "two_phase": svd_two_phase,
    "two_phase_reference": svd_two_phase_reference,
}


def svd(
    a: torch.Tensor,
    backend: str = "lapack",
    stats: SvdStats | None = None,
    rank: int | None = None,
) -> SvdResult:
    """Thin SVD with the named back-end (see :data:`BACKENDS`).

    Parameters
    ----------
    a : torch.Tensor
        Shape (m, n).
    backend : str
        A name in :data:`BACKENDS`: ``"lapack"``, ``"randomized"``, ``"gram"``,
        ``"two_phase"`` or ``"two_phase_reference"``.
    stats : SvdStats, optional
        Counters to update.
    rank : int, optional
        Target rank the caller will keep (used by ``randomized`` and ``gram`` only).

    Returns
    -------
    u, s, vh : torch.Tensor
        Shapes (m, k), (k,), (k, n), ``s`` descending; k = min(m, n) except for a
        sketched ``randomized`` SVD (k = rank + OVERSAMPLE) and for ``gram`` with a rank
        (k = min(rank, m, n)).
    """
    try:
        fn = BACKENDS[backend]
    except KeyError:
        raise ValueError(f"svd backend {backend!r} unknown; allowed: {sorted(BACKENDS)}") from None
    return fn(a, stats, rank)
