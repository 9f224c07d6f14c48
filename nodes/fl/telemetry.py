"""Append-only JSON-lines telemetry that a node writes and the control plane ingests.

One line per record, flushed at once, so a run killed halfway keeps every line it
wrote. Record kinds: ``event`` (name, data), ``metric`` (name, value), ``status``
(per (round, node): completed | failed | excluded | late, with a reason).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any


class Telemetry:
    """Thread-safe JSONL writer.

    Parameters
    ----------
    path : pathlib.Path or None
        File to append to; ``None`` makes every call a no-op (e.g. bare Flower runs).
    """

    def __init__(self, path: str | Path | None) -> None:
        self._lock = threading.Lock()
        self._fh = None
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 (held open)

    def _write(self, rec: dict[str, Any]) -> None:
        if self._fh is None:
            return
        rec["t"] = time.time()
        line = json.dumps(rec, default=float)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()

    def event(
        self, name: str, round: int | None = None, node: str | None = None, **data: Any
    ) -> None:
        """Record an event (``round_start``, ``round_end``, ``run_end``...)."""
        self._write({"kind": "event", "name": name, "round": round, "node": node, "data": data})

    def metric(
        self, name: str, value: float, round: int | None = None, node: str | None = None
    ) -> None:
        """Record one metric value (node ``None`` means the server / global)."""
        self._write(
            {"kind": "metric", "name": name, "value": float(value), "round": round, "node": node}
        )

    def status(self, round: int, node: str, status: str, reason: str = "") -> None:
        """Record a (round, node) participation status."""
        self._write(
            {"kind": "status", "round": round, "node": node, "status": status, "reason": reason}
        )
