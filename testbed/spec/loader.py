"""Load experiment YAML into :class:`Experiment`, reporting every error with path + line."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from testbed.spec.models import Experiment

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One validation error: YAML path, line (1-based, 0 if unknown) and message."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.line}: {self.path or '<top>'}: {self.message}"


class SpecError(ValueError):
    """An experiment file is invalid; ``problems`` lists every error found."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {source}:{p}" for p in problems)
        super().__init__(f"{len(problems)} error(s) in {source}:\n{lines}")


def _line_map(node: yaml.Node, path: Loc, out: dict[Loc, int], dups: list[Problem]) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            key = k.value
            if key in seen:
                dups.append(Problem(_dotted(path + (key,)), k.start_mark.line + 1, "duplicate key"))
            seen.add(key)
            out[path + (key,)] = k.start_mark.line + 1
            _line_map(v, path + (key,), out, dups)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out[path + (i,)] = v.start_mark.line + 1
            _line_map(v, path + (i,), out, dups)


def _dotted(loc: Loc) -> str:
    return ".".join(str(x) for x in loc)


def _resolve(loc: Loc, lines: dict[Loc, int]) -> tuple[Loc, int]:
    """Map a pydantic loc onto the YAML: skip union/tag elements absent from the file."""
    path: Loc = ()
    line = 0
    for el in loc:
        if path + (el,) in lines:
            path = path + (el,)
            line = lines[path]
        elif isinstance(el, str) and el[:1].isupper():
            continue  # union member names such as 'DeviceProfile'
        else:
            path = path + (el,)  # missing key: keep the path, line of the parent
    return path, line


def _problems(err: ValidationError, lines: dict[Loc, int]) -> list[Problem]:
    out: list[Problem] = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        loc = tuple(e["loc"])
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] not in ("missing", "value_error") and "input" in e:
            inp = e["input"]
            if not isinstance(inp, dict | list):
                msg += f" (got {inp!r})"
        # model-level errors carry "path: message" lines (see Experiment._references)
        for part in msg.split("\n"):
            head, sep, tail = part.partition(": ")
            sub: Loc = loc
            if (
                not loc
                and sep
                and " " not in head
                and head.split(".")[0] in Experiment.model_fields
            ):
                sub = loc + tuple(int(x) if x.isdigit() else x for x in head.split("."))
                part = tail
            path, line = _resolve(sub, lines)
            out.append(Problem(_dotted(path), line, part))
    return out


def set_dotted(raw: dict, key: str, value: Any) -> None:
    """Set ``a.b.0.c = value`` in a raw dict, creating mappings as needed."""
    parts = key.split(".")
    cur: Any = raw
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(cur, list):
            if not p.isdigit() or int(p) >= len(cur):
                raise SpecError("--set", [Problem(key, 0, f"no list item {p!r}")])
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
            raise SpecError("--set", [Problem(key, 0, f"{'.'.join(parts[:i])} is not a mapping")])


def parse_set(items: list[str]) -> list[tuple[str, Any]]:
    """Parse ``key.path=value`` strings; values are YAML scalars/lists."""
    out = []
    for item in items:
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise SpecError("--set", [Problem(item, 0, "expected key.path=value")])
        out.append((key.strip(), yaml.safe_load(val)))
    return out


def parse_spec(
    text: str, source: str = "<string>", overrides: list[tuple[str, Any]] | None = None
) -> Experiment:
    """Validate YAML text into an :class:`Experiment` (sweep not expanded)."""
    raw, lines = _read(text, source)
    for k, v in overrides or []:
        set_dotted(raw, k, v)
    return _validate(raw, lines, source)


def _read(text: str, source: str) -> tuple[dict, dict[Loc, int]]:
    try:
        node = yaml.compose(text)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        raise SpecError(source, [Problem("", line, f"invalid YAML: {exc}")]) from None
    if not isinstance(raw, dict):
        raise SpecError(source, [Problem("", 1, "the file must be a mapping of keys")])
    lines: dict[Loc, int] = {}
    dups: list[Problem] = []
    _line_map(node, (), lines, dups)
    if dups:
        raise SpecError(source, dups)
    return raw, lines


def _reference_problems(raw: dict, lines: dict[Loc, int]) -> list[Problem]:
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
            count = count if isinstance(count, int) and count > 0 else 1
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
            _dotted(loc),
            lines.get(loc, 0),
            f"node {name!r} is not defined in fleet.nodes (defined: {sorted(names)})",
        )
        for loc, name in refs
        if name not in names
    ]


def _validate(raw: dict, lines: dict[Loc, int], source: str) -> Experiment:
    try:
        return Experiment.model_validate(raw)
    except ValidationError as err:
        probs = _problems(err, lines)
        seen = {(p.path, p.line) for p in probs}
        probs += [p for p in _reference_problems(raw, lines) if (p.path, p.line) not in seen]
        probs = sorted(probs, key=lambda p: (p.line or 10**9, p.path))
        raise SpecError(source, probs) from None


def load_spec(path: str | Path, overrides: list[tuple[str, Any]] | None = None) -> Experiment:
    """Load and validate an experiment file."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(str(path), [Problem("", 0, "no such file")])
    return parse_spec(p.read_text(encoding="utf-8"), str(path), overrides)


def expand(
    path: str | Path, overrides: list[tuple[str, Any]] | None = None
) -> list[tuple[dict[str, Any], Experiment]]:
    """Expand a file's sweep grid into concrete experiments (one per combination).

    Returns ``(assignment, experiment)`` pairs; every combination is validated and all
    errors of all combinations are reported together.
    """
    p = Path(path)
    base = load_spec(p, overrides)
    if not base.sweep.grid:
        return [({}, base)]
    raw, lines = _read(p.read_text(encoding="utf-8"), str(path))
    for k, v in overrides or []:
        set_dotted(raw, k, v)
    raw.pop("sweep", None)
    keys = list(base.sweep.grid)
    out, problems = [], []
    for combo in itertools.product(*(base.sweep.grid[k] for k in keys)):
        assign = dict(zip(keys, combo, strict=True))
        r = copy.deepcopy(raw)
        for k, v in assign.items():
            set_dotted(r, k, v)
        try:
            out.append((assign, _validate(r, lines, f"{path} [{assign}]")))
        except SpecError as e:
            problems += e.problems
    if problems:
        raise SpecError(str(path), problems)
    return out
