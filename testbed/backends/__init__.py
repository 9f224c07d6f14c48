"""Backends realise a Plan; registered by name (``local``, ``compose``, ``docker`` ...).

Every backend is a subclass of :class:`testbed.backends.base.Backend`; :func:`preflight`
is the one check of experiments against a backend that ``testbed validate``,
``testbed run`` and :func:`testbed.runner.run_experiment` share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kernel.registry import Registry
from testbed.backends.base import Backend, NotSupported

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


#: What a user gives for a backend option, and what it asks for (named by a refusal).
OPTION_FLAGS = {
    "warm": ("--cold", "Flower's cold per-message ClientApp processes"),
    "oversubscribe": ("--oversubscribe", "node profiles above this host"),
    "advertise": ("--advertise-addr", "an address other engines reach the runner at"),
}


def check_options(cls: type[Backend], options: Mapping[str, Any]) -> None:
    """Refuse an option ``cls`` does not take (:attr:`Backend.options`): it would be
    ignored, and the run would not be what was asked (``--cold`` on the simulation).

    Raises
    ------
    NotSupported
        Naming the option as given (``--cold``), what it asks for and what the backend
        takes.
    """
    for key in options:
        if key not in cls.options:
            flag, what = OPTION_FLAGS.get(key, (key, f"option {key!r}"))
            takes = ", ".join(sorted(cls.options)) or "none"
            raise NotSupported(
                f"{flag}: {what} are not supported on --backend {cls.name} "
                f"(options it takes: {takes})"
            )


def preflight(
    name: str,
    experiments: Sequence[Experiment],
    options: Mapping[str, Any] | None = None,
    host: bool = True,
) -> type[Backend]:
    """Check ``experiments`` and the backend's ``options`` (:func:`check_options`)
    against backend ``name`` before anything is recorded (:meth:`Backend.preflight`),
    then, with ``host``, what the run needs of this machine (:meth:`Backend.unavailable`:
    an engine, an image); return its class.

    Raises
    ------
    ValueError
        ``--backend: unknown backend ...`` naming the registered ones, or the
        backend's refusal naming the field (:class:`~testbed.backends.base.NotSupported`).
    """
    cls = get_backend(name)
    check_options(cls, options or {})
    cls.preflight(experiments, options or {})
    if host and (why := cls.unavailable()) is not None:
        raise NotSupported(why)
    return cls
