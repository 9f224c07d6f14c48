"""Serverless functions (``workload.functions``): Gaia's function runtime on the fleet's
nodes behind their links, open-loop load, the dynamic runtime
(:mod:`testbed.functions.experiment`); its report compares placement policies
(:mod:`testbed.functions.report`) and its page is Functions."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from testbed.functions.config import FunctionsSpec
from testbed.store import RunStore
from testbed.workloads import register_workload
from testbed.workloads.base import LibraryWorkload, Page, RunContext


@register_workload("functions")
class Functions(LibraryWorkload):
    """``workload.functions``: identify, calibrate, place, deploy, load, adapt."""

    spec_model = FunctionsSpec
    page = Page("screens/functions.py", "Functions", ":material/function:", "functions")
    key_metrics = ("e2e_ms", "request_error", "on_gpu")  # (the Timeline page draws these)

    @staticmethod
    def key_bounds(section: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, float]]]:
        """The Timeline's bound of a key metric: each function's end-to-end ms against
        its ``slo_ms`` (rows of ``e2e_ms`` are per function: node = function name)."""
        spec = FunctionsSpec.model_validate(section)
        return {"e2e_ms": ("SLO", {f.name: f.slo_ms for f in spec.functions})}

    def run(self, ctx: RunContext) -> dict[str, Any]:
        from testbed.functions.experiment import run_functions
        from testbed.spec.hosting import links_lead_to

        if ctx.observer:
            ctx.observer.started(ctx.run_id, ctx.plan)
        summary = run_functions(ctx)
        # where the requests entered: the spec's origin, or (not given) its default
        summary["origin"] = links_lead_to(ctx.experiment)
        return summary

    def write_report(self, store: RunStore, sweep_id: str, out: Path) -> tuple[Path, Path]:
        from testbed.functions.report import write_functions_report

        return write_functions_report(store, sweep_id, out)
