"""The backends a launch may use, and whether this host offers each now (``GET /backends``).

Every backend of the registry (:data:`testbed.backends.BACKENDS`) is listed with what it
declares and its own answer to :meth:`~testbed.backends.base.Backend.unavailable` (the
docker backend pings its engine with a short timeout, the simulation looks Ray up). Each
answer is kept for :data:`AVAILABILITY_TTL_S` seconds, so a dashboard polling the page
does not ping the engine on every rerun. Nothing here imports a backend's package at
import time: the registry is read on the first request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testbed.spec.models import Experiment

AVAILABILITY_TTL_S = 5.0
DEFAULT_BACKEND = "local"


def _summary(doc: str | None) -> str:
    """The first paragraph of a class docstring, on one line."""
    return (doc or "").strip().split("\n\n", 1)[0].replace("\n", " ")


def backend_row(name: str) -> dict[str, Any]:
    """Backend ``name`` (registered), asked now: ``name``, ``available``, ``reason``
    (None when available), ``default``, ``summary``, ``workloads`` (None: every
    workload), ``user_apps`` and ``decides_faults`` (its own clock decides the faults)."""
    from testbed.backends import BACKENDS

    cls = BACKENDS[name]
    reason = cls.unavailable()
    return {
        "name": name,
        "available": reason is None,
        "reason": reason,
        "default": name == DEFAULT_BACKEND,
        "summary": _summary(cls.__doc__),
        "workloads": None if cls.workloads is None else sorted(cls.workloads),
        "user_apps": cls.user_apps,
        "decides_faults": cls.decides_faults,
    }


class BackendOffer:
    """:func:`backend_row` of each backend, asked again at most every ``ttl_s`` seconds
    (per backend, so a launch on ``local`` never waits for a Docker ping; thread-safe)."""

    def __init__(self, ttl_s: float = AVAILABILITY_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()  # guards _locks and the registry's first ask
        self._locks: dict[str, threading.Lock] = {}  # one per backend: one ping at a time
        self._rows: dict[str, tuple[float, dict[str, Any]]] = {}  # name -> (asked at, row)

    def names(self) -> list[str]:
        """The registered backends, sorted."""
        from testbed.backends import BACKENDS

        with self._lock:  # (the registry imports its built-ins on the first ask: once)
            return BACKENDS.names()

    def row(self, name: str) -> dict[str, Any] | None:
        """Backend ``name`` and whether it is available, at most ``ttl_s`` old (None
        when no backend has that name)."""
        if name not in self.names():
            return None
        with self._lock:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:  # (one ping of a backend at a time; the others wait for its answer)
            at, row = self._rows.get(name, (float("-inf"), {}))
            if time.monotonic() - at > self.ttl_s:
                row = backend_row(name)
                self._rows[name] = (time.monotonic(), row)
            return dict(row)

    def rows(self) -> list[dict[str, Any]]:
        """Every registered backend and whether it is available, at most ``ttl_s`` old."""
        return [r for r in map(self.row, self.names()) if r is not None]

    def refusal(
        self, name: str, experiments: Sequence[Experiment] | None = None
    ) -> tuple[str, list[dict[str, Any]]] | None:
        """Why a launch on backend ``name`` must be refused: ``(message, problems)``, each
        problem a ``path``, ``line`` (0) and ``message``; None when it may go ahead.

        Refused: a name no backend has, a backend this host does not offer now (both
        name the field ``backend``), and ``experiments`` its preflight refuses
        (:func:`testbed.backends.preflight`, what ``testbed run --backend`` checks;
        the problem names the spec's field where the refusal does).
        """
        row = self.row(name)
        if row is None:
            why = f"backend: unknown backend {name!r}; choose one of {self.names()}"
            return why, [{"path": "backend", "line": 0, "message": why}]
        if not row["available"]:
            why = f"backend: {name} is not available on this host now: {row['reason']}"
            return why, [{"path": "backend", "line": 0, "message": why}]
        if not experiments:
            return None
        from testbed.backends import preflight

        try:
            preflight(name, experiments)
        except ValueError as e:
            field = str(e).split(": ", 1)[0]
            path = field if field and " " not in field else "backend"
            why = f"backend {name} refuses this experiment: {e}"
            return why, [{"path": path, "line": 0, "message": str(e)}]
        return None
