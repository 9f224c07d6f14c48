"""Typed rows read from the run store (``testbed.store.RunStore``).

Each read of the store returns immutable records. The table rows are
``typing.NamedTuple`` classes, so they still unpack by position as the plain tuples
did (``for rnd, node, name, value, ts in store.metrics(run_id)``) and compare equal to
tuples of the same values, and their fields can be read by name (``row.value``).
A run is a frozen dataclass (``RunRow``): it is always read by name.

Times (``ts``, ``created_at``, ``finished_at``) are Unix seconds; ``round`` is the
1-based Flower round (None for rows that belong to no round).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True)
class RunRow:
    """A row of the ``runs`` table (one run)."""

    run_id: str
    name: str
    sweep_id: str | None
    variant: str | None
    status: str
    backend: str | None
    seed: int | None
    spec_path: str | None
    artifact_dir: str | None
    pid: int | None
    created_at: float
    finished_at: float | None
    summary: str | None

    @property
    def summary_dict(self) -> dict[str, Any]:
        """The run summary (JSON column) as a dict; empty while the run is running."""
        if not self.summary:
            return {}
        value: dict[str, Any] = json.loads(self.summary)
        return value


class MetricRow(NamedTuple):
    """A metric value, as ``RunStore.metrics`` returns it."""

    round: int | None
    node: str | None
    name: str
    value: float | None
    ts: float


class MetricCursorRow(NamedTuple):
    """A metric value with its row id (a cursor), as ``RunStore.metrics_since`` returns it."""

    id: int
    round: int | None
    node: str | None
    name: str
    value: float | None
    ts: float


class TaggedMetricRow(NamedTuple):
    """A metric value with its decoded tags, as ``RunStore.tagged_metrics`` returns it."""

    round: int | None
    node: str | None
    name: str
    value: float | None
    tags: dict[str, Any]


class WorkloadMetricRow(NamedTuple):
    """A metric with its time, its workload (None: the fleet's) and its tags."""

    ts: float
    round: int | None
    node: str | None
    name: str
    value: float | None
    workload: str | None
    tags: dict[str, Any]


class EventRow(NamedTuple):
    """A row of the ``events`` table; ``data`` is the JSON text of the event's fields."""

    id: int
    ts: float
    kind: str
    round: int | None
    node: str | None
    data: str | None

    @property
    def data_dict(self) -> dict[str, Any]:
        """The event's fields (``data`` decoded); empty when there are none."""
        if not self.data:
            return {}
        value: dict[str, Any] = json.loads(self.data)
        return value


class StatusRow(NamedTuple):
    """A row of the ``round_status`` table: one node's outcome in one round."""

    round: int
    node: str
    status: str
    reason: str | None


class TimedStatusRow(NamedTuple):
    """A ``StatusRow`` with the time it was set, as ``round_status(with_ts=True)`` returns it."""

    round: int
    node: str
    status: str
    reason: str | None
    ts: float


class InjectionRow(NamedTuple):
    """A row of the ``injections`` table; ``spec`` is the fault's JSON text."""

    id: int
    ts: float
    spec: str
    status: str


class PendingInjection(NamedTuple):
    """A queued live fault, as ``RunStore.pending_injections`` returns it."""

    id: int
    spec: dict[str, Any]
