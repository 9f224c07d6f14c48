"""The Docker engine for the tests in this folder.

They need a Docker engine with the project's image, which `make test-docker` provides
(root: a private dockerd, the image built offline) and announces with
``TESTBED_DOCKER_TESTS=1``. Anywhere else they skip, saying why; under
``TESTBED_DOCKER_TESTS=1`` a missing engine or image is a failure, not a skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from testbed.backends.docker import (
    RUN_LABEL,
    EngineUnavailable,
    check_image,
    connect,
    image_name,
)

ENABLE = "TESTBED_DOCKER_TESTS"


@pytest.fixture(scope="session")
def engine() -> Iterator[docker.DockerClient]:
    """A client of the engine at DOCKER_HOST that holds the image."""
    if os.environ.get(ENABLE) != "1":
        pytest.skip(
            f"needs a Docker engine with the image: run `make test-docker` (root), or set "
            f"{ENABLE}=1 and DOCKER_HOST"
        )
    try:
        client = connect()
        check_image(client, image_name())
    except (EngineUnavailable, ValueError) as e:
        pytest.fail(str(e))
    yield client
    client.close()


def labelled_containers(client: docker.DockerClient) -> list[str]:
    """Names of every container (running or not) that carries the testbed's run label."""
    return [c.name or "?" for c in client.containers.list(all=True, filters={"label": RUN_LABEL})]


def docker_run(spec: Path, out: Path, backend: str = "docker") -> subprocess.Popen[str]:
    """``testbed run SPEC --backend docker --out OUT`` as a user starts it (stderr piped)."""
    cmd = [sys.executable, "-m", "testbed", "run", str(spec), "--backend", backend]
    return subprocess.Popen(
        [*cmd, "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
