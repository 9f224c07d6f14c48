"""TT codec for FL uplinks: a state dict (numpy) <-> a flat dict of numpy arrays.

Pure functions on ``dict[str, numpy.ndarray]`` so the result fits a Flower ``ArrayRecord``.
Floating arrays with >= 2 dims and >= ``min_numel`` entries are tensorized
(:func:`nodes.compression.tensorize.plan_for`) and TT-SVD'd with relative error ``eps``
(computed in float64, cores stored in the array's dtype); everything else, and any
array whose TT form would not be smaller, passes through raw. ``tensorization`` picks the
tensor per array: the TT-Edge plan, the plain matrix (a TT of order 2), or the smaller of
the two (``auto``); the decoder reads the plan from the metadata, so it needs no option.
Encoded keys::

    "<key>@raw"                    the original array
    "<key>@tt/shape"               int64, original shape
    "<key>@tt/pre" "@tt/perm" "@tt/tensor"   int64, the tensorization plan
    "<key>@tt/dtype"               uint8, ASCII of numpy dtype.str (e.g. "<f4")
    "<key>@tt/core<k>"             core k, shape (r_{k-1}, n_k, r_k)

The suffix after the last ``@`` names the part, so keys may themselves contain ``@``.
Compress model updates (deltas) or weights: the codec does not care.
"""

from __future__ import annotations

import numpy as np
import torch

from nodes.compression import packed
from nodes.compression.svd import SvdStats
from nodes.compression.tensorize import TensorPlan, matrix_plan, plan_for
from nodes.compression.tt import TTTensor, tt_svd, tt_to_full

RAW = "raw"
TT = "tt/"


def _ints(values: tuple[int, ...]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


#: How an array becomes the tensor that TT-SVD decomposes (``tensorization``).
TENSORIZATIONS = ("tt", "matrix", "auto")


def encode_update(
    arrays: dict[str, np.ndarray],
    eps: float,
    max_rank: int | None = None,
    min_numel: int = 1024,
    backend: str = "lapack",
    stats: SvdStats | None = None,
    tensorization: str = "tt",
) -> dict[str, np.ndarray]:
    """TT-encode a state dict.

    Parameters
    ----------
    arrays : dict[str, numpy.ndarray]
        Parameter name -> array (any shapes/dtypes).
    eps : float
        Relative Frobenius error bound per compressed array, > 0 (holds when
        ``max_rank`` is None, up to float rounding of the stored cores).
    max_rank : int, optional
        Cap on TT ranks (the error bound may then not hold).
    min_numel : int
        Arrays with fewer entries pass through raw.
    backend : {"lapack", "gram", "two_phase"}
        SVD back-end of the TT-SVDs (:mod:`nodes.compression.svd`).
    stats : SvdStats, optional
        Receives the SVDs' time (and FLOPs, two_phase) per phase.
    tensorization : {"tt", "matrix", "auto"}
        ``tt``: :func:`~nodes.compression.tensorize.plan_for` (conv kernels as
        (Cin, kh, kw, Cout), linear weights as TT-matrices); ``matrix``: every array as
        the (shape[0], prod(shape[1:])) matrix, a TT of order 2 (= truncated SVD);
        ``auto``: both, per array, keeping the one with fewer entries (ties: ``tt``).
        The error bound ``eps`` holds for each.

    Returns
    -------
    dict[str, numpy.ndarray]
        Flat encoded dict (see module docstring).
    """
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    if max_rank is not None and max_rank < 1:
        raise ValueError(f"max_rank must be >= 1 or None, got {max_rank}")
    if tensorization not in TENSORIZATIONS:
        raise ValueError(f"tensorization must be one of {TENSORIZATIONS}, got {tensorization!r}")
    out: dict[str, np.ndarray] = {}
    for key, arr in arrays.items():
        arr = np.asarray(arr)
        best = None
        if arr.ndim >= 2 and arr.size >= min_numel and np.issubdtype(arr.dtype, np.floating):
            best = _smallest_tt(arr, eps, max_rank, backend, stats, tensorization)
        if best is None:
            out[f"{key}@{RAW}"] = arr
        else:
            out.update(_tt_entries(key, arr, *best))
    return out


def _smallest_tt(
    arr: np.ndarray,
    eps: float,
    max_rank: int | None,
    backend: str,
    stats: SvdStats | None,
    tensorization: str,
) -> tuple[TensorPlan, TTTensor] | None:
    """The plan and TT of ``arr`` with the fewest entries, or None if none beats raw."""
    plans = {"tt": [plan_for(arr.shape)], "matrix": [matrix_plan(arr.shape)],
             "auto": [plan_for(arr.shape), matrix_plan(arr.shape)]}[tensorization]
    w = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float64))
    best: tuple[TensorPlan, TTTensor] | None = None
    for plan in plans:
        if len(plan.tensor_shape) < 2:
            continue
        tt = tt_svd(plan.to_tensor(w), eps, max_rank, backend, stats)
        size = best[1].num_params if best is not None else arr.size
        if tt.num_params < size:
            best = (plan, tt)
    return best


def _tt_entries(
    key: str, arr: np.ndarray, plan: TensorPlan, tt: TTTensor
) -> dict[str, np.ndarray]:
    """Encoded entries of one TT-compressed array (metadata + cores in ``arr``'s dtype)."""
    out = {
        f"{key}@{TT}shape": _ints(arr.shape),
        f"{key}@{TT}pre": _ints(plan.pre_shape),
        f"{key}@{TT}perm": _ints(plan.perm),
        f"{key}@{TT}tensor": _ints(plan.tensor_shape),
        f"{key}@{TT}dtype": np.frombuffer(arr.dtype.str.encode("ascii"), dtype=np.uint8),
    }
    for k, core in enumerate(tt.cores):
        out[f"{key}@{TT}core{k}"] = core.numpy().astype(arr.dtype)
    return out


def decode_update(encoded: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inverse of :func:`encode_update`: original keys, shapes and dtypes.

    Parameters
    ----------
    encoded : dict[str, numpy.ndarray]
        Output of :func:`encode_update`, or of :func:`nodes.compression.packed.pack` on it.

    Returns
    -------
    dict[str, numpy.ndarray]
        Key order follows the first appearance of each key in ``encoded``.

    Raises
    ------
    ValueError
        A key without a known part suffix, or a TT entry with missing parts.
    """
    if packed.is_packed(encoded):  # the few-arrays wire form (nodes/compression/packed.py)
        encoded = packed.unpack(encoded)
    groups: dict[str, dict[str, np.ndarray]] = {}
    for name, arr in encoded.items():
        key, sep, part = name.rpartition("@")
        if not sep or not (part == RAW or part.startswith(TT)):
            raise ValueError(f"encoded key {name!r} has no '@raw' or '@tt/...' suffix")
        groups.setdefault(key, {})[part] = arr
    out: dict[str, np.ndarray] = {}
    for key, parts in groups.items():
        if RAW in parts:
            out[key] = parts[RAW]
            continue
        needed = [f"{TT}{p}" for p in ("shape", "pre", "perm", "tensor", "dtype", "core0")]
        missing = [p for p in needed if p not in parts]
        if missing:
            raise ValueError(f"encoded entry {key!r} lacks parts {missing}")
        ncores = sum(1 for p in parts if p.startswith(f"{TT}core"))
        cores = [torch.from_numpy(np.asarray(parts[f"{TT}core{k}"], dtype=np.float64))
                 for k in range(ncores)]
        shape = tuple(int(x) for x in parts[f"{TT}shape"])
        plan = TensorPlan(
            "codec", shape, tuple(int(x) for x in parts[f"{TT}pre"]),
            tuple(int(x) for x in parts[f"{TT}perm"]), tuple(int(x) for x in parts[f"{TT}tensor"]),
        )
        dtype = np.dtype(bytes(np.asarray(parts[f"{TT}dtype"], dtype=np.uint8)).decode("ascii"))
        out[key] = plan.from_tensor(tt_to_full(cores)).numpy().astype(dtype)
    return out


def encoded_nbytes(encoded: dict[str, np.ndarray]) -> int:
    """Payload bytes of an encoded dict (sum of array ``nbytes``, metadata included)."""
    return int(sum(np.asarray(a).nbytes for a in encoded.values()))
