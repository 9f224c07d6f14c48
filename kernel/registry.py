"""Extension hooks registered by name (house rule 6, CONTRIBUTING.md).

Datasets, partitioners, models, strategies, placement policies, radio tasks, fault kinds,
link kinds and backends are each a :class:`Registry`. A registry maps a short name to
a hook; a registry that accepts user hooks also resolves a dotted path
``package.module:Attribute`` (imported on demand and checked by the registry's
validator), so a user class works without editing the testbed::

    STRATEGIES.check("mypkg.strategies:MyFedAvg")   # imports, validates, returns the name
    STRATEGIES["mypkg.strategies:MyFedAvg"]         # the class itself

Built-in hooks are found one way: a registry names the package that holds them
(``builtins="testbed.faults"``) and imports every module of it the first time it is
asked for a name; each module registers its hooks with the decorator, so a new built-in
hook is one new file in that package, and importing the registry imports none of them.
A hook whose module is heavy to import may instead be registered by dotted path
(:meth:`Registry.add_path`), imported on first use, so listing or checking names
imports nothing heavy.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")

#: ``package.module:Attribute`` (the attribute may be nested: ``mod:Outer.Inner``).
DOTTED_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def is_dotted_path(name: str) -> bool:
    """True if ``name`` has the ``package.module:Attribute`` form."""
    return bool(DOTTED_PATH.match(name))


def import_dotted(path: str) -> object:
    """Import ``package.module:Attribute`` and return the attribute.

    Raises
    ------
    ValueError
        If the module cannot be imported or has no such attribute (the message names
        the path and the reason).
    """
    module_name, _, attr = path.partition(":")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r} of {path!r}: {exc}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r} ({path!r})")
        obj = getattr(obj, part)
    return obj


def callable_hook(signature: str) -> Callable[[object], Any]:
    """A validator accepting any callable (a function or class) as a user hook.

    Parameters
    ----------
    signature : str
        What the hook is called with, for the error message, e.g.
        ``"(y, num_partitions, rng, **params) -> list of index arrays"``.
    """

    def validate(obj: object) -> Any:
        if not callable(obj):
            raise TypeError(f"must be a callable {signature}, got {obj!r}")
        return obj

    return validate


class Registry(Generic[T]):
    """A named collection of hooks with a ``register`` decorator and clear errors.

    Parameters
    ----------
    kind : str
        What the hooks are (used in error messages), e.g. ``"dataset"``.
    validate : callable, optional
        Accepts user hooks given as ``package.module:Attribute``: called with the
        imported object, returns it as a hook or raises ``ValueError`` / ``TypeError``
        saying what a hook must be. Without it, dotted paths are refused.
    builtins : str, optional
        The package whose modules register the built-in hooks: all of them are
        imported the first time a name is looked up, listed or checked.
    """

    def __init__(
        self,
        kind: str,
        validate: Callable[[object], T] | None = None,
        *,
        builtins: str | None = None,
    ) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._paths: dict[str, str] = {}  # name -> dotted path, imported on first use
        self._validate = validate
        self._builtins = builtins  # the package still to import (None once imported)
        # the built-ins are imported once, by one thread, while the others wait: a
        # lookup from a second thread used to find the package marked imported while the
        # first was still importing it (two workloads of one run, each in its thread)
        self._discovery = threading.RLock()
        self._discovering = False

    def _discover(self) -> None:
        """Import every module of the built-ins' package once (they register themselves);
        another thread's lookup waits until they all have, a lookup made while they are
        being imported (by the importing thread itself) does not wait."""
        if self._builtins is None:
            return
        with self._discovery:
            package = self._builtins
            if package is None or self._discovering:
                return
            self._discovering = True
            try:
                path = importlib.import_module(package).__path__
                for module in pkgutil.iter_modules(path):
                    importlib.import_module(f"{package}.{module.name}")
                self._builtins = None
            finally:
                self._discovering = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the hook under ``name``."""

        def deco(item: T) -> T:
            self._items[name] = item
            self._paths.pop(name, None)
            return item

        return deco

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's own hook, so it does not leak into later tests)."""
        self._items.pop(name, None)
        self._paths.pop(name, None)

    def add_path(self, name: str, path: str) -> None:
        """Register ``name`` as the hook at dotted ``path``, imported when first used."""
        if not is_dotted_path(path):
            raise ValueError(f"{self.kind} {name!r}: {path!r} is not 'package.module:Attr'")
        self._paths[name] = path
        self._items.pop(name, None)

    def names(self) -> list[str]:
        """The registered names, sorted (what error messages and the spec offer)."""
        self._discover()
        return sorted({*self._items, *self._paths})

    def check(self, name: str) -> str:
        """Return ``name`` if it is registered or a valid user hook, else raise ValueError.

        A dotted path is imported and validated here, so a spec naming a user hook fails
        at load time with the reason, not later in a node.
        """
        if name in self:
            return name
        if self._validate is not None and is_dotted_path(name):
            self._resolve_user(name)
            return name
        extra = " or 'package.module:Attribute'" if self._validate is not None else ""
        raise ValueError(f"unknown {self.kind} {name!r}; choose one of {self.names()}{extra}")

    def _resolve_user(self, path: str) -> T:
        assert self._validate is not None
        obj = import_dotted(path)
        try:
            return self._validate(obj)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{self.kind} {path!r}: {exc}") from None

    def __getitem__(self, name: str) -> T:
        self._discover()
        if name in self._items:
            return self._items[name]
        if name in self._paths:
            obj = import_dotted(self._paths[name])
            item = self._validate(obj) if self._validate is not None else cast(T, obj)
            self._items[name] = item
            del self._paths[name]
            return item
        self.check(name)
        return self._resolve_user(name)

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._items or name in self._paths

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
