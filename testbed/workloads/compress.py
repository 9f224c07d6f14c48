"""TT-Edge compression (``workload.compress``): on-device tensor-train compression
in-process (:func:`nodes.compression.experiment.run_compress`); its page is Compression."""

from __future__ import annotations

from typing import Any

from nodes.compression.config import CompressSpec
from testbed.workloads import register_workload
from testbed.workloads.base import LibraryWorkload, Page, RunContext


@register_workload("compress")
class Compress(LibraryWorkload):
    """``workload.compress``: TT decomposition of a model's weights, cost model, accuracy."""

    spec_model = CompressSpec
    page = Page("screens/compression.py", "Compression", ":material/compress:", "compression")
    key_metrics = ("ratio", "acc_after", "acc_finetuned")  # per eps (the Timeline draws these)

    def run(self, ctx: RunContext) -> dict[str, Any]:
        from nodes.compression.experiment import run_compress

        spec = ctx.experiment.workload.compress
        assert spec is not None
        if ctx.observer:
            ctx.observer.started(ctx.run_id, ctx.plan)
        return dict(run_compress(spec, ctx.seed, ctx.run_dir, ctx.metric, ctx.progress))
