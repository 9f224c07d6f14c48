"""Typed, frozen configuration of the semantic-multiplexing experiment (issue 6).

This module imports nothing heavy (pydantic and the standard library only) because
``testbed validate`` imports it to check YAML files without loading torch or Sionna.

The YAML shape is::

    name: semantic-mux
    seed: 0
    workload:
      semantic_mux:
        ...keys of SemanticMuxSpec...

Every key has a default; units are part of the names (``_hz``, ``_db``, ``_s``, ``_w``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from kernel.frozen import Frozen, SpecDir, SpecFile
from radio.channel_models import CHANNEL_MODELS
from radio.scheme_registry import BUILTIN_SCHEMES, SCHEMES
from radio.task_registry import DIGITS_TASKS, TASK_BUILDERS

__all__ = [
    "DIGITS_TASKS",
    "EnergyModelSpec",
    "BitBaselineSpec",
    "MmwaveLinkSpec",
    "MmwaveSegment",
    "SemanticMuxSpec",
]

#: Most training seeds one run may sweep.
MAX_SEEDS = 20

#: 3GPP NR numerologies (TS 38.211 4.2): subcarrier spacing in Hz.
NR_SUBCARRIER_SPACINGS_HZ: tuple[float, ...] = (15e3, 30e3, 60e3, 120e3, 240e3)


class EnergyModelSpec(Frozen):
    """Parameters of the MODELLED energy: ``E = P_radio * airtime + P_compute * compute_time``.

    Attributes
    ----------
    radio_power_w : float
        Power drawn by the radio while transmitting [W]. Default 2.0 W: an assumed figure
        of the order of a 4-element 28 GHz RF front end plus baseband; not measured here.
    compute_power_w : float
        Power drawn by the compute device while running encoders/decoders [W]. Default
        7.0 W: the lowest power mode of an NVIDIA Jetson Orin Nano (7 W / 15 W modes,
        NVIDIA Jetson Orin Nano datasheet), the device of the paper's prototype.
    radio_power_source : str
        Where ``radio_power_w`` comes from (stored with the results).
    compute_power_source : str
        Where ``compute_power_w`` comes from (stored with the results).
    """

    radio_power_w: float = Field(2.0, gt=0)
    compute_power_w: float = Field(7.0, gt=0)
    radio_power_source: str = (
        "assumption: order of magnitude of a 4-antenna 28 GHz RF front end + baseband"
    )
    compute_power_source: str = "NVIDIA Jetson Orin Nano datasheet, 7 W power mode"


class BitBaselineSpec(Frozen):
    """Bit-level baseline: quantized features -> 5G LDPC -> QAM -> MIMO -> decode -> classify.

    Attributes
    ----------
    feature_dim : int
        Real features per task before quantization.
    quantization_bits : int
        Bits per feature (uniform quantizer on [-1, 1]).
    ldpc_code_rate : float
        5G NR LDPC code rate k/n, in (0, 1).
    qam_bits_per_symbol : int
        Bits per QAM symbol (2 = QPSK, 4 = 16-QAM, 6 = 64-QAM).
    ldpc_num_iterations : int
        Belief-propagation iterations of the LDPC decoder.
    """

    feature_dim: int = Field(16, ge=1, le=256)
    quantization_bits: int = Field(4, ge=1, le=16)
    ldpc_code_rate: float = Field(0.5, gt=0.0, lt=1.0)
    qam_bits_per_symbol: Literal[2, 4, 6, 8] = 4
    ldpc_num_iterations: int = Field(20, ge=1, le=200)


class SemanticMuxSpec(Frozen):
    """Semantic multiplexing of K tasks over a MIMO mmWave link, with two baselines.

    See ``experiments/semantic_mux.yaml`` for every key with a comment. Lists such as
    ``num_tasks_list`` and ``snr_db_list`` are sweeps; everything else is a single value.
    """

    # --- run size -----------------------------------------------------------------------
    quick: bool = False
    device: str = "auto"
    seeds: tuple[int, ...] | None = None  # training seeds; None: the run's seed only
    schemes: tuple[str, ...] = BUILTIN_SCHEMES

    # --- channel / numerology ------------------------------------------------------------
    carrier_frequency_hz: float = Field(28e9, ge=0.5e9, le=100e9)
    subcarrier_spacing_hz: float = 120e3
    num_resource_blocks: int = Field(66, ge=1, le=275)
    num_tx_antennas: int = Field(4, ge=1, le=16)
    num_rx_antennas: int = Field(4, ge=1, le=16)
    channel_model: str = "cdl"  # a name in radio.channel_models.CHANNEL_MODELS
    channel_profile: Literal["A", "B", "C", "D", "E"] = "C"
    delay_spread_s: float = Field(30e-9, gt=0, le=5e-6)
    max_speed_mps: float = Field(3.0, ge=0, le=500)
    flat_correlation: float = Field(0.0, ge=0.0, lt=1.0)
    train_channel: Literal["same", "flat"] = "same"
    channel_bank_size: int = Field(4096, ge=64)
    subcarriers_per_block: int = Field(12, ge=1, le=3300)

    # --- tasks -----------------------------------------------------------------------------
    tasks: tuple[str, ...] = DIGITS_TASKS
    num_tasks_list: tuple[int, ...] = (2, 4, 8)
    cifar10_dir: SpecDir | None = None
    text_csv_path: SpecFile | None = None

    # --- semantic multiplexer ------------------------------------------------------------
    mux_channel_uses: int = Field(8, ge=1, le=4096)
    latent_dim: int = Field(32, ge=2, le=1024)
    hidden_dim: int = Field(128, ge=8, le=4096)
    vib_beta: float = Field(1e-3, ge=0.0)

    # --- baseline (a): orthogonal semantic streams -------------------------------------------
    orthogonal_channel_uses_per_task: int = Field(8, ge=1, le=4096)

    # --- baseline (b): bit level --------------------------------------------------------------
    bit_baseline: BitBaselineSpec = BitBaselineSpec()

    # --- training -------------------------------------------------------------------------
    train_steps: int = Field(1500, ge=1)
    quick_train_steps: int = Field(250, ge=1)
    batch_size: int = Field(128, ge=2)
    learning_rate: float = Field(2e-3, gt=0, le=1.0)
    train_snr_min_db: float = -5.0
    train_snr_max_db: float = 20.0

    # --- evaluation -----------------------------------------------------------------------
    snr_db_list: tuple[float, ...] = (-5.0, 0.0, 5.0, 10.0, 15.0, 20.0)
    eval_channel_draws: int = Field(2, ge=1, le=100)
    quick_eval_samples: int = Field(200, ge=10)
    latency_batch_size: int = Field(1, ge=1)

    # --- energy (modelled) ------------------------------------------------------------------
    energy: EnergyModelSpec = EnergyModelSpec()

    @field_validator("subcarrier_spacing_hz")
    @classmethod
    def _check_scs(cls, v: float) -> float:
        if v not in NR_SUBCARRIER_SPACINGS_HZ:
            raise ValueError(
                f"subcarrier_spacing_hz must be an NR numerology, one of "
                f"{[int(s) for s in NR_SUBCARRIER_SPACINGS_HZ]}, got {v}"
            )
        return v

    @field_validator("channel_model")
    @classmethod
    def _check_channel_model(cls, v: str) -> str:
        try:
            return CHANNEL_MODELS.check(v)
        except ValueError as exc:
            raise ValueError(f"channel_model: {exc}") from None

    @field_validator("tasks")
    @classmethod
    def _check_tasks(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for t in v:  # a registered name or a user builder's package.module:function
            try:
                TASK_BUILDERS.check(t)
            except ValueError as exc:
                raise ValueError(f"tasks: {exc}") from None
        if len(set(v)) != len(v):
            raise ValueError(f"tasks: each task may appear once, got {list(v)}")
        if not v:
            raise ValueError("tasks: at least one task is required")
        return v

    @field_validator("seeds")
    @classmethod
    def _check_seeds(cls, v: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if v is None:
            return v
        if not v or len(v) > MAX_SEEDS or any(s < 0 for s in v) or len(set(v)) != len(v):
            raise ValueError(
                f"seeds: 1 to {MAX_SEEDS} distinct non-negative integers (or null: the "
                f"run's seed), got {list(v)}"
            )
        return v

    @field_validator("schemes")
    @classmethod
    def _check_schemes(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:
            try:
                SCHEMES.check(name)
            except ValueError as exc:
                raise ValueError(f"schemes: {exc}") from None
        if "semantic_mux" not in v or len(set(v)) != len(v):
            raise ValueError(
                f"schemes: each scheme once, 'semantic_mux' among them (the ratios are "
                f"baseline / semantic_mux), got {list(v)}"
            )
        return v

    @field_validator("num_tasks_list")
    @classmethod
    def _check_num_tasks(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or any(k < 1 for k in v):
            raise ValueError(f"num_tasks_list: needs positive task counts, got {list(v)}")
        return tuple(sorted(set(v)))

    @field_validator("snr_db_list")
    @classmethod
    def _check_snr(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v:
            raise ValueError("snr_db_list: at least one SNR [dB] is required")
        if any(s < -30 or s > 60 for s in v):
            raise ValueError(f"snr_db_list: values must lie in [-30, 60] dB, got {list(v)}")
        return tuple(sorted(v))

    @model_validator(mode="after")
    def _check_consistency(self) -> SemanticMuxSpec:
        errors = []
        if max(self.num_tasks_list) > len(self.tasks):
            errors.append(
                f"num_tasks_list: largest K={max(self.num_tasks_list)} exceeds the "
                f"{len(self.tasks)} task(s) listed in tasks"
            )
        if "cifar10" in self.tasks and not self.cifar10_dir:
            errors.append("cifar10_dir: required when tasks contains 'cifar10'")
        if "text_sentiment" in self.tasks and not self.text_csv_path:
            errors.append("text_csv_path: required when tasks contains 'text_sentiment'")
        if self.train_snr_min_db > self.train_snr_max_db:
            errors.append(
                f"train_snr_min_db: {self.train_snr_min_db} exceeds train_snr_max_db "
                f"{self.train_snr_max_db}"
            )
        block = self.num_tx_antennas * self.mux_channel_uses
        if "orthogonal_equal" in self.schemes and block < max(self.num_tasks_list):
            errors.append(
                f"mux_channel_uses: orthogonal_equal splits num_tx_antennas x "
                f"mux_channel_uses = {block} resource elements between K tasks; needs at "
                f"least K={max(self.num_tasks_list)}"
            )
        if self.channel_model == "flat" and self.train_channel != "same":
            errors.append("train_channel: must be 'same' when channel_model is 'flat'")
        if errors:
            raise ValueError("; ".join(errors))
        return self

    @property
    def effective_train_steps(self) -> int:
        """Training steps after applying :attr:`quick`."""
        return self.quick_train_steps if self.quick else self.train_steps


#: Path-loss models of :class:`MmwaveLinkSpec` (TR 38.901 Table 7.4.1-1, and free space).
PATH_LOSS_MODELS: tuple[str, ...] = ("fspl", "umi_los", "umi_nlos", "uma_los", "uma_nlos")


class MmwaveSegment(Frozen):
    """From ``at_s`` seconds after the fleet is ready, the radio has these values (the
    ones not given keep theirs): a UE speeding up, an SNR drop, a UE moving away."""

    at_s: float = Field(ge=0)
    snr_db: float | None = Field(None, ge=-30, le=60)
    distance_m: float | None = Field(None, gt=0, le=100_000)
    speed_mps: float | None = Field(None, ge=0, le=500)


class MmwaveLinkSpec(Frozen):
    """Sionna channel parameters of a ``kind: mmwave`` link (the rate is MODELLED).

    The edge end is the user equipment (transmitter, ``num_tx_antennas``), the other end
    its base station (``num_rx_antennas``). Give ``snr_db`` or ``distance_m`` (then the
    SNR comes from ``path_loss``, ``tx_power_dbm`` and ``noise_figure_db`` over the
    allocated bandwidth). See docs/links.md, section mmWave links.
    """

    channel_model: Literal["cdl", "tdl"] = "cdl"
    channel_profile: Literal["A", "B", "C", "D", "E"] = "C"
    carrier_frequency_hz: float = Field(28e9, ge=0.5e9, le=100e9)
    subcarrier_spacing_hz: float = 120e3
    num_resource_blocks: int = Field(66, ge=1, le=275)
    num_tx_antennas: int = Field(4, ge=1, le=16)
    num_rx_antennas: int = Field(4, ge=1, le=16)
    delay_spread_s: float = Field(30e-9, gt=0, le=5e-6)
    snr_db: float | None = Field(None, ge=-30, le=60)
    distance_m: float | None = Field(None, gt=0, le=100_000)
    path_loss: Literal["fspl", "umi_los", "umi_nlos", "uma_los", "uma_nlos"] = "umi_los"
    tx_power_dbm: float = Field(23.0, ge=-30, le=60)
    noise_figure_db: float = Field(7.0, ge=0, le=30)
    speed_mps: float = Field(3.0, ge=0, le=500)
    target_bler: float = Field(0.1, gt=0, lt=1)
    overhead_fraction: float = Field(0.10, ge=0, lt=1)
    implementation_gap_db: float = Field(3.0, ge=0, le=20)
    update_s: float = Field(0.2, ge=0.01, le=10)
    calibration_blocks: int = Field(512, ge=16, le=65536)
    schedule: list[MmwaveSegment] = Field(default_factory=list)

    @field_validator("subcarrier_spacing_hz")
    @classmethod
    def _nr_scs(cls, v: float) -> float:
        if v not in NR_SUBCARRIER_SPACINGS_HZ:
            raise ValueError(
                f"subcarrier_spacing_hz must be an NR numerology, one of "
                f"{[int(s) for s in NR_SUBCARRIER_SPACINGS_HZ]}, got {v}"
            )
        return v

    @model_validator(mode="after")
    def _snr_or_distance(self) -> MmwaveLinkSpec:
        if (self.snr_db is None) == (self.distance_m is None):
            raise ValueError("give exactly one of snr_db or distance_m (with path_loss)")
        if self.channel_model == "cdl":
            for name in ("num_tx_antennas", "num_rx_antennas"):
                if getattr(self, name) % 2:
                    raise ValueError(f"{name}: must be even for cdl (dual polarisation)")
        for i, seg in enumerate(self.schedule):
            if seg.snr_db is not None and self.snr_db is None:
                raise ValueError(f"schedule.{i}.snr_db: this link is set by distance_m")
            if seg.distance_m is not None and self.distance_m is None:
                raise ValueError(f"schedule.{i}.distance_m: this link is set by snr_db")
        return self
