"""Semantic multiplexing over a mmWave link (``workload.semantic_mux``): the radio stack
in-process (:func:`radio.experiment.run_semantic_mux`); its page is the Radio page."""

from __future__ import annotations

import importlib
from typing import Any

from radio.config import SemanticMuxSpec
from testbed.workloads import register_workload
from testbed.workloads.base import LibraryWorkload, Page, RunContext


@register_workload("semantic_mux")
class SemanticMux(LibraryWorkload):
    """``workload.semantic_mux``: Sionna channels, semantic multiplexing, baselines."""

    spec_model = SemanticMuxSpec
    page = Page("screens/radio.py", "Radio", ":material/cell_tower:", "radio")
    # per scheme, K and SNR: accuracy (measured), latency (modelled; the Timeline draws these)
    key_metrics = ("mean_accuracy", "latency_s")

    def run(self, ctx: RunContext) -> dict[str, Any]:
        # imported by name: radio.experiment is not yet mypy-clean (12 errors there and in
        # radio.tasks/train/semantic, owned elsewhere); a static import would pull them in
        run_semantic_mux = importlib.import_module("radio.experiment").run_semantic_mux

        spec = ctx.experiment.workload.semantic_mux
        assert spec is not None
        if ctx.observer:
            ctx.observer.started(ctx.run_id, ctx.plan)
        return dict(run_semantic_mux(spec, ctx.seed, ctx.run_dir, ctx.metric, ctx.progress))
