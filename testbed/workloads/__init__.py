"""Workloads registered by the section of ``workload:`` they run (house rule 6, CONTRIBUTING.md).

The runner, the controller, ``testbed report`` and the dashboard decide a run's
workload here and nowhere else: :func:`section_of` (a parsed spec),
:func:`section_of_spec` (a resolved spec as a dict) and :func:`workload` (the class).
A new workload is one class in one file::

    @register_workload("my_section")
    class MyWorkload(LibraryWorkload):
        spec_model = MySectionSpec
        def run(self, ctx: RunContext) -> dict[str, Any]: ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from testbed.workloads.base import LibraryWorkload, Observer, Page, RunContext, Workload
from testbed.workloads.registry import WORKLOADS, load_builtin, register_workload

__all__ = [
    "WORKLOADS",
    "LibraryWorkload",
    "Observer",
    "Page",
    "RunContext",
    "Workload",
    "register_workload",
    "section_of",
    "section_of_spec",
    "sections_of_spec",
    "workload",
    "load_builtin",
]


def workload(section: str) -> Workload:
    """An instance of the workload registered as ``section`` (ValueError listing them)."""
    cls = load_builtin()[section]
    return cls()


def section_of(exp: Any) -> str:
    """The (first) section an :class:`~testbed.spec.models.Experiment`'s workload sets."""
    return str(exp.workload.section)


def sections_of_spec(spec: Mapping[str, Any]) -> list[str]:
    """Every section a resolved spec (a dict) sets, in its order (several workloads of
    one run: :mod:`testbed.workloads.together`)."""
    sections = spec.get("workload") or {}
    if not isinstance(sections, Mapping):
        return []
    known = load_builtin()
    return [k for k, v in sections.items() if v is not None and k in known]


def section_of_spec(spec: Mapping[str, Any]) -> str | None:
    """The section a resolved spec (``spec.resolved.yaml`` as a dict) sets, if any."""
    sections = spec.get("workload") or {}
    if not isinstance(sections, Mapping):
        return None
    known = load_builtin()
    return next((k for k, v in sections.items() if v is not None and k in known), None)
