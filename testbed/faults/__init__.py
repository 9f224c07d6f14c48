"""Fault kinds, one registered class each (see :mod:`testbed.faults.base`).

``FAULT_KINDS`` holds every kind: the first lookup imports every module of this package
(:class:`~kernel.registry.Registry`'s ``builtins``) and each kind class registers itself
there, so a new built-in kind is one new file here; a kind defined elsewhere registers
with ``@register_fault("name")`` before the spec that uses it is loaded
(docs/architecture.md).
"""

from __future__ import annotations

from testbed.faults.base import (
    FAULT_KINDS,
    FaultContext,
    FaultKind,
    FaultParams,
    register_fault,
)

__all__ = ["FAULT_KINDS", "FaultContext", "FaultKind", "FaultParams", "register_fault", "schema"]

def schema() -> dict[str, dict[str, object]]:
    """Every registered kind described (label, marker, target, parameters), by name."""
    return {name: FAULT_KINDS[name].describe() for name in FAULT_KINDS}
