"""Which sources an image was built from, so a stale image is refused, not run.

The node containers run the image's code (``/app``), the runner runs this checkout's:
an image built from other sources would run a fleet whose nodes disagree with the
runner. The Dockerfile writes :func:`source_hash` of ``/app`` into ``/app/.source-hash``
(``python -m testbed.backends.image_source /app``); :func:`image_hash` reads it back
from an image (a container created, not started: its file copied out) and
:func:`testbed.backends.docker.check_image` compares it with this checkout's.
"""

from __future__ import annotations

import hashlib
import io
import sys
import tarfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker

#: The folders whose code runs in node containers (what the Dockerfile copies).
PACKAGES = ("kernel", "nodes", "radio", "testbed")
SUFFIXES = {".py", ".toml"}
FILE = "/app/.source-hash"


def source_hash(root: Path) -> str:
    """SHA-256 over the path and contents of every ``.py``/``.toml`` file of
    :data:`PACKAGES` under ``root`` (caches excluded), in path order."""
    h = hashlib.sha256()
    files = sorted(
        p
        for pkg in PACKAGES
        for p in (root / pkg).rglob("*")
        if p.suffix in SUFFIXES and p.is_file() and "__pycache__" not in p.parts
    )
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


@cache
def checkout_hash() -> str:
    """:func:`source_hash` of the sources this process runs."""
    return source_hash(Path(__file__).resolve().parents[2])


_BY_IMAGE: dict[str, str | None] = {}


def image_hash(client: docker.DockerClient, image: str) -> str | None:
    """The source hash recorded in ``image`` (None: an image built before it was
    recorded); cached per image id."""
    from docker.errors import NotFound

    image_id = client.images.get(image).id or image
    if image_id not in _BY_IMAGE:
        c = client.containers.create(image, ["true"])
        try:
            stream, _stat = c.get_archive(FILE)
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.extractfile(tar.getmembers()[0])
                _BY_IMAGE[image_id] = member.read().decode().strip() if member else None
        except NotFound:
            _BY_IMAGE[image_id] = None
        finally:
            c.remove(force=True)
    return _BY_IMAGE[image_id]


if __name__ == "__main__":
    print(source_hash(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
