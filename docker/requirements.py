"""Print the project's requirements (one per line) from pyproject.toml, torch first.

Used by the Dockerfile (inside the build, stdlib only) and by ``docker/e2e.sh`` (to
prepare the wheelhouse on the host), so both install the same set::

    python3 docker/requirements.py [PYPROJECT] [EXTRA ...]

Extras that name the project itself (``continuum-testbed[radio,tt]``) are expanded.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """Dependencies plus the given extras, self-references expanded, torch first."""
    project = tomllib.loads(pyproject.read_text())["project"]
    name = project["name"]
    optional = project.get("optional-dependencies", {})
    out: list[str] = []
    todo, seen = [None, *extras], set()
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        for req in project["dependencies"] if extra is None else optional[extra]:
            m = re.fullmatch(rf"{re.escape(name)}\[([^\]]*)\]", req.strip())
            if m:
                todo += [e.strip() for e in m.group(1).split(",")]
            elif req not in out:
                out.append(req)
    return sorted(out, key=lambda r: not r.startswith("torch"))


if __name__ == "__main__":
    args = sys.argv[1:]
    path = Path(args.pop(0)) if args and args[0].endswith(".toml") else Path("pyproject.toml")
    print("\n".join(requirements(path, args)))
