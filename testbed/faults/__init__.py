"""Fault kinds, one registered class each (see :mod:`testbed.faults.base`).

``FAULT_KINDS`` holds every kind: every module of this package is imported with it, and
each kind class registers itself there, so a new built-in kind is one new file here; a
kind defined elsewhere registers with ``@register_fault("name")`` before the spec that
uses it is loaded (docs/architecture.md).
"""

from __future__ import annotations

import importlib
import pkgutil

from testbed.faults.base import (
    FAULT_KINDS,
    FaultContext,
    FaultKind,
    FaultParams,
    register_fault,
)

__all__ = ["FAULT_KINDS", "FaultContext", "FaultKind", "FaultParams", "register_fault", "schema"]

for _module in pkgutil.iter_modules(__path__):  # the kinds register themselves
    importlib.import_module(f"{__name__}.{_module.name}")


def schema() -> dict[str, dict[str, object]]:
    """Every registered kind described (label, marker, target, parameters), by name."""
    return {name: FAULT_KINDS[name].describe() for name in FAULT_KINDS}
