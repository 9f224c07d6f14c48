"""``workload.compress`` of an experiment YAML: the TT-Edge compression experiment.

Imports pydantic and the standard library only (plus the torch-free engine catalog).
Every key has a default; see ``experiments/tt_edge.yaml`` for a commented example.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from pydantic import Field, field_validator, model_validator

from kernel.frozen import Frozen, SpecDir
from nodes.compression.cost_model import NUMERIC_FIELDS, PROFILES

BUILTIN_MODELS = ("auto", "digits_cnn", "resnet32")
_IMPORT_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class CompressSpec(Frozen):
    """Validated settings of the compression experiment.

    Attributes
    ----------
    dataset : {"digits", "cifar10"}
        sklearn digits (bundled) or CIFAR-10 from ``cifar10_path``.
    cifar10_path : str or None
        Folder with the CIFAR-10 python-pickle batches; required for ``cifar10``.
    model : str
        ``auto`` (digits -> digits_cnn, cifar10 -> resnet32), ``digits_cnn``, ``resnet32``,
        or ``"package.module:factory"`` returning any ``torch.nn.Module``.
    eps_list : tuple[float, ...]
        Relative TT-SVD error bounds to sweep, each in (0, 1].
    max_rank : int or None
        Cap on TT ranks (None: eps alone decides).
    min_numel : int
        Conv2d/Linear layers with fewer weight entries stay dense.
    max_modes : int
        Max TT-matrix modes for Linear weights.
    svd_backend : {"lapack", "gram", "two_phase"}
        SVD used for the compression whose accuracy is measured.
    train_steps : int
        Mini-batch steps of the initial training.
    train_max_seconds : float
        Safety cap on the initial training's wall clock (s). Results are reproducible
        while it does not bind; the steps actually done are recorded.
    train_lr : float
        Adam learning rate of the initial training.
    finetune_steps : int
        Mini-batch steps of the fine-tune after compression (0: skip).
    finetune_lr : float
        Adam learning rate of the fine-tune.
    batch_size : int
        Samples per step.
    test_fraction : float
        Held-out fraction of digits.
    train_limit, test_limit : int or None
        Cap on CIFAR-10 samples per split.
    engine_profile : str
        MODELLED device for the engine cost table (see ``cost_model.PROFILES``).
    engine_overrides : tuple[tuple[str, float], ...]
        Replace profile parameters by name; written as a mapping in YAML, stored as sorted
        (name, value) pairs so the frozen spec stays hashable.
    model_engine_cost : bool
        Count SVD FLOPs per phase (two_phase back-end) for the modelled engine table.
    torch_threads : int
        torch intra-op threads while running.
    quick : bool
        Shrink training/fine-tuning so the run ends in < 2 min on 2 cores.
    """

    dataset: Literal["digits", "cifar10"] = "digits"
    cifar10_path: SpecDir | None = None
    model: str = "auto"
    eps_list: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
    max_rank: int | None = Field(default=None, ge=1)
    min_numel: int = Field(default=1024, ge=1)
    max_modes: int = Field(default=3, ge=1, le=8)
    svd_backend: Literal["lapack", "gram", "two_phase"] = "lapack"
    train_steps: int = Field(default=600, ge=0)
    train_max_seconds: float = Field(default=60.0, gt=0)
    train_lr: float = Field(default=3e-3, gt=0)
    finetune_steps: int = Field(default=100, ge=0)
    finetune_lr: float = Field(default=1e-3, gt=0)
    batch_size: int = Field(default=64, ge=1)
    test_fraction: float = Field(default=0.25, gt=0, lt=1)
    train_limit: int | None = Field(default=5000, ge=1)
    test_limit: int | None = Field(default=1000, ge=1)
    engine_profile: str = "riscv-edge-ttd"
    engine_overrides: tuple[tuple[str, float], ...] = ()
    model_engine_cost: bool = True
    torch_threads: int = Field(default=1, ge=1, le=64)
    quick: bool = False

    @field_validator("eps_list")
    @classmethod
    def _eps_range(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v:
            raise ValueError("eps_list must hold at least one value")
        bad = [e for e in v if not 0.0 < e <= 1.0]
        if bad:
            raise ValueError(f"eps_list values must be in (0, 1]; got {bad}")
        return v

    @field_validator("model")
    @classmethod
    def _model_name(cls, v: str) -> str:
        if v not in BUILTIN_MODELS and not _IMPORT_RE.match(v):
            raise ValueError(
                f"model {v!r} unknown; allowed: {list(BUILTIN_MODELS)} or 'package.module:factory'"
            )
        return v

    @field_validator("engine_profile")
    @classmethod
    def _profile(cls, v: str) -> str:
        if v not in PROFILES:
            raise ValueError(f"engine_profile {v!r} unknown; allowed: {sorted(PROFILES)}")
        return v

    @field_validator("engine_overrides", mode="before")
    @classmethod
    def _overrides_pairs(cls, v: object) -> object:
        if isinstance(v, Mapping):
            return tuple(sorted(v.items()))
        return v

    @field_validator("engine_overrides")
    @classmethod
    def _overrides(cls, pairs: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
        v = dict(pairs)
        unknown = sorted(set(v) - set(NUMERIC_FIELDS))
        if unknown:
            raise ValueError(
                f"engine_overrides keys {unknown} unknown; allowed: {list(NUMERIC_FIELDS)}"
            )
        bad = {k: x for k, x in v.items() if not x > 0}
        if bad:
            raise ValueError(f"engine_overrides values must be > 0; got {bad}")
        return pairs

    @model_validator(mode="after")
    def _dataset_needs(self) -> CompressSpec:
        if self.dataset == "cifar10" and not self.cifar10_path:
            raise ValueError("cifar10_path is required when dataset is 'cifar10'")
        if self.dataset == "digits" and self.model == "resnet32":
            raise ValueError("model 'resnet32' needs 3x32x32 inputs: use dataset 'cifar10'")
        if self.dataset == "cifar10" and self.model == "digits_cnn":
            raise ValueError("model 'digits_cnn' needs 1x8x8 inputs: use dataset 'digits'")
        return self

    def resolved_model(self) -> str:
        """Model name after resolving ``auto``."""
        if self.model != "auto":
            return self.model
        return "digits_cnn" if self.dataset == "digits" else "resnet32"
