"""Pipelined LLM inference (``workload.llm_pipeline``): Hyperion's BSDP partition and
ARTS routing against GPipe and HEFT on the fleet's nodes (:mod:`testbed.llm.run`)."""

from __future__ import annotations

from typing import Any

from testbed.llm.config import LlmPipelineSpec
from testbed.workloads import register_workload
from testbed.workloads.base import LibraryWorkload, RunContext


@register_workload("llm_pipeline")
class LlmPipeline(LibraryWorkload):
    """``workload.llm_pipeline``: profile, partition, deploy stages, serve requests."""

    spec_model = LlmPipelineSpec
    # per request: end-to-end and time to first token (ms), and failed attempts; the
    # Timeline's summary gives their p50 / p95 and rows per second (the throughput)
    key_metrics = ("llm_e2e_ms", "llm_ttft_ms", "llm_failed")

    def run(self, ctx: RunContext) -> dict[str, Any]:
        from testbed.llm.run import run_llm_pipeline

        if ctx.observer:
            ctx.observer.started(ctx.run_id, ctx.plan)
        return run_llm_pipeline(ctx)
