"""The ``workload.llm_pipeline`` section: model, replicas, policy, requests, load."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from kernel.frozen import Frozen
from nodes.llm.model import ModelConfig, unit_bytes
from testbed.functions.config import ArrivalSpec

POLICIES = {
    "hyperion": ("bsdp", "arts"),
    "gpipe": ("balanced", "gpipe"),
    "heft": ("heft", "heft"),
}
"""Policy -> (offline partition, online scheduler): ``gpipe`` serves micro-batched
mini-batches (:mod:`testbed.llm.gpipe`), the others route request by request."""


class LlmModelSpec(Frozen):
    """The decoder-only model (random weights from ``seed``; nothing is downloaded)."""

    n_layers: int = Field(8, ge=1, le=256)
    d_model: int = Field(256, ge=8, le=8192)
    n_heads: int = Field(4, ge=1, le=128)
    d_ff: int = Field(1024, ge=8, le=32768)
    vocab: int = Field(512, ge=2, le=262144)
    max_seq: int = Field(256, ge=2, le=65536)
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _heads(self) -> LlmModelSpec:
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})"
            )
        return self

    def config(self) -> ModelConfig:
        return ModelConfig(**self.model_dump())


class LlmRequestSpec(Frozen):
    """Request shapes: short ones, and a fraction of long ones."""

    prompt_tokens: int = Field(32, ge=1)
    new_tokens: int = Field(8, ge=1, description="generated tokens (prefill + new-1 decodes)")
    long_fraction: float = Field(0.0, ge=0, le=1, description="share of long requests")
    long_prompt_tokens: int = Field(128, ge=1)
    long_new_tokens: int = Field(32, ge=1)


class GpipeSpec(Frozen):
    """The GPipe baseline's batching: a free replica takes up to ``batch_size`` queued
    requests and splits them into ``micro_batches`` micro-batches."""

    batch_size: int = Field(8, ge=1, le=1024, description="most requests per mini-batch")
    micro_batches: int = Field(4, ge=1, le=1024, description="micro-batches per mini-batch")


class LlmPipelineSpec(Frozen):
    """Pipelined LLM inference over chains of fleet nodes (Hyperion, arXiv 2511.14450).

    ``replicas`` are chains of node names in request order (e.g. edge -> fog -> cloud);
    ``policy`` picks the offline cut and the online part: ``hyperion`` (BSDP + ARTS),
    ``gpipe`` (compute-balanced cut + micro-batched mini-batches, ``gpipe``), ``heft``
    (HEFT's upward-rank placement + earliest-finish routing over replicas).
    """

    #: Every clock it keeps follows :mod:`kernel.dilation` (arrivals, timeouts, the
    #: schedulers' clock; its recorded times are emulated: testbed.llm.run), so it may
    #: run under ``time_dilation`` (:func:`testbed.dilation.unsupported`).
    dilated_clock: ClassVar[bool] = True


    model: LlmModelSpec = LlmModelSpec()
    replicas: list[list[str]] = Field(min_length=1)
    policy: Literal["hyperion", "gpipe", "heft"] = "hyperion"
    origin: Literal["edge", "fog", "cloud", "space"] = Field(
        "edge", description="tier the requests come from (each node's link from it)"
    )
    requests: LlmRequestSpec = LlmRequestSpec()
    gpipe: GpipeSpec = GpipeSpec()
    arrivals: ArrivalSpec = ArrivalSpec(rate_rps=1.0)
    duration_s: float = Field(30.0, gt=0, le=86400)
    profile_repeats: int = Field(3, ge=1, le=50, description="profiling passes per unit")

    @model_validator(mode="after")
    def _shapes(self) -> LlmPipelineSpec:
        errors = []
        for i, chain in enumerate(self.replicas):
            if not chain:
                errors.append(f"replicas.{i}: an empty chain")
            elif len(set(chain)) != len(chain):
                errors.append(f"replicas.{i}: a node appears twice in one chain")
            elif len(chain) > self.model.n_layers:
                errors.append(
                    f"replicas.{i}: {len(chain)} stages for {self.model.n_layers} layers "
                    "(at most one stage per layer)"
                )
        r = self.requests
        longest = r.prompt_tokens + r.new_tokens
        if r.long_fraction > 0:
            longest = max(longest, r.long_prompt_tokens + r.long_new_tokens)
        if longest > self.model.max_seq:
            errors.append(f"requests: {longest} tokens exceed model.max_seq {self.model.max_seq}")
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def node_references(self) -> list[tuple[str, str]]:
        """``(path under this section, node)`` of every node it names."""
        return [
            (f"replicas.{i}.{j}", name)
            for i, chain in enumerate(self.replicas)
            for j, name in enumerate(chain)
        ]

    def fleet_errors(self, exp: Any) -> list[str]:
        """Chains whose nodes' memory (their profiles' ``memory_mb``) cannot hold the
        model under any cut (paths under this section)."""
        from testbed.llm.partition import fits_memory

        nodes = {name: n for n in exp.fleet.nodes for name in n.names()}
        params = unit_bytes(self.model.config())
        errors = []
        for i, chain in enumerate(self.replicas):
            caps = [exp.profile_of(nodes[name]).memory_mb << 20 for name in chain]
            if not fits_memory(params, caps):
                errors.append(
                    f"replicas.{i}: the model ({sum(params) / 2**20:.1f} MiB of weights) does "
                    f"not fit the memory of {chain} ({[c >> 20 for c in caps]} MiB) under any "
                    "cut; use a smaller model or nodes with more memory_mb"
                )
        return errors
