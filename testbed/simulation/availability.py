"""Per-client availability traces: when each client is on, on the virtual clock.

Two file formats, one loader (:func:`load_trace`); the format is documented in
docs/simulation.md:

* ``intervals`` (CSV): lines ``client,start_s,end_s``, each an ON interval in trace
  seconds (a header line and ``#`` comments allowed; ``# period_s: P`` makes the trace
  repeat every ``P`` s). ``client`` is a node name or an index.
* ``fedscale`` (JSON, or a pickle of plain dicts/lists/numbers): FedScale's
  ``client_behave_trace``: ``{client: {"active": [t...], "inactive": [t...],
  "finish_time": T}}``: on from ``active[i]`` to ``inactive[i]``, repeating every
  ``finish_time`` s (as FedScale's ``Client.isActive`` reads it).

Clients of the run are matched to trace clients by name; without a name match, the
i-th client (partition id) takes the (i mod n)-th trace client in sorted order.
A client off at a round's start is not sampled; off during its exchange, it loses it.
"""

from __future__ import annotations

import bisect
import csv
import io
import json
import math
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REASON = "unavailable (availability trace)"


@dataclass(frozen=True)
class ClientTrace:
    """ON intervals of one client, merged and sorted, trace seconds.

    Attributes
    ----------
    starts, ends : tuple of float
        ON intervals ``[starts[i], ends[i])``.
    period_s : float or None
        The trace repeats every ``period_s`` seconds (None: it does not; off after it).
    """

    starts: tuple[float, ...]
    ends: tuple[float, ...]
    period_s: float | None = None

    @staticmethod
    def of(intervals: Sequence[tuple[float, float]], period_s: float | None) -> ClientTrace:
        """Merge overlapping ``(start, end)`` ON intervals."""
        merged: list[list[float]] = []
        for s, e in sorted((float(a), float(b)) for a, b in intervals if b > a):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        return ClientTrace(tuple(m[0] for m in merged), tuple(m[1] for m in merged), period_s)

    def on_throughout(self, a: float, b: float) -> bool:
        """True if the client is ON during all of ``[a, b]`` (trace seconds)."""
        if self.period_s is not None:
            p = self.period_s
            if b - a >= p:
                return self.starts == (0.0,) and self.ends[0] >= p
            shift = math.floor(a / p) * p
            a, b = a - shift, b - shift
            if b > p:  # wraps: on to the end of the period and from its start
                return self.on_throughout(a, p) and self.on_throughout(p, b)
        i = bisect.bisect_right(self.starts, a) - 1
        return i >= 0 and self.ends[i] >= b

    def next_on(self, a: float) -> float | None:
        """The earliest trace time from ``a`` on at which the client is ON (None: never
        again)."""
        shift = 0.0
        if self.period_s is not None:
            shift = math.floor(a / self.period_s) * self.period_s
            a -= shift
        i = bisect.bisect_right(self.starts, a) - 1
        if i >= 0 and self.ends[i] > a:
            return a + shift
        if i + 1 < len(self.starts):
            return self.starts[i + 1] + shift
        if self.period_s is not None and self.starts:
            return self.starts[0] + shift + self.period_s
        return None


class Availability:
    """A trace mapped onto the run's clients, queried on virtual time.

    Parameters
    ----------
    traces : dict of str to ClientTrace
        By trace client id.
    names : list of str
        The run's clients by partition id.
    time_scale : float
        Trace seconds per virtual second.
    """

    def __init__(
        self, traces: dict[str, ClientTrace], names: Sequence[str], time_scale: float
    ) -> None:
        if not traces:
            raise ValueError("availability trace: no client in the file")
        self.traces, self.names, self.scale = traces, names, time_scale
        self.keys = sorted(traces, key=_order)
        # matched by name when any trace client is a client's name (a name lookup per
        # trace client, not per run client); else by partition id, on first use
        self.by_name = any(k in names for k in traces)
        find = getattr(names, "find", None)  # (NodeNames: no table per client)
        self._pid: Any = find if find is not None else {n: i for i, n in enumerate(names)}.get

    def trace_of(self, name: str) -> ClientTrace | None:
        """Client ``name``'s trace (None: no trace, always on): its own by name, else
        the ``(partition id mod n)``-th trace client's."""
        if self.by_name:
            return self.traces.get(name)
        pid = self._pid(name)
        return None if pid is None else self.traces[self.keys[pid % len(self.keys)]]

    def down_reason(self, name: str, a: float, b: float) -> str | None:
        """``REASON`` if ``name`` is off somewhere in virtual ``[a, b]`` (None: on)."""
        trace = self.trace_of(name)
        if trace is None or trace.on_throughout(a * self.scale, b * self.scale):
            return None
        return REASON

    def up_at(self, name: str, t: float) -> float | None:
        """The earliest virtual time from ``t`` on at which ``name`` is on (None: never
        again; a client without a trace is always on)."""
        trace = self.trace_of(name)
        if trace is None:
            return t
        on = trace.next_on(t * self.scale)
        return None if on is None else on / self.scale


def _order(key: str) -> tuple[int, str]:
    return (int(key), "") if key.isdigit() else (1 << 62, key)


def read_intervals(text: str) -> dict[str, ClientTrace]:
    """Parse the ``intervals`` CSV format."""
    period: float | None = None
    rows: dict[str, list[tuple[float, float]]] = {}
    for n, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row or not row[0].strip():
            continue
        head = row[0].strip()
        if head.startswith("#"):
            key, _, value = head.lstrip("# ").partition(":")
            if key.strip() == "period_s":
                period = float(value)
            continue
        if head == "client":
            continue
        if len(row) != 3:
            raise ValueError(f"line {n}: expected client,start_s,end_s; got {row}")
        try:
            rows.setdefault(head, []).append((float(row[1]), float(row[2])))
        except ValueError:
            raise ValueError(f"line {n}: start_s and end_s must be numbers; got {row}") from None
    return {c: ClientTrace.of(iv, period) for c, iv in rows.items()}


def from_fedscale(data: Any) -> dict[str, ClientTrace]:
    """FedScale's ``client_behave_trace`` dict as traces."""
    if not isinstance(data, dict):
        raise ValueError("a FedScale trace is a dict {client: {active, inactive, finish_time}}")
    out = {}
    for client, t in data.items():
        if not isinstance(t, dict) or not {"active", "inactive"} <= set(t):
            raise ValueError(f"client {client!r}: needs 'active' and 'inactive' lists")
        period = float(t["finish_time"]) if t.get("finish_time") else None
        spans = list(zip(t["active"], t["inactive"], strict=False))
        out[str(client)] = ClientTrace.of(spans, period)
    return out


class _PlainUnpickler(pickle.Unpickler):
    """Loads only plain data (dicts, lists, numbers, strings): no code from the file."""

    def find_class(self, module: str, name: str) -> Any:
        raise ValueError(f"availability trace: pickle refers to {module}.{name}; plain data only")


def load_trace(path: str | Path, fmt: str = "auto") -> dict[str, ClientTrace]:
    """Read a trace file (``intervals`` CSV, FedScale JSON or pickle), ``auto``: by content.

    Raises
    ------
    ValueError
        Naming the file and what is wrong with it.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"availability trace {str(p)!r}: no such file")
    raw = p.read_bytes()
    try:
        if fmt == "intervals" or (fmt == "auto" and raw[:1] not in (b"{", b"\x80")):
            return read_intervals(raw.decode())
        data = json.loads(raw) if raw[:1] == b"{" else _PlainUnpickler(io.BytesIO(raw)).load()
        return from_fedscale(data)
    except (ValueError, pickle.UnpicklingError, UnicodeDecodeError) as e:
        raise ValueError(f"availability trace {str(p)!r}: {e}") from None


def diurnal_trace(
    clients: int,
    hours: float = 24.0,
    slot_s: float = 900.0,
    seed: int = 0,
    mean_on: float = 0.6,
    swing: float = 0.35,
) -> dict[str, list[tuple[float, float]]]:
    """Synthetic diurnal ON intervals (modelled, not a measured trace).

    Each client has a random local phase (its time zone); in each slot of ``slot_s``
    seconds it is on with probability ``mean_on + swing * cos(2 pi (h - 20 h) / 24 h)``
    at its local hour ``h`` (most on in the evening), clipped to [0, 1].
    """
    rng = np.random.default_rng(seed)
    slots = int(hours * 3600 / slot_s)
    t = np.arange(slots) * slot_s
    out: dict[str, list[tuple[float, float]]] = {}
    for c in range(clients):
        local_h = (t / 3600.0 + rng.uniform(0, 24)) % 24
        p = np.clip(mean_on + swing * np.cos(2 * np.pi * (local_h - 20.0) / 24.0), 0, 1)
        on = rng.random(slots) < p
        out[str(c)] = [(float(t[i]), float(t[i] + slot_s)) for i in np.flatnonzero(on)]
    return out


def write_intervals(traces: dict[str, list[tuple[float, float]]], period_s: float | None) -> str:
    """The ``intervals`` CSV text of ``traces`` (merged intervals)."""
    lines = [f"# period_s: {period_s:g}"] if period_s else []
    lines.append("client,start_s,end_s")
    for c, iv in traces.items():
        tr = ClientTrace.of(iv, period_s)
        lines += [f"{c},{s:g},{e:g}" for s, e in zip(tr.starts, tr.ends, strict=True)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m testbed.simulation.availability CLIENTS HOURS OUT [SEED]``: write a
    synthetic diurnal trace (intervals CSV, repeating every ``HOURS``)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (3, 4):
        print(main.__doc__)
        return 2
    clients, hours, out = int(args[0]), float(args[1]), Path(args[2])
    seed = int(args[3]) if len(args) == 4 else 0
    out.write_text(write_intervals(diurnal_trace(clients, hours, seed=seed), hours * 3600))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
