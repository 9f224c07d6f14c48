"""A user's Flower App on the docker backend: its Python dependencies in a derived image.

The node containers run the project's image (``continuum-testbed:latest``), which holds
the testbed's dependencies (Flower, numpy, torch CPU, pandas, scikit-learn ...). A
Flower App declares its own in ``[project].dependencies``. :func:`app_image` asks the
image which of them it does not satisfy (``pip install --dry-run --no-index REQ`` in a
throw-away container, one requirement at a time: pip decides, extras and markers
included) and, when some are missing, builds a derived image once::

    FROM <base image>
    COPY wheels/ /tmp/app-wheels/
    RUN pip install --no-index --find-links /tmp/app-wheels <missing requirements>

tagged ``continuum-testbed-app:<hash of the base image id and the requirements>`` and
reused by every later run of an app with the same missing requirements. The wheels come
from the host's pip (``pip wheel``: PyPI, or whatever ``PIP_INDEX_URL`` /
``PIP_FIND_LINKS`` / ``PIP_NO_INDEX`` name), because pip inside a build cannot reach an
index here (docs/NOTES: no TLS in the build). A requirement pip cannot find is refused
with pip's own message. What the run used is recorded (``app_image`` in the summary).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker

#: The derived images' repository (their tag: a hash, see the module doc).
REPOSITORY = "continuum-testbed-app"
#: Seconds the host's ``pip wheel`` of an app's requirements may take.
WHEEL_TIMEOUT_S = 900.0

_CHECK = """
import json, subprocess, sys
missing = []
for req in json.loads(sys.argv[1]):
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
                        "--quiet", req], capture_output=True, text=True)
    if r.returncode != 0:
        missing.append(req)
print(json.dumps(missing))
"""


@dataclass(frozen=True)
class AppImage:
    """The image a user's app runs in, and why.

    Attributes
    ----------
    image : str
        The base image, or the derived one.
    missing : tuple of str
        The app's requirements the base image does not satisfy (installed in ``image``).
    built : bool
        True when this run built the derived image (False: reused, or none needed).
    """

    image: str
    missing: tuple[str, ...] = ()
    built: bool = False

    def describe(self) -> str:
        """One line for the summary."""
        if not self.missing:
            return f"{self.image} (it has every dependency the app declares)"
        how = "built for this run" if self.built else "reused"
        return f"{self.image} ({how}: pip installed {', '.join(self.missing)})"


def missing_in(client: docker.DockerClient, image: str, reqs: list[str]) -> list[str]:
    """The requirements ``image``'s pip does not find installed (no index)."""
    if not reqs:
        return []
    out = client.containers.run(
        image,
        ["python", "-c", _CHECK, json.dumps(reqs)],
        remove=True,
        network_mode="none",
        stdout=True,
        stderr=False,
    )
    text = out.decode() if isinstance(out, bytes) else str(out)
    return list(json.loads(text.strip().splitlines()[-1]))


def derived_tag(client: docker.DockerClient, base: str, missing: list[str]) -> str:
    """``continuum-testbed-app:<hash>`` of the base image's id and the requirements."""
    base_id = str(client.images.get(base).id)
    key = json.dumps([base_id, sorted(missing)])
    return f"{REPOSITORY}:{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def app_image(client: docker.DockerClient, base: str, app_dir: Path) -> AppImage:
    """The image to run the app at ``app_dir`` in: ``base`` when it satisfies every
    requirement, else the derived image (built now, or reused).

    Raises
    ------
    ValueError
        When the host's pip cannot get a wheel of a missing requirement, or the build
        fails (the message names the app, the requirements and the tail of the log).
    """
    from nodes.fl.userapp import read_app

    missing = missing_in(client, base, list(read_app(app_dir).dependencies))
    if not missing:
        return AppImage(base)
    import docker as sdk

    tag = derived_tag(client, base, missing)
    try:
        client.images.get(tag)
        return AppImage(tag, tuple(missing), built=False)
    except sdk.errors.ImageNotFound:
        pass
    with tempfile.TemporaryDirectory(prefix="testbed-app-image-") as tmp:
        ctx = Path(tmp)
        wheels = ctx / "wheels"
        res = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels),
             *missing],
            capture_output=True, text=True, timeout=WHEEL_TIMEOUT_S,
        )  # fmt: skip
        if res.returncode != 0:
            tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
            raise ValueError(
                f"app {app_dir.name!r}: the image lacks {', '.join(missing)} and the "
                f"host's pip could not get them: {tail}"
            )
        reqs = " ".join(json.dumps(r) for r in missing)
        (ctx / "Dockerfile").write_text(
            f"FROM {base}\n"
            "COPY wheels/ /tmp/app-wheels/\n"
            f"RUN pip install --no-index --find-links /tmp/app-wheels {reqs} "
            "&& rm -rf /tmp/app-wheels\n"
            f"LABEL testbed.app-requirements={json.dumps(json.dumps(missing))}\n"
        )
        try:
            client.images.build(path=str(ctx), tag=tag, rm=True, network_mode="none")
        except sdk.errors.BuildError as e:
            log = "".join(str(x.get("stream", "")) for x in e.build_log).strip().splitlines()
            raise ValueError(
                f"app {app_dir.name!r}: building {tag} with {', '.join(missing)} failed: "
                f"{(log or [str(e)])[-1]}"
            ) from None
    return AppImage(tag, tuple(missing), built=True)
