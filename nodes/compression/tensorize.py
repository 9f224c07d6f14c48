"""Tensorization: how a layer weight becomes the tensor that TT-SVD decomposes.

Every plan is ``reshape(pre_shape) -> permute(perm) -> reshape(tensor_shape)``, so the
inverse is always exact and the Frobenius norm is preserved (errors on the tensor are the
errors on the weight):

- conv kernel (Cout, Cin, kh, kw) -> (Cin, kh, kw, Cout) (TT-Edge / the TensorLy anchor),
  singleton modes dropped (1x1 kernels, Cin = 1);
- linear weight (out, in) -> TT-matrix: out = m_1...m_d, in = n_1...n_d factorized into
  balanced modes, tensor modes (m_1 n_1, ..., m_d n_d); d = min(max_modes, number of
  prime factors of out, of in); when d < 2 the plan is the plain (out, in) matrix
  (TT of order 2 = truncated SVD);
- any other array of >= 2 dims: (shape[0], prod(shape[1:])) matrix.

:func:`matrix_plan` gives that (shape[0], prod(shape[1:])) matrix for any array of >= 2
dims (a conv kernel as (Cout, Cin kh kw), a linear weight as itself): a TT of order 2,
i.e. a truncated SVD, the layout that keeps a gradient's low matrix rank (a sum of few
outer products) which the TT-matrix modes scatter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TensorPlan:
    """How a weight maps to a tensor and back.

    Attributes
    ----------
    kind : str
        ``"conv"``, ``"tt_matrix"``, ``"matrix"``.
    weight_shape : tuple[int, ...]
        Original weight shape.
    pre_shape : tuple[int, ...]
        Shape before permuting.
    perm : tuple[int, ...]
        Permutation applied to ``pre_shape``.
    tensor_shape : tuple[int, ...]
        Shape of the decomposed tensor (n_1, ..., n_d).
    out_modes, in_modes : tuple[int, ...]
        TT-matrix mode factorizations (``kind == "tt_matrix"`` only, else empty).
    """

    kind: str
    weight_shape: tuple[int, ...]
    pre_shape: tuple[int, ...]
    perm: tuple[int, ...]
    tensor_shape: tuple[int, ...]
    out_modes: tuple[int, ...] = ()
    in_modes: tuple[int, ...] = ()

    def to_tensor(self, weight: torch.Tensor) -> torch.Tensor:
        """Weight (``weight_shape``) -> tensor (``tensor_shape``)."""
        return weight.reshape(self.pre_shape).permute(self.perm).reshape(self.tensor_shape)

    def from_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Tensor (``tensor_shape``) -> weight (``weight_shape``); exact inverse."""
        permuted = tuple(self.pre_shape[p] for p in self.perm)
        inv = [0] * len(self.perm)
        for i, p in enumerate(self.perm):
            inv[p] = i
        return tensor.reshape(permuted).permute(inv).reshape(self.weight_shape)

    def as_dict(self) -> dict[str, object]:
        """JSON-friendly record of the chosen shapes."""
        return {
            "kind": self.kind,
            "weight_shape": list(self.weight_shape),
            "tensor_shape": list(self.tensor_shape),
            "perm": list(self.perm),
            "out_modes": list(self.out_modes),
            "in_modes": list(self.in_modes),
        }


def prime_factors(n: int) -> list[int]:
    """Prime factors of ``n`` >= 1 with multiplicity, ascending."""
    out = []
    p = 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def balanced_factors(n: int, d: int) -> tuple[int, ...]:
    """Factor ``n`` into ``d`` integers as equal as possible, descending.

    Largest prime factors first, each to the currently smallest bucket (greedy).

    Parameters
    ----------
    n : int
        Number to factor, >= 1.
    d : int
        Number of factors, >= 1.

    Returns
    -------
    tuple[int, ...]
        ``d`` factors with product ``n`` (some may be 1 when ``n`` has < d prime factors).
    """
    if n < 1 or d < 1:
        raise ValueError(f"balanced_factors needs n >= 1 and d >= 1, got n={n}, d={d}")
    buckets = [1] * d
    for p in sorted(prime_factors(n), reverse=True):
        i = min(range(d), key=lambda j: buckets[j])
        buckets[i] *= p
    return tuple(sorted(buckets, reverse=True))


def conv_plan(weight_shape: tuple[int, ...]) -> TensorPlan:
    """Plan for a conv kernel (Cout, Cin, kh, kw) -> (Cin, kh, kw, Cout), singletons dropped."""
    if len(weight_shape) != 4:
        raise ValueError(f"conv kernel must be 4-D (Cout, Cin, kh, kw), got {weight_shape}")
    perm = (1, 2, 3, 0)
    permuted = tuple(weight_shape[p] for p in perm)
    tensor_shape = tuple(n for n in permuted if n > 1) or (1,)
    return TensorPlan("conv", tuple(weight_shape), tuple(weight_shape), perm, tensor_shape)


def linear_plan(weight_shape: tuple[int, ...], max_modes: int = 3) -> TensorPlan:
    """Plan for a linear weight (out, in): balanced TT-matrix, or plain matrix if d < 2."""
    if len(weight_shape) != 2:
        raise ValueError(f"linear weight must be 2-D (out, in), got {weight_shape}")
    out_f, in_f = weight_shape
    d = min(max_modes, len(prime_factors(out_f)), len(prime_factors(in_f)))
    if d < 2:
        shape = (out_f, in_f)
        return TensorPlan("matrix", shape, shape, (0, 1), shape)
    out_modes = balanced_factors(out_f, d)
    in_modes = balanced_factors(in_f, d)
    perm = tuple(x for k in range(d) for x in (k, d + k))
    tensor_shape = tuple(m * n for m, n in zip(out_modes, in_modes, strict=True))
    return TensorPlan(
        "tt_matrix", (out_f, in_f), out_modes + in_modes, perm, tensor_shape, out_modes, in_modes
    )


def matrix_plan(weight_shape: tuple[int, ...]) -> TensorPlan:
    """Plan for any array of >= 2 dims as the (shape[0], prod(shape[1:])) matrix."""
    weight_shape = tuple(int(n) for n in weight_shape)
    if len(weight_shape) < 2:
        raise ValueError(f"cannot tensorize a {len(weight_shape)}-D array of shape {weight_shape}")
    shape = (weight_shape[0], math.prod(weight_shape[1:]))
    return TensorPlan("matrix", weight_shape, shape, (0, 1), shape)


def plan_for(weight_shape: tuple[int, ...], max_modes: int = 3) -> TensorPlan:
    """Plan by rank of the weight: 4-D conv, 2-D TT-matrix, other >= 2-D as a matrix."""
    weight_shape = tuple(int(n) for n in weight_shape)
    if len(weight_shape) == 4:
        return conv_plan(weight_shape)
    if len(weight_shape) == 2:
        return linear_plan(weight_shape, max_modes)
    return matrix_plan(weight_shape)
