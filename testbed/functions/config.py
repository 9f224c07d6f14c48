"""Typed settings of the serverless-function workload (``workload.functions``).

Gaia (shared papers.md section 4): functions deployed across the continuum, an execution
mode per function from static analysis (overridable), a dynamic runtime that promotes /
demotes between CPU and GPU against the function's SLO, and a placement policy.

Time scaling. Gaia's runtime works in minutes (evaluate every 60 s, 30-min windows,
2-min cold-start wait); an experiment here lasts minutes, so every runtime *duration* is
multiplied by ``runtime.time_scale`` (default 1/30: evaluate every 2 s, 60-s windows,
4-s wait). Latency thresholds follow the function's SLO the way Gaia's defaults follow
its 1000-ms bound: gap = 0.2 x SLO (200 ms), low-rate bound = 2 x SLO (2000 ms), lock
to GPU at 100 x SLO (100 s). Every value can be set explicitly.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from kernel.frozen import Frozen, SpecFile, resolve_spec_path, spec_dir
from nodes.hosting import Hosted

Mode = Literal["cpu", "cpu_preferred", "gpu_preferred", "gpu"]


class ArrivalSpec(Frozen):
    """How requests arrive (open loop)."""

    kind: Literal["poisson", "bursty", "phases", "trace"] = "poisson"
    rate_rps: float = Field(2.0, gt=0, description="mean rate (poisson, bursty)")
    burst_factor: float = Field(5.0, ge=1, description="bursty: ON rate / OFF rate")
    trace: SpecFile | None = Field(
        None, description="trace CSV (t_s column or Azure style), relative to the spec"
    )
    time_scale: float = Field(1.0, gt=0, description="trace: multiply its times by this")
    phases: list[tuple[float, float]] | None = Field(
        None, description="phases: [[duration_s, rate_rps], ...] in order (rising, falling)"
    )

    @model_validator(mode="after")
    def _trace(self) -> ArrivalSpec:
        if self.kind == "trace" and not self.trace:
            raise ValueError("trace: a trace file is required when kind is trace")
        if self.kind == "phases" and not self.phases:
            raise ValueError(
                "phases: [[duration_s, rate_rps], ...] is required when kind is phases"
            )
        for k, (length, rate) in enumerate(self.phases or []):
            if not (length > 0 and rate >= 0):
                got = [length, rate]
                raise ValueError(f"phases.{k}: need duration_s > 0 and rate_rps >= 0, got {got}")
        return self


class FunctionSpec(Frozen):
    """One serverless function."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    module: str = Field(description="built-in (matmul, cnn, textgen, idle) or a .py path")
    mode: Mode | None = Field(None, description="override the execution mode identifier")
    slo_ms: float = Field(1000.0, gt=0, description="p95 latency bound (Gaia: 1000 ms)")
    request: dict[str, object] = Field(default_factory=dict, description="make_request params")
    arrivals: ArrivalSpec = ArrivalSpec()
    node: str | None = Field(None, description="pin to this node (skips placement)")

    @field_validator("module")
    @classmethod
    def _module(cls, v: str, info: ValidationInfo) -> str:
        from nodes.functions.workloads import BUILTIN

        if v in BUILTIN:
            return v
        path = resolve_spec_path(v, info)  # a .py file, relative to the spec
        if not Path(path).is_file():
            where = f" (read from {spec_dir(info)})" if path != v else ""
            raise ValueError(
                f"module {v!r} is neither a built-in function {BUILTIN} nor an existing "
                f".py file{where}"
            )
        return path


class RuntimeSpec(Frozen):
    """Gaia's Dynamic Function Runtime thresholds (durations x ``time_scale``)."""

    time_scale: float = Field(1 / 30, gt=0)
    eval_interval_s: float = Field(60.0, gt=0)
    window_s: float = Field(1800.0, gt=0)
    long_window_s: float = Field(30000.0, gt=0)
    rate_window_s: float = Field(60.0, gt=0)
    low_rate_window_s: float = Field(1800.0, gt=0)
    cold_start_wait_s: float = Field(120.0, ge=0)
    gap_ms: float | None = Field(None, ge=0, description="None: 0.2 x the function's SLO")
    low_rate_upper_bound_ms: float | None = Field(None, gt=0, description="None: 2 x SLO")
    lock_gpu_ms: float | None = Field(None, gt=0, description="None: 100 x SLO")
    low_rate_rps: float = Field(0.01, ge=0)
    too_low_rps: float = Field(0.2, ge=0)


class FunctionsSpec(Hosted):
    """The serverless workload: functions, load, placement policy and runtime."""

    #: Every clock it keeps follows :mod:`kernel.dilation` (arrivals, the runtime's
    #: windows, the nodes' device waits and virtual clocks; e2e and cold starts are
    #: recorded emulated), so it may run under ``time_dilation``.
    dilated_clock: ClassVar[bool] = True

    policy: str = Field(
        "gaia", description="a policy of testbed/functions/placement.py or package.module:fn"
    )
    duration_s: float = Field(60.0, gt=0, description="load duration per run")
    origin: Literal["edge", "fog", "cloud", "space"] | None = Field(
        None,
        description="tier the requests come from (picks the default links); None: edge, "
        "or beside fl the FL server's tier (where every node's link leads; another is an "
        "error)",
    )
    gpu: Literal["auto", "emulated", "cuda"] = Field(
        "auto", description="auto: real CUDA where present, else the emulated GPU backend"
    )
    functions: list[FunctionSpec] = Field(min_length=1)
    runtime: RuntimeSpec = RuntimeSpec()

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        from testbed.functions.placement import POLICIES  # registered with the policies

        return POLICIES.check(v)

    def gpu_claims(self) -> list[tuple[str, str, int]]:
        """GPU slots the spec itself holds: ``(path in the section, node, 1)`` for every
        function pinned to a node in ``gpu`` mode (checked across workloads)."""
        return [
            (f"functions.{i}.node", fn.node, 1)
            for i, fn in enumerate(self.functions)
            if fn.node is not None and fn.mode == "gpu"
        ]

    def pinned_nodes(self) -> list[tuple[str, str]]:
        """``(path in the section, node)`` of every function pinned to a node."""
        return [(f"functions.{i}.node", fn.node) for i, fn in enumerate(self.functions) if fn.node]

    @model_validator(mode="after")
    def _unique(self) -> FunctionsSpec:
        names = [f.name for f in self.functions]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"functions: duplicate function names {dup}")
        return self
