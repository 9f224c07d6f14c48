"""``--ray-address``: a two-node Ray cluster on loopback (``ray start --head`` +
``ray start --address``), a simulation attached to it, ClientApps on both nodes.

Slow (make test-e2e). The cluster is bounded (1 CPU per node), offline (usage stats
off, no dashboard), and stopped at the end by PID: only the processes that carry this
test's marker in their environment (``ray stop`` would stop every Ray on the machine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from testbed.cli import app
from testbed.procs import free_port
from testbed.store import RunStore

pytestmark = pytest.mark.slow

RAY = str(Path(sys.executable).with_name("ray"))
MARKER = "TESTBED_RAY_TEST"
START_TIMEOUT_S = 120
SPEC = """\
name: sim-cluster
seed: 5
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, count: 4}
workload:
  fl:
    rounds: 2
    local_epochs: 1
    round_timeout_s: 60
    model: {name: mlp, width: 16}
simulation: {client_cpus: 1.0}
"""


def marked(tag: str) -> list[psutil.Process]:
    """Processes whose environment carries this test's marker."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(MARKER) == tag:
                out.append(p)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return out


def stop(tag: str) -> None:
    """SIGTERM, then SIGKILL, every process of this test's cluster (by PID)."""
    procs = marked(tag)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    _gone, alive = psutil.wait_procs(procs, timeout=10)
    for p in alive:
        p.kill()
    psutil.wait_procs(alive, timeout=5)


@pytest.fixture
def cluster() -> Iterator[str]:
    tag = uuid.uuid4().hex
    port = free_port()
    temp = f"/tmp/rt-{tag[:8]}"  # short: Ray's unix socket paths must stay < 108 bytes
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", **{MARKER: tag})
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    try:
        subprocess.run(
            [RAY, "start", "--head", f"--port={port}", "--include-dashboard=false",
             f"--temp-dir={temp}", *common],
            env=env, check=True, timeout=START_TIMEOUT_S, capture_output=True,
        )  # fmt: skip
        subprocess.run(
            [RAY, "start", f"--address=127.0.0.1:{port}", *common],
            env=env, check=True, timeout=START_TIMEOUT_S, capture_output=True,
        )  # fmt: skip
        yield f"127.0.0.1:{port}"
    finally:
        stop(tag)
    deadline = time.time() + 10
    while marked(tag) and time.time() < deadline:
        time.sleep(0.5)
    assert not marked(tag), "Ray processes of the test cluster left behind"


def test_clientapps_run_on_both_nodes(cluster: str, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "runs"
    args = ["run", str(spec), "--backend", "simulation", "--ray-address", cluster]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    store = RunStore(out)
    (run,) = store.runs()
    statuses = {(s.round, s.node, s.status) for s in store.round_status(run.run_id)}
    assert statuses == {(r, f"edge-{i}", "completed") for r in (1, 2) for i in range(1, 5)}
    run_dir = out / run.run_id
    nodes = {
        json.loads(p.read_text())["node_id"] for p in (run_dir / "ray_nodes").glob("*.json")
    }
    assert len(nodes) == 2, nodes  # the ClientApp actors ran on both Ray nodes
    resolved = (run_dir / "spec.resolved.yaml").read_text()
    assert cluster in resolved  # the address is part of the run's record
