"""A user's own Flower App on the docker backend (issue 28): Flower's quickstart-numpy,
unmodified, in node containers with a crash and a partition, observed and recorded as on
the local backend (tests/fl/test_userapp.py runs the same spec locally). Flower ships
the app (its FAB) to the SuperLink and SuperNode containers; its dependencies (flwr,
numpy) are the image's."""

from __future__ import annotations

from pathlib import Path

import docker

from testbed.store import RunStore
from tests.docker.conftest import docker_run, labelled_containers
from tests.fl.test_userapp import check_faults_recorded, quickstart_with_faults


def test_quickstart_numpy_in_containers_with_a_crash_and_a_partition(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    spec, out = tmp_path / "app.yaml", tmp_path / "runs"
    spec.write_text(quickstart_with_faults(timeout_s=8))
    proc = docker_run(spec, out)
    assert proc.wait(timeout=400) == 0, proc.stderr.read() if proc.stderr else ""
    store = RunStore(out)
    (run,) = store.runs()
    assert run.status == "completed"
    check_faults_recorded(store, run.run_id, store.artifact_dir(run.run_id))
    assert labelled_containers(engine) == []
