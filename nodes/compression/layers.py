"""Compress any ``nn.Module``: every Conv2d / Linear above a size threshold becomes a TT layer.

A TT layer keeps only the TT cores as trainable parameters and rebuilds its dense weight
on each forward (``tt_to_full`` then the plan's inverse reshape), so fine-tuning trains
the cores and the compression ratio is preserved. Outputs equal those of the dense layer
with the reconstructed weight.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from nodes.compression.svd import SvdStats
from nodes.compression.tensorize import TensorPlan, plan_for
from nodes.compression.tt import relative_error, tt_svd, tt_to_full


class TTWeight(nn.Module):
    """Trainable TT cores of one weight, with its tensorization plan.

    Parameters
    ----------
    cores : list[torch.Tensor]
        Core k of shape (r_{k-1}, n_k, r_k).
    plan : TensorPlan
        Maps the reconstructed tensor back to the weight shape.
    """

    def __init__(self, cores: list[torch.Tensor], plan: TensorPlan) -> None:
        super().__init__()
        self.cores = nn.ParameterList([nn.Parameter(c.detach().clone()) for c in cores])
        self.plan = plan

    def forward(self) -> torch.Tensor:
        """Dense weight, shape ``plan.weight_shape``."""
        return self.plan.from_tensor(tt_to_full(list(self.cores)))

    @property
    def num_params(self) -> int:
        """Entries in the cores."""
        return sum(c.numel() for c in self.cores)


class TTConv2d(nn.Module):
    """Conv2d whose kernel (Cout, Cin/groups, kh, kw) is stored in TT format."""

    def __init__(self, conv: nn.Conv2d, cores: list[torch.Tensor], plan: TensorPlan) -> None:
        super().__init__()
        self.weight_tt = TTWeight(cores, plan)
        self.bias = None if conv.bias is None else nn.Parameter(conv.bias.detach().clone())
        self.stride, self.padding = conv.stride, conv.padding
        self.dilation, self.groups = conv.dilation, conv.groups
        if conv.padding_mode != "zeros":
            raise ValueError(f"TTConv2d supports padding_mode='zeros', got {conv.padding_mode!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (N, Cin, H, W) -> (N, Cout, H', W')."""
        w = self.weight_tt()
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


class TTLinear(nn.Module):
    """Linear layer whose weight (out, in) is stored in TT(-matrix) format."""

    def __init__(self, lin: nn.Linear, cores: list[torch.Tensor], plan: TensorPlan) -> None:
        super().__init__()
        self.weight_tt = TTWeight(cores, plan)
        self.bias = None if lin.bias is None else nn.Parameter(lin.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., in) -> (..., out)."""
        return F.linear(x, self.weight_tt(), self.bias)


@dataclass
class LayerReport:
    """What happened to one layer.

    Attributes
    ----------
    name : str
        Qualified module name.
    plan : TensorPlan
        Chosen tensorization.
    ranks : tuple[int, ...]
        TT ranks (r_0 .. r_d).
    dense_params, tt_params : int
        Weight entries before and after.
    rel_error : float
        ``||W - W_tt||_F / ||W||_F``.
    seconds : float
        Measured TT-SVD wall time (s).
    """

    name: str
    plan: TensorPlan
    ranks: tuple[int, ...]
    dense_params: int
    tt_params: int
    rel_error: float
    seconds: float

    def as_dict(self) -> dict[str, object]:
        """JSON-friendly row."""
        return {
            "layer": self.name,
            "ranks": list(self.ranks),
            "dense_params": self.dense_params,
            "tt_params": self.tt_params,
            "ratio": self.dense_params / self.tt_params,
            "rel_error": self.rel_error,
            "seconds": self.seconds,
            **{f"plan_{k}": v for k, v in self.plan.as_dict().items()},
        }


@dataclass
class CompressionResult:
    """A compressed copy of a model and per-layer reports.

    Attributes
    ----------
    model : nn.Module
        Copy of the input with TT layers in place.
    layers : list[LayerReport]
        One per compressed layer.
    params_before, params_after : int
        All parameters of the model before / after.
    weight_rel_error : float
        Relative Frobenius error over all compressed weights together.
    svd_stats : SvdStats
        SVD counters over the whole compression.
    """

    model: nn.Module
    layers: list[LayerReport] = field(default_factory=list)
    params_before: int = 0
    params_after: int = 0
    weight_rel_error: float = 0.0
    svd_stats: SvdStats = field(default_factory=SvdStats)

    @property
    def ratio(self) -> float:
        """Whole-model compression ratio (all parameters before / after)."""
        return self.params_before / max(self.params_after, 1)


def compressible_layers(
    model: nn.Module, min_numel: int
) -> list[tuple[str, nn.Conv2d | nn.Linear]]:
    """Conv2d / Linear modules whose weight has at least ``min_numel`` entries."""
    found: list[tuple[str, nn.Conv2d | nn.Linear]] = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Conv2d | nn.Linear) and mod.weight.numel() >= min_numel:
            found.append((name, mod))
    return found


def _set_submodule(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, child, new)


def compress_module(
    model: nn.Module,
    eps: float | None,
    max_rank: int | None = None,
    min_numel: int = 1024,
    backend: str = "lapack",
    max_modes: int = 3,
) -> CompressionResult:
    """TT-compress every Conv2d / Linear of ``model`` with >= ``min_numel`` weight entries.

    Parameters
    ----------
    model : nn.Module
        Not modified; a deep copy is compressed.
    eps : float or None
        Relative TT-SVD error bound per layer.
    max_rank : int, optional
        Cap on TT ranks.
    min_numel : int
        Smaller layers stay dense.
    backend : str
        SVD back-end (``"lapack"``, ``"gram"`` or ``"two_phase"``).
    max_modes : int
        Max TT-matrix modes for Linear weights.

    Returns
    -------
    CompressionResult
    """
    out = copy.deepcopy(model).cpu()
    result = CompressionResult(model=out)
    result.params_before = sum(p.numel() for p in model.parameters())
    err2 = 0.0
    norm2 = 0.0
    for name, mod in compressible_layers(out, min_numel):
        w = mod.weight.detach()
        plan = plan_for(tuple(w.shape), max_modes)
        if len(plan.tensor_shape) < 2:
            continue
        t0 = time.perf_counter()
        tt = tt_svd(plan.to_tensor(w), eps, max_rank, backend, result.svd_stats)
        seconds = time.perf_counter() - t0
        if tt.num_params >= w.numel():
            continue  # TT would not save anything: keep the layer dense
        approx = plan.from_tensor(tt.full())
        if isinstance(mod, nn.Conv2d):
            new: nn.Module = TTConv2d(mod, tt.cores, plan)
        else:
            new = TTLinear(mod, tt.cores, plan)
        _set_submodule(out, name, new)
        diff2 = float(torch.linalg.vector_norm(w - approx)) ** 2
        ref2 = float(torch.linalg.vector_norm(w)) ** 2
        err2 += diff2
        norm2 += ref2
        result.layers.append(
            LayerReport(name, plan, tt.ranks, w.numel(), tt.num_params,
                        relative_error(w, approx), seconds)
        )
    result.params_after = sum(p.numel() for p in out.parameters())
    result.weight_rel_error = (err2 / norm2) ** 0.5 if norm2 > 0 else 0.0
    return result
