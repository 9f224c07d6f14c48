"""Backends realise a Plan; registered by name (``local``, ``compose``, ``docker`` ...)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodes.registry import Registry

BACKENDS: Registry[Callable[..., Any]] = Registry("backend")
register_backend = BACKENDS.register


def get_backend(name: str) -> Callable[..., Any]:
    """The backend class registered as ``name`` (ValueError naming --backend otherwise)."""
    from testbed.backends import compose, docker, local, simulation  # noqa: F401  (register themselves)

    try:
        return BACKENDS[name]
    except ValueError as e:
        raise ValueError(f"--backend: {e}") from None
