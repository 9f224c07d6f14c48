"""The workload registry: one class per section of ``workload:`` (house rule 6, CONTRIBUTING.md).

A module of its own, importing nothing of the workloads, so that the spec
(:mod:`testbed.spec.models`, which validates each section with its workload's
``spec_model``) can look workloads up without an import circle through the runner and
the backends. The built-in workloads are the modules of :mod:`testbed.workloads`,
imported the first time a name is looked up (:class:`~kernel.registry.Registry`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kernel.registry import Registry

if TYPE_CHECKING:
    from testbed.workloads.base import Workload

WORKLOADS: Registry[type[Workload]] = Registry("workload", builtins="testbed.workloads")


def register_workload(section: str) -> Callable[[type[Any]], type[Any]]:
    """Class decorator: register a workload class under its ``workload:`` section."""

    def deco(cls: type[Any]) -> type[Any]:
        cls.section = section
        WORKLOADS.register(section)(cls)
        return cls

    return deco


def load_builtin() -> Registry[type[Workload]]:
    """The registry, built-in workloads included (each lookup finds them by itself; this
    name stays for callers that want the registry as a value)."""
    return WORKLOADS
