"""A spec anywhere on the host, read from the compose runner container's /host mount
(testbed/hostfs.py), and the node containers' mounts of the files it names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from testbed import hostfs
from testbed.backends.docker_node import input_dirs
from testbed.spec.loader import parse_spec


def test_paths_translate_between_the_runner_and_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "host"  # stands for the host's / mounted in the container
    spec = root / "elsewhere" / "q.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text("name: q\n")
    monkeypatch.delenv(hostfs.ENV, raising=False)
    assert hostfs.runner_path(Path("/elsewhere/q.yaml")) == Path("/elsewhere/q.yaml")
    monkeypatch.setenv(hostfs.ENV, str(root))
    seen = hostfs.runner_path(Path("/elsewhere/q.yaml"))
    assert seen == spec and seen.read_text() == "name: q\n"
    assert hostfs.runner_path(tmp_path) == tmp_path  # what exists here is read here
    assert hostfs.runner_path(Path("/nowhere/x.yaml")) == Path("/nowhere/x.yaml")
    assert hostfs.host_path(str(root / "elsewhere")) == "/elsewhere"  # a mount's source
    assert hostfs.host_path("/work/project/runs") == "/work/project/runs"


def test_node_containers_mount_every_folder_the_spec_names(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    np.savez(data / "d.npz", x=rng.random((40, 8)), y=np.arange(40) % 2)
    run_dir = tmp_path / "runs" / "r1"
    text = (
        "name: q\nfleet:\n  nodes:\n    - {id: cloud, tier: cloud}\n"
        "    - {id: e, tier: edge}\n"
        "workload:\n  fl:\n    rounds: 1\n    dataset: {name: npz, path: data/d.npz}\n"
    )
    exp = parse_spec(text, folder=tmp_path)
    assert exp.workload.fl.dataset.path == str(data / "d.npz")  # absolute once loaded
    assert str(data) in input_dirs(exp, run_dir)
    assert "/" not in input_dirs(exp, run_dir)
