"""Backends realise a Plan; registered by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BACKENDS: dict[str, Callable[..., Any]] = {}


def register_backend(name: str):
    """Register a backend class under ``name``."""

    def deco(cls):
        BACKENDS[name] = cls
        return cls

    return deco


def get_backend(name: str) -> Callable[..., Any]:
    from testbed.backends import compose, local  # noqa: F401  (register themselves)

    if name not in BACKENDS:
        raise ValueError(f"--backend: unknown {name!r}; choose one of {sorted(BACKENDS)}")
    return BACKENDS[name]
