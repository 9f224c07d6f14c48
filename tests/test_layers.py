"""The packages' import arrows: ui -> testbed (HTTP) -> nodes -> radio -> kernel, no circles.

Every import anywhere in a module counts (a deferred import in a function body is still
a dependency), except under ``if TYPE_CHECKING:``. A new arrow the wrong way or a circle
fails here with the modules named (CONTRIBUTING.md: imports).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kernel", "testbed", "nodes", "radio", "ui")
#: what each package may import of the others (the one-way arrows)
MAY_IMPORT = {
    "ui": {"ui", "kernel"},  # (the controller over HTTP only)
    "testbed": {"testbed", "nodes", "radio", "kernel"},
    "nodes": {"nodes", "radio", "kernel"},
    "radio": {"radio", "kernel"},
    "kernel": {"kernel"},
}


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return mods


def _imports(name: str, f: Path) -> set[str]:
    tree = ast.parse(f.read_text())
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for b in node.body
        for n in ast.walk(b)
    }
    out: set[str] = set()
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = name.split(".")
                base = base[: len(base) - n.level + (1 if f.name == "__init__.py" else 0)]
                mod = ".".join(base + ([n.module] if n.module else []))
            else:
                mod = n.module or ""
            out |= {mod} | {f"{mod}.{a.name}" for a in n.names}
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, f in mods.items():
        deps = set()
        for imp in _imports(name, f):
            while imp and imp not in mods:
                imp = imp.rpartition(".")[0]
            if imp and imp != name:
                deps.add(imp)
        graph[name] = deps
    return graph


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or not."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo += graph.get(v, ())
    return seen


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles: groups of more than one module that all reach each other."""
    reach = {v: _reach(graph, v) for v in graph}
    groups = {frozenset({v} | {w for w in reach[v] if v in reach[w]}) for v in graph}
    return sorted(sorted(g) for g in groups if len(g) > 1)


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert cycles == [], "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: a two-module circle and a three-module one are found."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e"]]


def test_arrows_point_one_way() -> None:
    wrong = sorted(
        f"{mod} -> {dep}"
        for mod, deps in _graph().items()
        for dep in deps
        if dep.split(".")[0] not in MAY_IMPORT[mod.split(".")[0]]
    )
    assert wrong == [], "imports against the arrows: " + ", ".join(wrong)


def test_node_entry_point_imports_no_control_plane() -> None:
    """A node process (``python -m nodes``) loads nothing of :mod:`testbed`, and a bad
    option exits 2 with one message, no traceback."""
    code = (
        "import sys, nodes.cli, nodes.agent; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'testbed'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    bad = [sys.executable, "-m", "nodes", "supernode", "--superlink", "127.0.0.1:1", "--port",
           "2", "--node-config", "{not json"]
    res = subprocess.run(bad, capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and "--node-config" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
