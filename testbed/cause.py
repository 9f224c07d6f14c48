"""Why a run failed: the first error, with the node and the log file it came from.

A failed run's record holds its cause in three places: the logs of its processes under
``runs/<run-id>/logs/`` (one per node, ``<node>.log``; the Flower run's ``flwr-run.log``,
where the ServerApp's traceback lands; ``simulation.log``), the store's ``error`` events
(an exception the runner or a workload raised) and the summary's ``reason``.
:func:`find_cause` reads them in this order of preference:

1. the first Python traceback in a log: its exception line (``ValueError: ...``) and
   the deepest frame (``File "...", line N, in f``);
2. the runner's own error (an ``error`` event, else the summary's ``reason``);
3. the first ``ERROR``/``CRITICAL`` log line, a bare ``SomethingError: ...`` line, or
   the error panel of Flower's CLI (``flwr run`` refused: ``╭─ Error ─╮ │ ... │``).

Logs are read in a fixed order: ``flwr-run.log`` (the ServerApp drives an FL run),
``simulation.log``, then each other log by name (nodes), then the run folder's own
(``watchdog.log``); within a log the earliest line wins. The runner records the cause
in the summary of a run it marks failed (``summary["cause"]``, :meth:`Cause.as_dict`),
so listings read it without scanning again; :func:`failure_cause` scans only runs
recorded before that.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testbed.rows import EventRow, RunRow
    from testbed.store import RunStore

__all__ = ["Cause", "failure_cause", "find_cause", "scan_log"]

#: Logs read first, in this order (the rest follow by name).
FIRST_LOGS = ("flwr-run.log", "simulation.log")
#: Characters kept of one log line.
MAX_LINE = 300
#: Bytes read of one log (a runaway log is read from its start up to this).
MAX_LOG_BYTES = 8_000_000

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\s+")
_TRACEBACK = "Traceback (most recent call last):"
#: How Flower's CLI (rich) opens an error panel: ``╭─ Error ───…╮``.
_PANEL = "╭─ Error"
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')
#: The last line of a traceback: ``pkg.mod.SomeError: message`` (or a bare name).
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault)\b(?::.*)?$"
)
#: A log line at level ERROR or CRITICAL (Flower's ``ERROR :  ...``, logging's
#: ``ERROR:name:...``, or ``<stamp> ERROR [logger] ...``; not a logger named ``*.error``).
_LEVEL = re.compile(r"^(?:ERROR|CRITICAL)\b\s*[:\[]?\s*(.*)$")
#: Priorities (lower wins).
TRACEBACK, RUNNER, ERROR_LINE = 0, 1, 2


@dataclass(frozen=True)
class Cause:
    """The first error of a failed run.

    Attributes
    ----------
    message : str
        The error line (``ValueError: ...``), one line, at most :data:`MAX_LINE` chars.
    node : str or None
        The node whose process wrote it (None: the runner, or not known).
    log : str or None
        The log file, relative to the run's artifact folder (``logs/edge-1.log``);
        None when the cause is the runner's own error.
    line : int or None
        1-based line number of ``message`` in ``log``.
    where : str or None
        The deepest frame of its traceback outside installed packages, else the deepest
        (``nodes/data/datasets.py:146 in load_npz``).
    """

    message: str
    node: str | None = None
    log: str | None = None
    line: int | None = None
    where: str | None = None

    @property
    def origin(self) -> str:
        """``node edge-1, logs/edge-1.log:12`` (what wrote it, and where it is)."""
        parts = []
        if self.node:
            app = " (ServerApp)" if self.log == "logs/flwr-run.log" else ""
            parts.append(f"node {self.node}{app}")
        if self.log:
            parts.append(self.log + (f":{self.line}" if self.line else ""))
        return ", ".join(parts) or "the runner"

    def short(self, width: int = 70) -> str:
        """One line for listings: ``node: message`` cut to ``width`` characters."""
        text = f"{self.node}: {self.message}" if self.node else self.message
        return text if len(text) <= width else text[: width - 1] + "…"

    def as_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "node": self.node,
            "log": self.log,
            "line": self.line,
            "where": self.where,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Cause:
        line = d.get("line")
        return cls(
            message=str(d.get("message", "")),
            node=d.get("node"),
            log=d.get("log"),
            line=int(line) if line is not None else None,
            where=d.get("where"),
        )


@dataclass(frozen=True)
class _Hit:
    priority: int
    message: str
    line: int
    where: str | None = None


def _clean(line: str) -> str:
    """A log line without colour codes, timestamp prefix and surrounding blanks."""
    return _STAMP.sub("", _ANSI.sub("", line)).strip()


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 1] + "…"


def _frame(line: str) -> str | None:
    m = _FRAME.match(line)
    if not m:
        return None
    path, no, fn = m.groups()
    for root in ("site-packages/", "/nodes/", "/testbed/", "/radio/"):
        if root in path:  # shorten to the package-relative path
            path = root.lstrip("/") + path.split(root, 1)[1]
            break
    return f"{path}:{no} in {fn.strip()}"


def _panel(lines: list[str], start: int) -> str | None:
    """The text of the error panel that Flower's CLI (``flwr run``: rich) draws from
    line ``start`` (``╭─ Error ─…╮``, ``│ text │`` lines, ``╰─…╯``), else None."""
    if not _clean(lines[start]).startswith(_PANEL):
        return None
    words = []
    for raw in lines[start + 1 :]:
        text = _clean(raw)
        if not text.startswith("│"):
            break
        words.append(text.strip("│ "))
    return f"Error: {' '.join(w for w in words if w)}" if any(words) else None


def _first_error_line(lines: list[str], no: int) -> _Hit | None:
    """Line ``no`` (1-based) as an error line (level ERROR/CRITICAL, a bare exception
    line, or the start of Flower's CLI error panel), else None."""
    text = _clean(lines[no - 1])
    if ((m := _LEVEL.match(text)) and m.group(1)) or (_EXCEPTION.match(text) and ":" in text):
        return _Hit(ERROR_LINE, _cut(text), no)
    panel = _panel(lines, no - 1)
    return _Hit(ERROR_LINE, _cut(panel), no) if panel else None


def scan_log(lines: Iterable[str]) -> _Hit | None:
    """The first error of one log: the first traceback's exception line (with its
    deepest frame, preferring the project's own over installed packages'), else its
    first ERROR line, bare exception line or Flower CLI error panel."""
    lines = list(lines)
    fallback: _Hit | None = None
    in_tb, frame, own = False, None, None  # deepest frame; deepest outside site-packages
    for no, raw in enumerate(lines, 1):
        text = _clean(raw)
        if not in_tb:
            if text.endswith(_TRACEBACK):
                in_tb, frame, own = True, None, None
            elif fallback is None:
                fallback = _first_error_line(lines, no)
            continue
        if (f := _frame(raw.strip())) is not None:
            frame, own = f, (own if f.startswith("site-packages/") else f)
        elif _EXCEPTION.match(text):
            return _Hit(TRACEBACK, _cut(text), no, own or frame)
        elif text and not raw.startswith((" ", "\t")) and not text.startswith(("^", "~")):
            in_tb = False  # the traceback ended without an exception line we know
    return fallback


def _logs(run_dir: Path) -> list[Path]:
    """The run's logs in reading order (see the module's docstring)."""
    logs = sorted((run_dir / "logs").glob("*.log")) if (run_dir / "logs").is_dir() else []
    first = [p for name in FIRST_LOGS for p in logs if p.name == name]
    rest = [p for p in logs if p.name not in FIRST_LOGS]
    return first + rest + sorted(run_dir.glob("*.log"))


def _read(path: Path) -> list[str]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_LOG_BYTES)
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()


def _node_of(path: Path, run_dir: Path, nodes: Iterable[str], server: str | None) -> str | None:
    if path.parent != run_dir / "logs":
        return None
    if path.name == "flwr-run.log":  # the ServerApp runs beside the SuperLink
        return server
    return path.stem if path.stem in set(nodes) else None


def find_cause(
    run_dir: Path,
    summary: Mapping[str, Any],
    events: Iterable[EventRow],
    server: str | None = None,
) -> Cause | None:
    """The first error of a failed run from its logs, error events and summary.

    Parameters
    ----------
    run_dir : pathlib.Path
        The run's artifact folder (``runs/<run-id>``); missing: no logs read.
    summary : Mapping
        The run's summary (its ``reason``, if any).
    events : iterable of EventRow
        The run's events (``error`` events; ``fleet_starting`` names the nodes).
    server : str or None
        The node whose process writes ``flwr-run.log`` (the ServerApp's), if known.

    Returns
    -------
    Cause or None
        None when nothing in the record looks like an error.
    """
    events = list(events)
    nodes = [n for e in events if e.kind == "fleet_starting" for n in e.data_dict.get("nodes", [])]
    nodes += [e.node for e in events if e.node]
    best: tuple[_Hit, Path] | None = None
    for path in _logs(run_dir):
        hit = scan_log(_read(path))
        if hit is not None and (best is None or hit.priority < best[0].priority):
            best = (hit, path)
            if hit.priority == TRACEBACK:
                break
    if best is not None and best[0].priority == TRACEBACK:
        return _from_log(best, run_dir, nodes, server)
    runner = next((e for e in events if e.kind == "error"), None)
    if runner is not None and runner.data_dict.get("message"):
        return Cause(_cut(str(runner.data_dict["message"])), node=runner.node)
    if summary.get("reason"):
        return Cause(_cut(str(summary["reason"])))
    return _from_log(best, run_dir, nodes, server) if best is not None else None


def _from_log(
    best: tuple[_Hit, Path], run_dir: Path, nodes: list[str], server: str | None
) -> Cause:
    hit, path = best
    return Cause(
        hit.message,
        node=_node_of(path, run_dir, nodes, server),
        log=str(path.relative_to(run_dir)),
        line=hit.line,
        where=hit.where,
    )


def failure_cause(store: RunStore, run: RunRow) -> Cause | None:
    """The cause of ``run`` if it failed: the one the runner recorded in its summary,
    else found in its record now (:func:`find_cause`); None for a run not failed."""
    if run.status != "failed":
        return None
    summary = run.summary_dict
    if isinstance(summary.get("cause"), Mapping):
        return Cause.from_dict(summary["cause"])
    run_dir = Path(run.artifact_dir) if run.artifact_dir else store.artifact_dir(run.run_id)
    return find_cause(run_dir, summary, store.events(run.run_id), server_of(run_dir))


def server_of(run_dir: Path) -> str | None:
    """The server node of a run, from its resolved spec (None: no spec, or no server)."""
    from testbed.planner import make_plan
    from testbed.spec.loader import SpecError, load_spec

    path = run_dir / "spec.resolved.yaml"
    if not path.is_file():
        return None
    try:
        plan = make_plan(load_spec(path))
    except (SpecError, ValueError, OSError):
        return None
    return next((n.name for n in plan.nodes if n.role == "server"), None)
