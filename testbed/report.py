"""``testbed report``: a sweep's report, written by the report of the sweep's workload.

The workload is read from the runs' resolved specs through the workloads registry
(:mod:`testbed.workloads`); the failure study (:mod:`testbed.failure_study`) is FL's
report, :mod:`testbed.functions.report` the functions workload's.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from testbed.rows import RunRow
from testbed.store import RunStore
from testbed.workloads import section_of_spec, workload


def run_section(run: RunRow) -> str | None:
    """The workload section of a run, from its ``spec.resolved.yaml`` (None if absent)."""
    if not run.artifact_dir:
        return None
    path = Path(run.artifact_dir) / "spec.resolved.yaml"
    if not path.is_file():
        return None
    spec = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return section_of_spec(spec) if isinstance(spec, dict) else None


def sweep_section(store: RunStore, sweep_id: str) -> str:
    """The workload section of a sweep's runs (ValueError when none or several)."""
    sections = {s for r in store.runs(sweep_id) if (s := run_section(r)) is not None}
    if not sections:
        raise ValueError(f"sweep {sweep_id!r}: no runs in {store.path}")
    if len(sections) > 1:
        raise ValueError(f"sweep {sweep_id!r}: runs of several workloads {sorted(sections)}")
    return sections.pop()


def write_report(store: RunStore, sweep_id: str, out: Path) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html`` (with PNGs) for a sweep into ``out``."""
    return workload(sweep_section(store, sweep_id)).write_report(store, sweep_id, out)
