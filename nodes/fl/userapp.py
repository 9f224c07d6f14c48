"""A user's own Flower App (``workload.fl.app``): read, checked, and made observable.

A Flower App is a folder with a ``pyproject.toml`` whose ``[tool.flwr.app.components]``
names a ``serverapp`` and a ``clientapp`` (``module:attribute``) and whose
``[tool.flwr.app.config]`` declares the run config keys (nested tables flattened with
dots, as Flower does). :func:`check_app` refuses anything else when the spec is loaded,
naming what is missing; :func:`check_app_config` refuses an ``app_config`` key the app
does not declare.

To run it, :func:`observed_fab` copies the folder into the run's artifact folder and
changes one thing: the components point at two small entry modules that load the
user's ServerApp and ClientApp unchanged and observe them (:mod:`nodes.fl.observe`: the
Grid handed to the ServerApp and the ClientApp's message handling); the testbed's own
run config keys (``testbed-*``) are declared beside the app's and removed again from
the context the user's code sees. The user's folder is never written.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

#: Run config keys of the testbed in an observed app (never shown to the user's code).
TESTBED_PREFIX = "testbed-"
#: Entry modules written into the observed copy (component -> module name).
ENTRY_MODULES = {"serverapp": "_testbed_serverapp", "clientapp": "_testbed_clientapp"}
#: Where the observed copy goes, under the run's artifact folder.
FAB_DIRNAME = "app"
#: What is not copied into the observed copy.
IGNORED = (".git", "__pycache__", ".venv", "*.pyc", "final_model*", ".ipynb_checkpoints")
#: Seconds the import check of the components may take (an app importing torch: ~3 s).
IMPORT_CHECK_TIMEOUT_S = 120.0
#: Node config keys the testbed gives every client node (``testbed/planner.py``'s
#: ``PlannedNode.node_config`` and the control file): ``node_config`` may not set them.
TESTBED_NODE_KEYS = (
    "partition-id", "num-partitions", "node-name", "tier", "profile", "speed-factor",
    "protocol-timing", "control-path",
)  # fmt: skip
#: What ``{node}`` in a ``node_config`` string value becomes: the node's name.
NODE_PLACEHOLDER = "{node}"

ConfigValue = bool | int | float | str


@dataclass(frozen=True)
class AppInfo:
    """What a Flower App's ``pyproject.toml`` declares.

    Attributes
    ----------
    path : pathlib.Path
        The app's folder.
    name : str
        ``[project].name`` (the folder's name when absent).
    components : dict
        ``serverapp`` / ``clientapp`` -> ``module:attribute``.
    config : dict
        The declared run config, flattened (``a.b`` for nested tables), with defaults.
    dependencies : tuple of str
        ``[project].dependencies`` (requirement strings; empty when none).
    """

    path: Path
    name: str
    components: dict[str, str]
    config: dict[str, ConfigValue]
    dependencies: tuple[str, ...] = ()


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested TOML table as Flower's flat run config (``a.b`` keys)."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def read_app(path: str | Path) -> AppInfo:
    """The declarations of the Flower App at ``path``.

    Raises
    ------
    ValueError
        Naming what is missing: the folder, its ``pyproject.toml``, the
        ``[tool.flwr.app.components]`` table or one of its two entries.
    """
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"app {path}: not a folder")
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        raise ValueError(f"app {path} is not a Flower App: it has no pyproject.toml")
    try:
        doc = tomllib.loads(pyproject.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"app {path}: pyproject.toml is not valid TOML ({e})") from None
    app = doc.get("tool", {}).get("flwr", {}).get("app", {})
    components = app.get("components")
    if not isinstance(components, dict):
        raise ValueError(
            f"app {path} is not a Flower App: its pyproject.toml has no "
            "[tool.flwr.app.components] (serverapp and clientapp)"
        )
    missing = [c for c in ("serverapp", "clientapp") if not isinstance(components.get(c), str)]
    if missing:
        raise ValueError(
            f"app {path}: [tool.flwr.app.components] names no {' and no '.join(missing)} "
            "(\"module:attribute\")"
        )
    for c in ("serverapp", "clientapp"):
        if ":" not in components[c]:
            raise ValueError(
                f"app {path}: [tool.flwr.app.components] {c} = {components[c]!r} is not "
                "\"module:attribute\""
            )
    name = str(doc.get("project", {}).get("name") or root.name)
    config = flatten(app.get("config", {}) or {})
    deps = tuple(str(d) for d in doc.get("project", {}).get("dependencies", []) or [])
    comps = {c: components[c] for c in ENTRY_MODULES}
    return AppInfo(root.resolve(), name, comps, config, deps)


def check_app_config(info: AppInfo, app_config: dict[str, ConfigValue]) -> None:
    """ValueError naming every ``app_config`` key the app does not declare, and its keys."""
    unknown = sorted(k for k in app_config if k not in info.config)
    if unknown:
        keys = ", ".join(sorted(info.config)) or "none"
        raise ValueError(
            f"app_config: {', '.join(repr(k) for k in unknown)} not declared by app "
            f"{info.name!r} ([tool.flwr.app.config] keys: {keys})"
        )
    reserved = sorted(k for k in info.config if k.startswith(TESTBED_PREFIX))
    if reserved:
        raise ValueError(f"app {info.name!r}: config keys {reserved} use the testbed's prefix")


_IMPORT_CHECK = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp
want = {"serverapp": ServerApp, "clientapp": ClientApp}
declared = set(json.loads(sys.argv[3]))
errors, absent = [], []
for comp, ref in json.loads(sys.argv[2]).items():
    module, _, attr = ref.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top.lower().replace("-", "_") in declared:
            absent.append(top)  # a dependency the app declares, not installed here
        else:
            errors.append(f"{comp} {ref!r} does not import: {type(e).__name__}: {e}")
        continue
    except Exception as e:
        errors.append(f"{comp} {ref!r} does not import: {type(e).__name__}: {e}")
        continue
    if not isinstance(obj, want[comp]):
        errors.append(f"{comp} {ref!r} is a {type(obj).__name__}, not a {want[comp].__name__}")
print(json.dumps({"errors": errors, "absent": sorted(set(absent))}))
"""


def declared_modules(info: AppInfo) -> list[str]:
    """The app's ``[project].dependencies`` as importable top-level names (the
    distribution name, lower case, ``-`` and ``.`` as ``_``: the usual convention)."""
    out = []
    for dep in info.dependencies:
        name = re.split(r"[\s\[<>=!~;(@]", str(dep).strip(), maxsplit=1)[0]
        out.append(re.sub(r"[-.]", "_", name).lower())
    return out


def check_node_config(node_config: dict[str, ConfigValue]) -> None:
    """ValueError naming the ``node_config`` keys that are the testbed's own."""
    reserved = sorted(k for k in node_config if k in TESTBED_NODE_KEYS)
    if reserved:
        raise ValueError(
            f"node_config: {', '.join(repr(k) for k in reserved)} set by the testbed on "
            f"every node ({', '.join(TESTBED_NODE_KEYS)})"
        )


def node_config_of(node_config: dict[str, ConfigValue], node: str) -> dict[str, ConfigValue]:
    """``node_config`` as node ``node`` sees it: ``{node}`` in a string value is its name."""
    return {
        k: v.replace(NODE_PLACEHOLDER, node) if isinstance(v, str) else v
        for k, v in node_config.items()
    }


def check_components(info: AppInfo) -> list[str]:
    """Import the app's two components in a fresh interpreter (the app's modules stay out
    of this process); ValueError naming each one that does not import or is not a
    ServerApp / ClientApp. A component that does not import only because a dependency
    the app declares is not installed here is not an error: those modules are returned
    (the backend decides: docker installs them in its image, local and simulation need
    them on this host, :func:`require_on_host`)."""
    key = (str(info.path), (info.path / "pyproject.toml").stat().st_mtime_ns)
    if key in _CHECKED:
        return _CHECKED[key]
    try:
        res = subprocess.run(
            [sys.executable, "-c", _IMPORT_CHECK, str(info.path), json.dumps(info.components),
             json.dumps(declared_modules(info))],
            capture_output=True,
            text=True,
            timeout=IMPORT_CHECK_TIMEOUT_S,
            cwd=info.path,
        )
    except subprocess.TimeoutExpired:
        raise ValueError(
            f"app {info.name!r}: importing its components took over "
            f"{IMPORT_CHECK_TIMEOUT_S:g} s"
        ) from None
    lines = res.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        found = None
    if not isinstance(found, dict):
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(f"app {info.name!r}: its components could not be checked ({tail})")
    if found["errors"]:
        raise ValueError(f"app {info.name!r} ({info.path}): " + "; ".join(found["errors"]))
    _CHECKED[key] = list(found["absent"])
    return _CHECKED[key]


#: Import checks already made in this process: (app folder, pyproject mtime) -> modules
#: of declared dependencies that were not installed.
_CHECKED: dict[tuple[str, int], list[str]] = {}


def require_on_host(path: str | Path, backend: str) -> None:
    """ValueError when the app needs a declared dependency this host's Python lacks, on
    a backend whose apps run here (local, simulation)."""
    info = read_app(path)
    absent = check_components(info)
    if absent:
        raise ValueError(
            f"workload.fl.app: app {info.name!r} imports {', '.join(absent)}, a dependency "
            f"it declares that this host's Python lacks; --backend {backend} runs the app "
            "here: pip install it, or use --backend docker (it installs the app's "
            "dependencies in a derived image)"
        )


def check_app(path: str | Path, app_config: dict[str, ConfigValue]) -> AppInfo:
    """Everything :func:`read_app`, :func:`check_app_config` and
    :func:`check_components` check, in that order (a declared dependency missing here
    is left to the backend's preflight)."""
    info = read_app(path)
    check_app_config(info, app_config)
    check_components(info)
    return info


_ENTRY = '''"""Written by the testbed: the app's {component} ({ref}), unchanged, observed."""

from nodes.fl.observe import {factory}

app = {factory}({ref!r}, {name!r})
'''


def observed_fab(app_dir: str | Path, out_dir: Path, testbed_keys: dict[str, ConfigValue]) -> Path:
    """Copy the app at ``app_dir`` to ``out_dir/app`` with its components observed.

    Parameters
    ----------
    app_dir : str or pathlib.Path
        The user's Flower App (not written).
    out_dir : pathlib.Path
        The run's artifact folder.
    testbed_keys : dict
        The testbed's run config keys (each starting with :data:`TESTBED_PREFIX`),
        declared in the copy with these values as defaults.

    Returns
    -------
    pathlib.Path
        The folder to submit with ``flwr run``.
    """
    info = read_app(app_dir)
    dst = out_dir / FAB_DIRNAME
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(info.path, dst, ignore=shutil.ignore_patterns(*IGNORED), symlinks=False)
    doc = tomllib.loads((dst / "pyproject.toml").read_text())
    app = doc["tool"]["flwr"]["app"]
    factories = {"serverapp": "observed_server_app", "clientapp": "observed_client_app"}
    for component, module in ENTRY_MODULES.items():
        ref = info.components[component]
        (dst / f"{module}.py").write_text(
            _ENTRY.format(component=component, ref=ref, factory=factories[component],
                          name=info.name)  # fmt: skip
        )
        app["components"][component] = f"{module}:app"
    config = app.setdefault("config", {})
    for k, v in testbed_keys.items():
        assert k.startswith(TESTBED_PREFIX), k
        config[k] = v
    (dst / "pyproject.toml").write_text(tomli_w.dumps(doc))
    return dst
