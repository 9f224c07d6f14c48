"""Backends realise a Plan; registered by name (``local``, ``compose``, ``docker`` ...).

Every backend is a subclass of :class:`testbed.backends.base.Backend`; :func:`preflight`
is the one check of experiments against a backend that ``testbed validate``,
``testbed run`` and :func:`testbed.runner.run_experiment` share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kernel.registry import Registry
from testbed.backends.base import Backend

if TYPE_CHECKING:
    from testbed.spec.models import Experiment


def _backend_class(obj: Any) -> type[Backend]:
    """Accept a :class:`Backend` subclass only."""
    if not (isinstance(obj, type) and issubclass(obj, Backend)):
        raise TypeError(f"a backend must subclass testbed.backends.base.Backend, got {obj!r}")
    return obj


#: The built-ins are the modules of this package (each registers itself on first lookup).
BACKENDS: Registry[type[Backend]] = Registry("backend", builtins="testbed.backends")
B = TypeVar("B", bound=type[Backend])


def register_backend(name: str) -> Callable[[B], B]:
    """Class decorator: register a :class:`Backend` subclass as ``name`` (TypeError
    for anything else)."""

    def deco(cls: B) -> B:
        BACKENDS.register(name)(_backend_class(cls))
        return cls

    return deco


def get_backend(name: str) -> type[Backend]:
    """The backend class registered as ``name`` (ValueError naming --backend otherwise)."""
    try:
        return BACKENDS[name]
    except ValueError as e:
        raise ValueError(f"--backend: {e}") from None


def preflight(name: str, experiments: Sequence[Experiment]) -> type[Backend]:
    """Check ``experiments`` against backend ``name`` before anything is recorded
    (:meth:`Backend.preflight`); return its class.

    Raises
    ------
    ValueError
        ``--backend: unknown backend ...`` naming the registered ones, or the
        backend's refusal naming the field (:class:`~testbed.backends.base.NotSupported`).
    """
    cls = get_backend(name)
    cls.preflight(experiments)
    return cls
