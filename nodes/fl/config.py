"""Typed settings of the FL workload (``workload.fl`` in an experiment YAML).

Only pydantic and the name registries are imported here, so validation stays fast.
The ServerApp receives these settings as JSON in the run config and re-validates them.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from kernel.frozen import Frozen, SpecDir, SpecPath, spec_dir
from nodes.data.datasets import DATASETS, check_dataset_path
from nodes.data.partition import PARTITIONERS
from nodes.fl.strategies import STRATEGIES, check_params
from nodes.hosting import Hosted
from nodes.models import MODELS

Tier = Literal["edge", "fog", "cloud", "space"]
DEFAULT_TT_TIERS: tuple[Tier, ...] = ("edge", "fog", "space")


class DatasetSpec(Frozen):
    """Which data the silos hold."""

    name: str = "digits"
    path: SpecPath | None = None
    test_fraction: float = Field(0.2, gt=0, lt=1, description="held out by the server")
    local_test_fraction: float = Field(0.2, gt=0, lt=1, description="per-silo test split")
    num_samples: int = Field(3000, gt=0, description="synthetic only")
    num_features: int = Field(60, gt=0, description="synthetic only")
    num_classes: int = Field(10, ge=2, description="synthetic only")
    image_size: int = Field(32, gt=0, description="imagefolder only, pixels")

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        return DATASETS.check(v)

    @model_validator(mode="after")
    def _path_needed(self, info: ValidationInfo) -> DatasetSpec:
        if self.name in {"npz", "imagefolder", "cifar10"} and not self.path:
            raise ValueError(f"dataset {self.name!r} needs 'path'")
        if self.path and spec_dir(info) is not None:  # loading the spec: check it now
            check_dataset_path(self.name, Path(self.path))
        return self

    def loader_params(self, seed: int) -> tuple[tuple[str, object], ...]:
        """Keyword arguments of the registered loader, hashable (for caching)."""
        p: dict[str, object]
        if self.name == "synthetic":
            p = {
                "num_samples": self.num_samples,
                "num_features": self.num_features,
                "num_classes": self.num_classes,
                "seed": seed,
            }
        else:
            p = {"path": self.path, "image_size": self.image_size}
        return tuple(sorted(p.items()))


class PartitionerSpec(Frozen):
    """How the data is split among silos."""

    name: str = "iid"
    alpha: float = Field(0.5, gt=0, description="dirichlet / quantity-skew concentration")
    classes_per_silo: int = Field(2, ge=1, description="k-classes only")
    min_partition_size: int = Field(10, ge=1)

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        return PARTITIONERS.check(v)


class ModelSpec(Frozen):
    """Task model."""

    name: str = "cnn"
    width: int = Field(16, gt=0)

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        return MODELS.check(v)


class StrategySpec(Frozen):
    """A strategy by name (``nodes/fl/strategies.py``) or ``package.module:Class``."""

    name: str = "fedavg"
    params: dict[str, float | int | str | bool] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        return STRATEGIES.check(v)

    @model_validator(mode="after")
    def _params_exist(self) -> StrategySpec:
        if self.params:  # imports the strategy class only when params must be checked
            check_params(self.name, self.params)
        return self


class EvaluationSpec(Frozen):
    """Where and how the global model is evaluated each round.

    ``federated``: ``piggyback`` evaluates the received global model on each silo's
    local test split at the start of the next train message (one message per round,
    plus one final evaluate message); ``separate`` uses Flower's own evaluate round;
    ``none`` skips it. ``centralized`` evaluates on the server's held-out test set.
    """

    federated: Literal["piggyback", "separate", "none"] = "piggyback"
    centralized: bool = True
    per_silo: bool = Field(
        False,
        description="server also scores the global model on every silo's local test "
        "split (oracle view: includes silos that failed) and per class",
    )
    contributions: bool = Field(
        False, description="leave-one-out contribution of each silo to each round's aggregate"
    )
    shapley: bool = Field(
        False,
        description="Shapley value of each silo's update to each round's aggregate (server "
        "test set): exact up to 8 answering silos, permutation sampling beyond",
    )
    shapley_permutations: int = Field(
        64, ge=2, description="random permutations of the sampled Shapley estimate (> 8 silos)"
    )


class UplinkSpec(Frozen):
    """Compression of client -> server updates (TT-Edge codec, nodes/compression/codec.py).

    Clients of the listed ``tiers`` send the TT-SVD of their update (trained weights
    minus the received global model) with relative error ``eps`` per tensor; the server
    reconstructs before aggregation. Bytes on the wire are the encoded arrays.
    """

    compression: Literal["none", "tt"] = "none"
    eps: float = Field(0.5, gt=0, lt=1)
    max_rank: int | None = Field(None, ge=1)
    min_numel: int = Field(1024, ge=1, description="smaller tensors are sent raw")
    tensorization: Literal["tt", "matrix", "auto"] = Field(
        "tt",
        description="tensor each update array is TT-decomposed as: tt (conv kernels "
        "(Cin, kh, kw, Cout), linear weights as TT-matrices), matrix ((shape[0], rest): a "
        "TT of order 2, i.e. a truncated SVD), auto (the smaller of the two per array)",
    )
    error_feedback: bool = Field(True, description="carry the codec's residual to next round")
    packed: bool = Field(
        False,
        description="send the encoded update as one array per dtype plus an index "
        "(nodes/compression/packed.py) instead of one array per core and metadata item",
    )
    wire_dtype: Literal["float32", "float16"] = Field(
        "float32", description="float arrays of the encoded update are sent in this dtype"
    )
    tiers: list[Tier] = Field(default_factory=lambda: list(DEFAULT_TT_TIERS))
    svd_backend: Literal["lapack", "gram", "two_phase"] = Field(
        "lapack",
        description="TT-SVD on the device: LAPACK, the exact Gram-matrix SVD (faster, same "
        "error up to rounding), or TT-Edge's two phases (Householder bidiagonalisation, "
        "then implicit-QR diagonalisation)",
    )
    engine_profile: str = Field(
        "riscv-edge-ttd", description="MODELLED TT-Edge engine (nodes/compression/cost_model)"
    )

    @field_validator("engine_profile")
    @classmethod
    def _engine(cls, v: str) -> str:
        from nodes.compression.cost_model import PROFILES

        if v not in PROFILES:
            raise ValueError(f"unknown engine profile {v!r}; choose one of {sorted(PROFILES)}")
        return v


class FLSpec(Hosted):
    """The federated-learning workload: the testbed's own Flower app (dataset, model,
    strategy... below), or the user's own Flower App (``app``, ``app_config``:
    :mod:`nodes.fl.userapp`), observed at its Grid and ClientApp (:mod:`nodes.fl.observe`);
    the keys of the testbed's app do not apply to a user's app."""

    #: Every clock this workload keeps follows :mod:`kernel.dilation`, so it may run
    #: under ``time_dilation`` (:func:`testbed.dilation.unsupported`).
    dilated_clock: ClassVar[bool] = True

    app: SpecDir | None = Field(
        None,
        description="a Flower App folder (pyproject.toml with [tool.flwr.app.components]) "
        "run unchanged instead of the testbed's app; relative to the spec's folder",
    )
    app_config: dict[str, bool | int | float | str] = Field(
        default_factory=dict,
        description="run config of the app (keys its [tool.flwr.app.config] declares)",
    )
    node_config: dict[str, bool | int | float | str] = Field(
        default_factory=dict,
        description="node config the app's ClientApp reads on every client node (what "
        "flower-supernode --node-config gives, e.g. a data path); '{node}' in a string "
        "value becomes the node's name",
    )
    dataset: DatasetSpec = DatasetSpec()
    partitioner: PartitionerSpec = PartitionerSpec()
    model: ModelSpec = ModelSpec()
    strategy: StrategySpec = StrategySpec()
    rounds: int = Field(5, ge=1)
    local_epochs: int = Field(1, ge=1)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    optimizer: Literal["sgd", "adam"] = "sgd"
    evaluation: EvaluationSpec = EvaluationSpec()
    uplink: UplinkSpec = UplinkSpec()
    stale_updates: Literal["drop", "accept"] = Field(
        "drop",
        description="a reply that misses its round's deadline (e.g. a satellite out "
        "of view): recorded as late and dropped, or aggregated in a later round",
    )
    staleness_decay: float = Field(
        0.5, gt=0, le=1, description="accept: weight x decay**staleness (rounds late)"
    )
    max_staleness: int = Field(3, ge=1, description="rounds a late reply is waited for")
    round_timeout_s: float = Field(600.0, gt=0)
    min_participants: int = Field(1, ge=1)
    protocol_timing: Literal["flower", "fast"] = Field(
        "flower",
        description="flower: Flower's own hard-coded polling waits (3 s between a "
        "SuperNode's empty pulls and between the ServerApp's reply polls), the reference "
        "for comparisons with real deployments; fast: those waits shortened to 0.02-0.1 s "
        "by a shim (nodes/fl/timing.py), for quick experiments and tests",
    )

    @model_validator(mode="after")
    def _user_app(self, info: ValidationInfo) -> FLSpec:
        for key in ("app_config", "node_config"):
            if getattr(self, key) and self.app is None:
                raise ValueError(f"{key}: needs 'app' (a Flower App folder)")
        from nodes.fl.userapp import check_node_config

        check_node_config(self.node_config)
        if self.app is not None and spec_dir(info) is not None:  # loading the spec
            from nodes.fl.userapp import check_app

            check_app(self.app, self.app_config)
        return self

    @model_validator(mode="after")
    def _model_fits_data(self) -> FLSpec:
        """A model that needs images is refused for a dataset of feature vectors (it
        would fail in the ServerApp, after the fleet started)."""
        from nodes.data.datasets import VECTOR_DATASETS
        from nodes.models import IMAGE_MODELS

        if self.model.name in IMAGE_MODELS and self.dataset.name in VECTOR_DATASETS:
            raise ValueError(
                f"model: {self.model.name!r} needs images; dataset {self.dataset.name!r} "
                f"gives feature vectors: use model 'mlp' or an image dataset"
            )
        return self
