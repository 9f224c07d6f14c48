"""SVD back-ends for TT-SVD, with per-phase time, FLOP and byte counters.

Back-ends (registered by name in :data:`BACKENDS`):

- ``lapack``: ``torch.linalg.svd`` (LAPACK ``gesdd`` on CPU), in the input dtype. Only
  wall time is counted; its phases are internal to LAPACK.
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

import torch

from nodes.compression.bdsqr import bdsqr
from nodes.compression.bidiag import gebrd, orgbr

PHASES = ("gebrd", "orgbr", "bdsqr", "lapack")
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


def svd_lapack(a: torch.Tensor, stats: SvdStats | None = None) -> SvdResult:
    """Thin SVD by ``torch.linalg.svd``.

    Parameters
    ----------
    a : torch.Tensor
        Shape (m, n), floating.
    stats : SvdStats, optional
        Receives the wall time under phase ``lapack``.

    Returns
    -------
    u, s, vh : torch.Tensor
        Shapes (m, k), (k,), (k, n) with k = min(m, n); ``a ~= u @ diag(s) @ vh``.
    """
    t0 = time.perf_counter()
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    if stats is not None:
        stats.phases["lapack"].add(time.perf_counter() - t0)
        stats.calls += 1
        stats.shapes.append((int(a.shape[0]), int(a.shape[1])))
    return u, s, vh


def svd_two_phase(a: torch.Tensor, stats: SvdStats | None = None) -> SvdResult:
    """Thin SVD by Householder bidiagonalization then implicit-shift QR (float64).

    Parameters
    ----------
    a : torch.Tensor
        Shape (m, n), floating; computed in float64, returned in ``a.dtype``.
    stats : SvdStats, optional
        Receives time, FLOPs and bytes per phase (``gebrd``, ``orgbr``, ``bdsqr``).

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


BACKENDS: dict[str, Callable[[torch.Tensor, SvdStats | None], SvdResult]] = {
    "lapack": svd_lapack,
    "two_phase": svd_two_phase,
}


def svd(a: torch.Tensor, backend: str = "lapack", stats: SvdStats | None = None) -> SvdResult:
    """Thin SVD with the named back-end (see :data:`BACKENDS`).

    Parameters
    ----------
    a : torch.Tensor
        Shape (m, n).
    backend : str
        ``"lapack"`` or ``"two_phase"``.
    stats : SvdStats, optional
        Counters to update.

    Returns
    -------
    u, s, vh : torch.Tensor
        Shapes (m, k), (k,), (k, n), k = min(m, n), ``s`` descending.
    """
    try:
        fn = BACKENDS[backend]
    except KeyError:
        raise ValueError(f"svd backend {backend!r} unknown; allowed: {sorted(BACKENDS)}") from None
    return fn(a, stats)
