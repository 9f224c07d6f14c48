"""A stale image (built from other sources than this checkout) is refused with the
command that rebuilds it (testbed/backends/image_source.py); no engine needed: a fake
client hands out the image's recorded hash as the engine's archive API would."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.backends import image_source
from testbed.backends.docker import check_image


def _tree(root: Path, body: str) -> Path:
    for pkg in image_source.PACKAGES:
        (root / pkg).mkdir(parents=True, exist_ok=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "nodes" / "x.py").write_text(body)
    (root / "nodes" / "__pycache__").mkdir(exist_ok=True)
    (root / "nodes" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"cache")
    return root


def test_the_hash_follows_the_code_and_ignores_caches(tmp_path: Path) -> None:
    a = image_source.source_hash(_tree(tmp_path / "a", "X = 1\n"))
    b = image_source.source_hash(_tree(tmp_path / "b", "X = 1\n"))
    (tmp_path / "b" / "nodes" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"other")
    assert a == b == image_source.source_hash(tmp_path / "b")
    assert a != image_source.source_hash(_tree(tmp_path / "c", "X = 2\n"))


class FakeEngine:
    """The parts of ``docker.DockerClient`` that check_image uses."""

    def __init__(self, recorded: str | None) -> None:
        self.recorded, self.removed = recorded, 0
        self.images = SimpleNamespace(get=lambda name: SimpleNamespace(id=f"sha256:{recorded}"))
        self.containers = SimpleNamespace(create=self._create)

    def _create(self, image: str, cmd: list[str]) -> SimpleNamespace:
        def archive(path: str) -> tuple[list[bytes], dict]:
            from docker.errors import NotFound

            if self.recorded is None:
                raise NotFound("no such file")
            buf, data = io.BytesIO(), (self.recorded + "\n").encode()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                info = tarfile.TarInfo(Path(path).name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            return [buf.getvalue()], {}

        def remove(force: bool = False) -> None:
            self.removed += 1

        return SimpleNamespace(get_archive=archive, remove=remove)


def test_check_image_refuses_a_stale_image_and_takes_a_current_one() -> None:
    here = image_source.checkout_hash()
    current = FakeEngine(here)
    check_image(current, "img")  # type: ignore[arg-type]
    assert current.removed == 1, "the probe container is removed"
    for recorded in ("0" * 64, None):
        with pytest.raises(ValueError, match="stale") as e:
            check_image(FakeEngine(recorded), "img")  # type: ignore[arg-type]
        assert "docker build" in str(e.value) and here[:12] in str(e.value)
