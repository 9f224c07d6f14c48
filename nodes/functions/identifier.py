"""Gaia's Execution Mode Identifier: choose a serverless function's execution mode statically.

This is the baseline identifier of Gaia (arXiv 2511.13728; public code at
``polaris-slo-cloud/gaia``). When a function is deployed, its Python source is parsed with
:mod:`ast` (it is never imported or run) and given one of four execution modes, from
:data:`MODES`:

``cpu``
    No tensor framework and no explicit GPU use: run on CPU only.
``cpu_preferred``
    A tensor framework is imported but nothing marks the work as GPU-sized: start on CPU,
    a GPU may be used later.
``gpu_preferred``
    A tensor framework is imported and the code builds a large literal tensor: start on GPU
    when one is free, CPU otherwise.
``gpu``
    The code places work on a CUDA device explicitly: it needs a GPU.

Rules
-----
Framework imports
    ``import X``, ``import X.sub``, ``import X as Y`` and ``from X[.sub] import ...`` where
    ``X`` is one of :data:`FRAMEWORKS` (``torch``, ``tensorflow``, ``cupy``, ``jax``).
    Absolute imports only; ``from . import torch`` is a local module. Import aliases are
    recorded so that calls resolve to their canonical names (``import torch as T`` makes
    ``T.randn`` mean ``torch.randn``; ``from torch import randn`` makes ``randn`` mean
    ``torch.randn``). Result: ``cpu_preferred``.
Explicit GPU use (result: ``gpu``)
    * any ``.cuda(...)`` method call;
    * ``.to("cuda")``: a ``.to(...)`` call whose first positional argument is a string
      starting with ``"cuda"`` (``"cuda"``, ``"cuda:0"``);
    * ``device("cuda")``: any call of a function or method named ``device`` whose first
      argument, or ``type=`` keyword, is such a string (``torch.device("cuda")``);
    * a ``device="cuda..."`` keyword in any call (``.to(device="cuda")``,
      ``torch.ones(8, device="cuda:1")``).
    Only string literals count: ``torch.device("cuda" if ok else "cpu")`` is a run-time
    choice, not a requirement, and is not ``gpu``. These rules need no framework import.
Large literal tensor (result: ``gpu_preferred``)
    A call that resolves, through the framework imports, to a framework function named
    ``tensor``, ``array``, ``randn``, ``rand``, ``zeros``, ``ones``, ``empty`` or ``full`` and
    creates more than :data:`LARGE_TENSOR_ELEMENTS` (1000) elements; exactly 1000 is not
    large (a *small tensor*, ``cpu_preferred``; Gaia's own code counts 1000 as large). The
    element count is read from literals:

    * ``tensor(...)`` / ``array(...)``: the leaves of a nested list or tuple literal (first
      argument or ``data=``);
    * ``full(shape, value)``: the first argument or ``size=`` / ``shape=`` only;
    * ``zeros`` / ``ones`` / ``empty``: a tuple or list shape, ``size=`` / ``shape=``, or
      integer arguments (``torch.zeros(64, 64)``); outside ``torch`` the second positional
      argument is a dtype (``jax.numpy.zeros(5000, jnp.float32)``) and is not a dimension;
    * ``rand`` / ``randn``: integer arguments or a tuple or list shape.

    The product of the dimensions is the count. A dimension or element given by a name or
    any expression other than a literal (``torch.randn(n, n)``) is not counted; the reasons
    say so.
No rule matched
    ``cpu``.

Precedence is ``gpu`` > ``gpu_preferred`` > ``cpu_preferred`` > ``cpu``: the strongest
finding decides. Every finding becomes a reason naming its line and rule, deciding ones
first, e.g. ``"line 3: imports torch (framework) -> cpu_preferred"``.

Limitations
-----------
The analysis is flow- and scope-insensitive, as in Gaia: an import anywhere in the module
counts and its alias is valid everywhere; re-bound names are not tracked; dynamic imports
(``importlib.import_module("torch")``), ``tf.device("/GPU:0")`` and GPU selection through
variables are not seen. Source that does not parse raises :class:`IdentifierError`.
"""

from __future__ import annotations

import ast
import io
import os
import tokenize
from dataclasses import dataclass
from typing import Any

MODES: tuple[str, ...] = ("cpu", "cpu_preferred", "gpu_preferred", "gpu")
LARGE_TENSOR_ELEMENTS = 1000

FRAMEWORKS: frozenset[str] = frozenset({"torch", "tensorflow", "cupy", "jax"})

_CREATORS = frozenset({"tensor", "array", "randn", "rand", "zeros", "ones", "empty", "full"})
_DATA_CREATORS = frozenset({"tensor", "array"})  # element count from a nested literal
_VARARG_CREATORS = frozenset({"randn", "rand"})  # dimensions as separate arguments everywhere
_SHAPE_KEYWORDS = ("size", "shape")
_DATA_KEYWORDS = ("data", "object")
_MAX_SHOWN = 48  # longest source excerpt quoted in a reason


class IdentifierError(ValueError):
    """The function source cannot be analysed: it does not decode or does not parse.

    Parameters
    ----------
    message : str
        What went wrong; starts with the file name and line.
    filename : str, optional
        The file (or pseudo file name) that was analysed.
    lineno : int, optional
        The offending line, where known.
    """

    def __init__(
        self, message: str, *, filename: str | None = None, lineno: int | None = None
    ) -> None:
        super().__init__(message)
        self.filename = filename
        self.lineno = lineno


@dataclass(frozen=True)
class ModeDecision:
    """The identifier's verdict for one function.

    Parameters
    ----------
    mode : str
        One of :data:`MODES`.
    reasons : tuple of str
        Human-readable findings, each naming its line and rule; the deciding ones first.
    """

    mode: str
    reasons: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown execution mode {self.mode!r}; expected one of {MODES}")
        object.__setattr__(self, "reasons", tuple(self.reasons))

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready form.

        Returns
        -------
        dict
            ``{"mode": str, "reasons": list of str}``.
        """
        return {"mode": self.mode, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class _Finding:
    line: int
    mode: str | None  # None: an informational note that decides nothing
    text: str

    def render(self) -> str:
        suffix = f" -> {self.mode}" if self.mode else ""
        return f"line {self.line}: {self.text}{suffix}"


def identify_source(source: str, filename: str = "<function>") -> ModeDecision:
    """Identify the execution mode of a function from its source text.

    Parameters
    ----------
    source : str
        The function module's Python source.
    filename : str, optional
        Name used in error messages, by default ``"<function>"``.

    Returns
    -------
    ModeDecision
        The mode and the reasons for it.

    Raises
    ------
    IdentifierError
        If ``source`` is not valid Python; the message names ``filename`` and the line.
    """
    tree = _parse(source, filename)
    bindings, findings = _framework_imports(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            findings.extend(_call_findings(node, bindings))
    return _decide(findings)


def identify_file(path: str | os.PathLike[str]) -> ModeDecision:
    """Identify the execution mode of a function module on disk.

    The file is decoded as Python source (PEP 263 encoding declaration, UTF-8 otherwise).

    Parameters
    ----------
    path : str or os.PathLike
        The function's ``.py`` file.

    Returns
    -------
    ModeDecision
        The mode and the reasons for it.

    Raises
    ------
    IdentifierError
        If the file does not decode or does not parse; the message names the file and line.
    OSError
        If the file cannot be read.
    """
    filename = os.fspath(path)
    with open(filename, "rb") as fh:
        data = fh.read()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        source = data.decode(encoding)
    except SyntaxError as exc:  # a bad encoding declaration
        lineno = exc.lineno or 1
        raise IdentifierError(
            f"{filename}, line {lineno}: cannot decode function source: {exc.msg}",
            filename=filename,
            lineno=lineno,
        ) from exc
    except UnicodeDecodeError as exc:
        lineno = data.count(b"\n", 0, exc.start) + 1
        raise IdentifierError(
            f"{filename}, line {lineno}: cannot decode function source: {exc.reason}",
            filename=filename,
            lineno=lineno,
        ) from exc
    return identify_source(source, filename=filename)


def _parse(source: str, filename: str) -> ast.Module:
    try:
        return ast.parse(source, filename=filename)
    except SyntaxError as exc:
        lineno = exc.lineno
        where = f"line {lineno}" if lineno else "unknown line"
        raise IdentifierError(
            f"{filename}, {where}: invalid Python in function source: {exc.msg}",
            filename=filename,
            lineno=lineno,
        ) from exc
    except ValueError as exc:  # NUL bytes (Python 3.11 raises ValueError, not SyntaxError)
        nul = source.find("\0")
        lineno = source.count("\n", 0, nul) + 1 if nul >= 0 else None
        where = f"line {lineno}" if lineno else "unknown line"
        raise IdentifierError(
            f"{filename}, {where}: invalid Python in function source: {exc}",
            filename=filename,
            lineno=lineno,
        ) from exc


def _framework_imports(tree: ast.Module) -> tuple[dict[str, str], list[_Finding]]:
    """Local names bound to framework modules or objects, and one finding per import."""
    bindings: dict[str, str] = {}
    findings: list[_Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            findings += _import_findings(node, bindings)
        elif isinstance(node, ast.ImportFrom):
            findings += _import_from_findings(node, bindings)
    return bindings, findings


def _import_findings(node: ast.Import, bindings: dict[str, str]) -> list[_Finding]:
    """``import fw[.sub] [as x]``: bind the local name; one finding per framework."""
    found = []
    for alias in node.names:
        top = alias.name.partition(".")[0]
        if top not in FRAMEWORKS:
            continue
        if alias.asname:
            bindings[alias.asname] = alias.name
            shown = f"{alias.name} as {alias.asname}"
        else:  # `import torch.nn` binds `torch`
            bindings[top] = top
            shown = alias.name
        found.append(_Finding(node.lineno, "cpu_preferred", f"imports {shown} (framework)"))
    return found


def _import_from_findings(node: ast.ImportFrom, bindings: dict[str, str]) -> list[_Finding]:
    """``from fw[.sub] import a [as b], ...``: bind the names; one finding for the line."""
    if node.level or not node.module or node.module.partition(".")[0] not in FRAMEWORKS:
        return []
    names = []
    for alias in node.names:
        if alias.name != "*":
            bindings[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        names.append(f"{alias.name} as {alias.asname}" if alias.asname else alias.name)
    text = f"imports {', '.join(names)} from {node.module} (framework)"
    return [_Finding(node.lineno, "cpu_preferred", text)]


def _call_findings(node: ast.Call, bindings: dict[str, str]) -> list[_Finding]:
    found = []
    gpu = _gpu_use(node)
    if gpu is not None:
        found.append(_Finding(node.lineno, "gpu", gpu))
    canonical = _resolve(node.func, bindings)
    if canonical is not None:
        tensor = _tensor_creation(node, canonical)
        if tensor is not None:
            found.append(tensor)
    return found


def _gpu_use(node: ast.Call) -> str | None:
    """Describe the explicit CUDA placement in ``node``, or return None."""
    func = node.func
    attr = func.attr if isinstance(func, ast.Attribute) else None
    name = func.id if isinstance(func, ast.Name) else attr
    first = node.args[0] if node.args else None
    shown = _show(func)
    if attr == "cuda":
        return f"{shown}() (.cuda() call)"
    if name == "device":
        for arg, fmt in ((first, "{!r}"), (_keyword(node, "type"), "type={!r}")):
            value = _cuda_string(arg)
            if value is not None:
                return f"{shown}({fmt.format(value)}) (cuda device)"
    if attr == "to":
        for arg, fmt in ((first, "{!r}"), (_keyword(node, "device"), "device={!r}")):
            value = _cuda_string(arg)
            if value is not None:
                return f"{shown}({fmt.format(value)}) (.to(cuda))"
    value = _cuda_string(_keyword(node, "device"))
    if value is not None:
        return f"{shown}(..., device={value!r}) (device=cuda keyword)"
    return None


def _tensor_creation(node: ast.Call, canonical: str) -> _Finding | None:
    """Size a framework tensor-creation call; None when ``canonical`` creates no tensor."""
    op = canonical.rpartition(".")[2]
    if op not in _CREATORS:
        return None
    shown = _show(node.func)
    label = shown if shown == canonical else f"{shown} ({canonical})"
    if op in _DATA_CREATORS:
        data = node.args[0] if node.args else _keyword(node, *_DATA_KEYWORDS)
        if data is None:
            return None
        count, problem = _count_elements(data)
        problem = problem and f"data is not a nested literal ({problem})"
    else:
        dims = _shape_dims(node, canonical.partition(".")[0], op)
        if not dims:
            return None
        count, problem = _product(dims)
        problem = problem and f"shape is not given by integer literals ({problem})"
    if count is None:
        return _Finding(node.lineno, None, f"{label} {problem}, size not counted")
    if count > LARGE_TENSOR_ELEMENTS:
        rule = f"large tensor, > {LARGE_TENSOR_ELEMENTS} elements"
        return _Finding(node.lineno, "gpu_preferred", f"{label} creates {count} elements ({rule})")
    rule = f"small tensor, <= {LARGE_TENSOR_ELEMENTS} elements"
    return _Finding(node.lineno, "cpu_preferred", f"{label} creates {count} elements ({rule})")


def _shape_dims(node: ast.Call, framework: str, op: str) -> list[ast.expr]:
    """The expressions that give the dimensions of the tensor ``node`` creates."""
    shape = _keyword(node, *_SHAPE_KEYWORDS)
    if shape is None:
        if not node.args:
            return []
        shape = node.args[0]
        varargs = op in _VARARG_CREATORS or (framework == "torch" and op != "full")
        if varargs and not isinstance(shape, (ast.Tuple, ast.List)):
            return list(node.args)  # torch.zeros(64, 64), cupy.random.rand(40, 40)
        # otherwise a shape then other arguments: zeros(shape, dtype), full(shape, value)
    if isinstance(shape, (ast.Tuple, ast.List)):
        return list(shape.elts)
    return [shape]


def _product(dims: list[ast.expr]) -> tuple[int | None, str | None]:
    """Product of integer-literal dimensions; else None and the dimensions that are not."""
    values = [_int_literal(dim) for dim in dims]
    unknown = [_show(dim) for dim, value in zip(dims, values, strict=True) if value is None]
    if unknown:
        return None, ", ".join(unknown)
    count = 1
    for value in values:
        count *= value or 0
    return count, None


def _count_elements(expr: ast.expr) -> tuple[int | None, str | None]:
    """Leaves of a nested list/tuple literal of scalars; else None and the offending part."""
    if isinstance(expr, (ast.List, ast.Tuple)):
        total = 0
        for elt in expr.elts:
            count, problem = _count_elements(elt)
            if count is None:
                return None, problem
            total += count
        return total, None
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        expr = expr.operand
    if isinstance(expr, ast.Constant):
        return 1, None
    return None, _show(expr)


def _resolve(expr: ast.expr, bindings: dict[str, str]) -> str | None:
    """Canonical dotted name of ``a.b.c`` when ``a`` is bound by a framework import."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name) or expr.id not in bindings:
        return None
    return ".".join([bindings[expr.id], *reversed(parts)])


def _keyword(node: ast.Call, *names: str) -> ast.expr | None:
    for kw in node.keywords:
        if kw.arg in names:
            return kw.value
    return None


def _cuda_string(expr: ast.expr | None) -> str | None:
    """The string literal ``expr`` when it names a CUDA device (``"cuda"``, ``"cuda:0"``)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        if expr.value.startswith("cuda"):
            return expr.value
    return None


def _int_literal(expr: ast.expr) -> int | None:
    if isinstance(expr, ast.Constant) and type(expr.value) is int:  # bool is not a dimension
        return expr.value
    return None


def _show(expr: ast.expr) -> str:
    text = ast.unparse(expr)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _decide(findings: list[_Finding]) -> ModeDecision:
    rank = {mode: i for i, mode in enumerate(MODES)}
    ranked = sorted(
        (f for f in findings if f.mode is not None), key=lambda f: (-rank[f.mode or ""], f.line)
    )
    notes = [f.render() for f in sorted(findings, key=lambda f: f.line) if f.mode is None]
    if not ranked:
        reason = "no framework import (torch, tensorflow, cupy, jax) and no GPU use -> cpu"
        return ModeDecision("cpu", (reason, *notes))
    return ModeDecision(ranked[0].mode or "cpu", (*(f.render() for f in ranked), *notes))
