"""Load experiment YAML into :class:`Experiment`, reporting every error with path + line.

Reading (bytes, YAML, limits, lines) is :mod:`testbed.spec.rawyaml`; this module maps
pydantic's errors onto the file, applies ``--set`` overrides and expands sweeps.
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kernel.frozen import SPEC_DIR
from testbed.spec.errors import Loc, Problem, SpecError, dotted, unique
from testbed.spec.models import MAX_FLEET_NODES, Experiment
from testbed.spec.rawyaml import decode, line_of, nonfinite, read_value, read_yaml

__all__ = ["Problem", "SpecError", "expand", "load_spec", "parse_set", "parse_spec"]

MAX_RUNS = 10_000  # configurations x repetitions of one file (a sweep)


def _resolve(loc: Loc, lines: dict[Loc, int]) -> tuple[Loc, int]:
    """Map a pydantic loc onto the YAML: skip union/tag elements absent from the file."""
    path: Loc = ()
    line = lines.get((), 0)
    for el in loc:
        if path + (el,) in lines:
            path = path + (el,)
            line = lines[path]
        elif isinstance(el, str) and el[:1].isupper():
            continue  # union member names such as 'DeviceProfile'
        else:
            path = path + (el,)  # missing key: keep the path, line of the parent
    return path, line


def _index(part: str) -> str | int:
    return int(part) if part.isascii() and part.isdigit() else part


def _message(e: Any) -> str:
    msg = str(e["msg"]).removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        return "unknown key"
    if e["type"] not in ("missing", "value_error") and "input" in e:
        inp = e["input"]
        if not isinstance(inp, dict | list):
            msg += f" (got {_short(inp)})"
    return msg


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _problems(err: ValidationError, lines: dict[Loc, int]) -> list[Problem]:
    out: list[Problem] = []
    for e in err.errors():
        loc = tuple(e["loc"])
        # model-level errors carry "path: message" lines (see Experiment._references)
        for part in _message(e).split("\n"):
            head, sep, tail = part.partition(": ")
            sub: Loc = loc
            if (
                (not loc or head.startswith(dotted(loc) + "."))
                and sep
                and " " not in head
                and head.split(".")[0] in Experiment.model_fields
            ):
                sub = tuple(_index(x) for x in head.split("."))
                part = tail
            path, line = _resolve(sub, lines)
            out.append(Problem(dotted(path), line, part))
    return out


def set_dotted(
    raw: dict[str, Any], key: str, value: Any, source: str = "--set", line: int = 0
) -> None:
    """Set ``a.b.0.c = value`` in a raw dict, creating mappings as needed.

    Raises
    ------
    SpecError
        A list index that is not an item, or a path through a value that is not a
        mapping (reported under ``source`` at ``line``).
    """
    parts = key.split(".")
    cur: Any = raw
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(cur, list):
            if not (p.isascii() and p.isdigit()) or int(p) >= len(cur):
                raise SpecError(source, [Problem(key, line, f"no list item {p!r}")])
            if last:
                cur[int(p)] = value
            else:
                cur = cur[int(p)]
        elif isinstance(cur, dict):
            if last:
                cur[p] = value
            else:
                cur = cur.setdefault(p, {})
        else:
            where = ".".join(parts[:i])
            raise SpecError(source, [Problem(key, line, f"{where} is not a mapping or a list")])


def parse_set(items: list[str]) -> list[tuple[str, Any]]:
    """Parse ``key.path=value`` strings; values are YAML scalars/lists.

    Raises
    ------
    SpecError
        An item without ``=`` or a key, or a value that is not YAML (every bad item is
        reported, under ``--set``).
    """
    out, problems = [], []
    for item in items:
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            problems.append(Problem(item, 0, "expected key.path=value"))
            continue
        try:
            out.append((key.strip(), read_value(val, "--set")))
        except SpecError as e:
            problems += [Problem(key.strip(), 0, p.message) for p in e.problems]
    if problems:
        raise SpecError("--set", problems)
    return out


def parse_spec(
    text: str,
    source: str = "<string>",
    overrides: list[tuple[str, Any]] | None = None,
    folder: Path | None = None,
) -> Experiment:
    """Validate YAML text into an :class:`Experiment` (sweep not expanded).

    Files the spec names (datasets, traces, TLE files, function modules) are resolved
    against ``folder`` (default: the folder of ``source`` when it is a file, else the
    current directory), and checked here (so ``validate`` refuses what ``run`` would
    fail on).
    """
    raw, lines = read_yaml(text, source)
    for k, v in overrides or []:
        set_dotted(raw, k, v)
    return _validate(raw, lines, source, folder or _spec_folder(source))


def _spec_folder(source: str) -> Path:
    """Where a spec's relative paths point: its own folder, or the current directory
    for a text that is not a file (``<string>``, the dashboard's editor)."""
    path = Path(source)
    return (path.parent if path.is_file() else Path.cwd()).resolve()


def _reference_problems(raw: dict[str, Any], lines: dict[Loc, int]) -> list[Problem]:
    """Nodes referenced but not defined, checked on the raw file so that these are
    reported together with type errors elsewhere (the model re-checks them)."""
    fleet = raw.get("fleet")
    nodes = fleet.get("nodes") if isinstance(fleet, dict) else None
    if not isinstance(nodes, list):
        return []
    names: set[str] = set()
    for n in nodes:
        if isinstance(n, dict) and isinstance(n.get("id"), str):
            count = n.get("count", 1)
            count = count if isinstance(count, int) and 0 < count <= MAX_FLEET_NODES else 1
            nid = n["id"]
            names.update([nid] if count == 1 else [f"{nid}-{i}" for i in range(1, count + 1)])
    refs: list[tuple[Loc, object]] = []
    links = raw.get("links")
    if isinstance(links, dict) and isinstance(links.get("nodes"), dict):
        refs += [(("links", "nodes", k), k) for k in links["nodes"]]
    faults = raw.get("faults")
    if isinstance(faults, list):
        refs += [
            (("faults", i, "node"), f.get("node"))
            for i, f in enumerate(faults)
            if isinstance(f, dict) and f.get("node") is not None
        ]
    return [
        Problem(
            dotted(loc),
            lines.get(loc, 0),
            f"node {name!r} is not defined in fleet.nodes (defined: {_few(names)})",
        )
        for loc, name in refs
        if not isinstance(name, str) or name not in names
    ]


def _few(names: set[str], limit: int = 20) -> str:
    """Up to ``limit`` names, sorted, and how many more there are."""
    shown = sorted(names)[:limit]
    more = len(names) - len(shown)
    return f"{shown}" + (f" and {more} more" if more else "")


def _validate(
    raw: dict[str, Any], lines: dict[Loc, int], source: str, folder: Path
) -> Experiment:
    """Validate a raw document; every problem (type errors, undefined references,
    infinite numbers) is reported together, each once; relative paths point into
    ``folder``."""
    bad_numbers = nonfinite(raw, lines)
    try:
        exp = Experiment.model_validate(raw, context={SPEC_DIR: folder})
    except ValidationError as err:
        probs = _problems(err, lines)
        seen = {(p.path, p.line) for p in probs}
        probs += [p for p in _reference_problems(raw, lines) if (p.path, p.line) not in seen]
        seen_paths = {p.path for p in probs}
        probs += [p for p in bad_numbers if p.path not in seen_paths]
        probs = sorted(unique(probs), key=lambda p: (p.line or 10**9, p.path))
        raise SpecError(source, probs) from None
    # pydantic turns the string "1e309" (YAML 1.1 reads no float without a dot) into inf
    bad_numbers = nonfinite(exp.model_dump(), lines)
    if bad_numbers:
        raise SpecError(source, bad_numbers)
    return exp


def read_spec(path: str | Path) -> str:
    """The text of an experiment file (UTF-8, at most ``MAX_SPEC_BYTES``).

    Raises
    ------
    SpecError
        No such file, not readable, too large or not UTF-8.
    """
    p = Path(path)
    try:
        if not p.is_file():
            raise SpecError(str(path), [Problem("", 0, "no such file")])
        data = p.read_bytes()
    except OSError as e:
        raise SpecError(str(path), [Problem("", 0, f"cannot read: {e.strerror}")]) from None
    return decode(data, str(path))


def error_at(path: str | Path, yaml_path: str, message: str) -> SpecError:
    """A :class:`SpecError` about ``yaml_path`` of a file, with its line (0 if the file
    cannot be read or the path is not in it)."""
    loc = tuple(_index(x) for x in yaml_path.split(".")) if yaml_path else ()
    try:
        _raw, lines = read_yaml(read_spec(path), str(path))
    except SpecError:
        lines = {}
    return SpecError(str(path), [Problem(yaml_path, line_of(loc, lines), message)])


def load_spec(
    path: str | Path, overrides: list[tuple[str, Any]] | None = None, folder: Path | None = None
) -> Experiment:
    """Load and validate an experiment file (relative paths: :func:`parse_spec`)."""
    return parse_spec(read_spec(path), str(path), overrides, folder)


def expand(
    path: str | Path, overrides: list[tuple[str, Any]] | None = None, folder: Path | None = None
) -> list[tuple[dict[str, Any], Experiment]]:
    """Expand a file's sweep grid into concrete experiments (one per combination).

    Returns ``(assignment, experiment)`` pairs; every combination is validated and all
    errors of all combinations are reported together, each once. Relative paths point
    into ``folder`` (default: the file's folder).

    Raises
    ------
    SpecError
        The file or a combination is invalid, or the sweep has more than
        :data:`MAX_RUNS` runs (configurations x repetitions).
    """
    text = read_spec(path)
    folder = folder or _spec_folder(str(path))
    base = parse_spec(text, str(path), overrides, folder)
    raw, lines = read_yaml(text, str(path))
    _check_runs(base, lines, str(path))
    if not base.sweep.grid:
        return [({}, base)]
    for k, v in overrides or []:
        set_dotted(raw, k, v)
    raw.pop("sweep", None)
    keys = list(base.sweep.grid)
    out, problems = [], []
    for combo in itertools.product(*(base.sweep.grid[k] for k in keys)):
        assign = dict(zip(keys, combo, strict=True))
        try:
            r = copy.deepcopy(raw)
            for k, v in assign.items():
                set_dotted(r, k, v, str(path), line_of(("sweep", "grid", k), lines))
            out.append((assign, _validate(r, lines, f"{path} [{assign}]", folder)))
        except SpecError as e:
            problems += e.problems
    if problems:
        raise SpecError(str(path), unique(problems))
    return out


def _check_runs(exp: Experiment, lines: dict[Loc, int], source: str) -> None:
    configurations = 1
    for values in exp.sweep.grid.values():
        configurations *= len(values)
    runs = configurations * exp.repetitions
    if runs > MAX_RUNS:
        msg = (
            f"{configurations} configuration(s) x {exp.repetitions} repetition(s) = {runs} "
            f"runs; one file may plan at most {MAX_RUNS}"
        )
        loc: Loc = ("sweep", "grid") if exp.sweep.grid else ("repetitions",)
        raise SpecError(source, [Problem(dotted(loc), line_of(loc, lines), msg)])
