"""A user's Flower App whose dependency the image lacks runs in a derived image
(testbed/backends/app_image.py): built once from wheels the host's pip provides, reused
after, recorded in the run. The dependency is a wheel written here (``tinydep-xyz``,
no index: ``PIP_NO_INDEX`` and ``PIP_FIND_LINKS`` steer the host's pip), so nothing is
downloaded."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import zipfile
from pathlib import Path

import docker
import pytest

from testbed.backends.app_image import app_image, derived_tag
from testbed.backends.docker import image_name
from testbed.store import RunStore
from tests.docker.conftest import docker_run, labelled_containers
from tests.fl.test_userapp import spec_yaml, statuses, with_dependency, write_app

DIST, MODULE = "tinydep-xyz", "tinydep_xyz"


def write_wheel(folder: Path) -> Path:
    """A pure-Python wheel of ``tinydep-xyz`` 1.0 (module ``tinydep_xyz``, VALUE = 7)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{MODULE}-1.0.dist-info"
    files = {
        f"{MODULE}/__init__.py": b"VALUE = 7\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(data)}")
    record.append(f"{info}/RECORD,,")
    path = folder / f"{MODULE}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def test_an_apps_missing_dependency_is_installed_in_a_derived_image(
    engine: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = write_wheel(tmp_path / "wheels").parent
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    app = with_dependency(
        write_app(tmp_path, "depapp", top=f"import {MODULE}", body=f"assert {MODULE}.VALUE == 7"),
        f"{DIST}>=1.0",
    )
    spec, out = tmp_path / "app.yaml", tmp_path / "runs"
    spec.write_text(spec_yaml(str(app), clients=2, fl="app_config: {num-server-rounds: 1}\n"))
    tag = derived_tag(engine, image_name(), [f"{DIST}>=1.0"])
    with contextlib.suppress(docker.errors.ImageNotFound):  # (left by an earlier run)
        engine.images.remove(tag, force=True)
    try:
        proc = docker_run(spec, out)
        assert proc.wait(timeout=600) == 0, proc.stderr.read() if proc.stderr else ""
        store = RunStore(out)
        (run,) = store.runs()
        used = str(run.summary_dict.get("app_image"))
        assert run.status == "completed", run.summary_dict
        assert f"built for this run: pip installed {DIST}>=1.0" in used, used
        assert used.split(" ")[0] == tag and tag.startswith("continuum-testbed-app:")
        assert set(statuses(store, run.run_id).values()) == {"completed"}  # it imported
        again = app_image(engine, image_name(), app)  # the next run reuses it
        assert (again.image, again.built, again.missing) == (tag, False, (f"{DIST}>=1.0",))
        assert labelled_containers(engine) == []
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            engine.images.remove(tag, force=True)


def test_a_dependency_the_hosts_pip_cannot_get_is_refused_naming_it(
    engine: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))  # (no wheel there)
    app = with_dependency(write_app(tmp_path, "nodep"), f"{DIST}>=1.0")
    with pytest.raises(ValueError, match=f"app 'nodep': the image lacks {DIST}>=1.0"):
        app_image(engine, image_name(), app)
    assert app_image(engine, image_name(), write_app(tmp_path / "p", "plain")).missing == ()
