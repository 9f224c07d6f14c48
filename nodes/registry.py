"""Extension hooks registered by name (house rule 6): datasets, partitioners, models."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of hooks with a ``register`` decorator and clear errors.

    Parameters
    ----------
    kind : str
        What the hooks are (used in error messages), e.g. ``"dataset"``.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the hook under ``name``."""

        def deco(item: T) -> T:
            self._items[name] = item
            return item

        return deco

    def check(self, name: str) -> str:
        """Return ``name`` if registered, else raise ValueError listing the choices."""
        if name not in self._items:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of {sorted(self)}")
        return name

    def __getitem__(self, name: str) -> T:
        return self._items[self.check(name)]

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)
