"""Read an experiment's YAML safely: bytes to text, size and shape limits, line numbers.

A spec comes from a file, a ``--set`` option or an HTTP request. Whatever it holds,
reading it ends in a mapping or in a :class:`~testbed.spec.errors.SpecError` naming the
YAML path and line, never in another exception, a hang, or an expansion that exhausts
memory (YAML aliases nested into each other: the "billion laughs").

Limits (each a named constant):

- :data:`MAX_SPEC_BYTES`: size of the text, bytes;
- :data:`MAX_DEPTH`: nesting levels of mappings and lists;
- :data:`MAX_VALUES`: values in the document once its aliases are expanded.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import yaml

from testbed.spec.errors import Loc, Problem, SpecError, dotted

MAX_SPEC_BYTES = 1 << 20  # 1 MiB; experiments/reference.yaml, with every key, is ~10 KB
MAX_DEPTH = 64  # the deepest real spec nests 6 levels
MAX_VALUES = 100_000  # scalars, mappings and lists after alias expansion


def decode(data: bytes, source: str) -> str:
    """The UTF-8 text of a spec file's bytes.

    Raises
    ------
    SpecError
        The bytes are over :data:`MAX_SPEC_BYTES` or not UTF-8 (the line of the first
        bad byte is given).
    """
    _check_size(len(data), source)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        msg = f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        raise SpecError(source, [Problem("", line, msg)]) from None


def _check_size(n_bytes: int, source: str) -> None:
    if n_bytes > MAX_SPEC_BYTES:
        msg = f"{n_bytes} bytes; an experiment may have at most {MAX_SPEC_BYTES} bytes"
        raise SpecError(source, [Problem("", 0, msg)])


def read_yaml(text: str, source: str) -> tuple[dict[Any, Any], dict[Loc, int]]:
    """Parse YAML text into a mapping and the line (1-based) of every path in it.

    Returns
    -------
    raw : dict
        The document (plain Python values).
    lines : dict
        ``{path tuple: line}``; ``()`` is the line where the document starts.

    Raises
    ------
    SpecError
        Not YAML, not a mapping, a duplicate key, a value PyYAML cannot convert (a date
        such as 2020-13-45), nested deeper than :data:`MAX_DEPTH`, a recursive alias, or
        more than :data:`MAX_VALUES` values once aliases are expanded.
    """
    node, raw = _load(text, source)
    if node is None:
        raise SpecError(source, [Problem("", 1, "the file is empty: it must be a mapping")])
    if not isinstance(raw, dict):
        line = node.start_mark.line + 1
        raise SpecError(source, [Problem("", line, "the file must be a mapping of keys")])
    lines: dict[Loc, int] = {(): node.start_mark.line + 1}
    dups: list[Problem] = []
    _line_map(node, (), lines, dups)
    if dups:
        raise SpecError(source, dups)
    return raw, lines


def read_value(text: str, source: str) -> Any:
    """One YAML value (a ``--set`` value: scalar, list or mapping; empty text is None),
    with the same checks as :func:`read_yaml`."""
    return _load(text, source)[1]


def _load(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    _check_size(len(text.encode("utf-8", "surrogatepass")), source)
    loader = _guarded(lambda: yaml.SafeLoader(text), source)  # it reads the text at once
    try:
        node = _guarded(loader.get_single_node, source)
        if node is None:
            return None, None
        _check_shape(node, source)
        return node, _construct(loader, node, source)
    finally:
        loader.dispose()


def _guarded(fn: Any, source: str) -> Any:
    """Run a PyYAML step; its errors become a SpecError with the line PyYAML gives."""
    try:
        return fn()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        raise SpecError(source, [Problem("", line, f"invalid YAML: {exc}")]) from None
    except RecursionError:
        msg = f"nested too deeply (at most {MAX_DEPTH} levels)"
        raise SpecError(source, [Problem("", 0, msg)]) from None


def _construct(loader: yaml.SafeLoader, node: yaml.Node, source: str) -> Any:
    """Python values of a checked node; a scalar PyYAML cannot convert is reported with
    its own path and line."""
    try:
        return _guarded(lambda: loader.construct_document(node), source)
    except (ValueError, TypeError, OverflowError) as exc:
        if isinstance(exc, SpecError):
            raise
        loc, bad = _first_bad_scalar(node)
        line = bad.start_mark.line + 1 if bad is not None else 0
        msg = f"invalid value {getattr(bad, 'value', '')!r}: {exc}"
        raise SpecError(source, [Problem(dotted(loc), line, msg)]) from None


def _first_bad_scalar(node: yaml.Node) -> tuple[Loc, yaml.Node | None]:
    """The first scalar (depth first) that SafeLoader cannot construct on its own."""
    seen: set[int] = set()
    stack: list[tuple[Loc, yaml.Node]] = [((), node)]
    while stack:
        loc, n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.ScalarNode):
            try:
                yaml.SafeLoader("").construct_object(n, deep=True)
            except (ValueError, TypeError, OverflowError, yaml.YAMLError):
                return loc, n
        stack.extend(reversed([(loc + (k,), c) for k, c in _children(n)]))
    return (), None


def _children(node: yaml.Node) -> Iterator[tuple[str | int, yaml.Node]]:
    """(key, child) pairs: a mapping's keys and values, a list's items."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else "<key>"
            yield key, k
            yield key, v
    elif isinstance(node, yaml.SequenceNode):
        yield from enumerate(node.value)


def _check_shape(root: yaml.Node, source: str) -> None:
    """Refuse recursive aliases, deep nesting and documents that expand past the limit.

    Linear in the distinct nodes: the expanded size of a node shared through aliases is
    computed once.
    """
    size: dict[int, int] = {}
    active: set[int] = set()

    def walk(node: yaml.Node, loc: Loc, depth: int) -> int:
        key = id(node)
        if key in size:
            return size[key]

        def fail(msg: str) -> SpecError:
            return SpecError(source, [Problem(dotted(loc), node.start_mark.line + 1, msg)])

        if key in active:
            raise fail("a YAML alias refers to a value that contains it")
        if depth > MAX_DEPTH:
            raise fail(f"nested more than {MAX_DEPTH} levels deep")
        active.add(key)
        total = 1 + sum(walk(c, loc + (k,), depth + 1) for k, c in _children(node))
        active.discard(key)
        if total > MAX_VALUES:
            raise fail(f"holds more than {MAX_VALUES} values once YAML aliases are expanded")
        size[key] = total
        return total

    walk(root, (), 0)


def _line_map(node: yaml.Node, path: Loc, out: dict[Loc, int], dups: list[Problem]) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else "<key>"
            if key in seen:
                dups.append(Problem(dotted(path + (key,)), k.start_mark.line + 1, "duplicate key"))
            seen.add(key)
            out[path + (key,)] = k.start_mark.line + 1
            _line_map(v, path + (key,), out, dups)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out[path + (i,)] = v.start_mark.line + 1
            _line_map(v, path + (i,), out, dups)


def line_of(loc: Loc, lines: dict[Loc, int]) -> int:
    """Line of ``loc``, else of its nearest ancestor in the file (0 if none)."""
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return 0


def nonfinite(raw: Any, lines: dict[Loc, int]) -> list[Problem]:
    """Every float that is infinite or NaN (``1e309``, ``.inf``, ``.nan``), with its path.

    No setting of an experiment is infinite; such a value would only fail later, in the
    middle of a run.
    """
    out: list[Problem] = []
    stack: list[tuple[Loc, Any]] = [((), raw)]
    while stack:
        loc, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            out.append(Problem(dotted(loc), line_of(loc, lines), f"must be finite (got {v})"))
        elif isinstance(v, dict):
            stack.extend((loc + (k,), x) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((loc + (i,), x) for i, x in enumerate(v))
    return sorted(out, key=lambda p: (p.line, p.path))
