"""Workloads the runner drives in-process: semantic multiplexing, TT compression, functions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.spec.models import Experiment


def run_workload(
    exp: Experiment,
    seed: int,
    out_dir: Path,
    report: Callable[[dict], None],
    progress: Callable[[str, float], None],
) -> dict[str, Any]:
    """Dispatch a non-FL workload section to the code that owns it."""
    w = exp.workload
    if w.semantic_mux is not None:
        from radio.experiment import run_semantic_mux

        return dict(run_semantic_mux(w.semantic_mux, seed, out_dir, report, progress))
    if w.compress is not None:
        from nodes.compression.experiment import run_compress

        return dict(run_compress(w.compress, seed, out_dir, report, progress))
    if w.functions is not None:
        from testbed.functions.experiment import run_functions

        return dict(run_functions(exp, seed, out_dir, report, progress))
    raise ValueError("workload: nothing to run")
