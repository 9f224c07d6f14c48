"""The host's files seen from the runner container of ``docker compose up testbed``.

The compose file mounts the host's root read-only at ``/host`` in the ``testbed`` (and
``controller``) services and sets ``TESTBED_HOST_ROOT=/host``, so ``EXPERIMENT`` may be a
spec anywhere on the host, not only under the project folder (``${PWD}``, mounted at its
own path). The runner reads such a spec, and every file it names, under ``/host``; the
node containers it creates get those folders bind-mounted from their host paths, at the
paths the runner uses, so the resolved spec's absolute paths are valid in every
container. Outside such a container (no ``TESTBED_HOST_ROOT``) paths are unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "TESTBED_HOST_ROOT"


def root() -> Path | None:
    """The mount of the host's root in this container (None: not in one)."""
    value = os.environ.get(ENV)
    return Path(value) if value else None


def runner_path(path: Path) -> Path:
    """``path`` (as the user on the host wrote it) as this process can read it: itself
    when it exists here, else the same absolute path under the host's root mount when
    that exists."""
    base = root()
    if base is None or path.exists():
        return path
    seen = base / path.absolute().relative_to("/")
    return seen if seen.exists() else path


def host_path(path: str) -> str:
    """A path of this process as the engine's host knows it (a bind mount's source):
    a path under the host's root mount becomes the host's own; others are the same on
    both (the project folder is mounted at its own path)."""
    base = root()
    if base is None or not Path(path).is_relative_to(base):
        return path
    return "/" + str(Path(path).relative_to(base))
