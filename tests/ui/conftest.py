"""Fixtures for the dashboard and controller tests: a real controller (uvicorn on a free
loopback port, SQLite store in tmp_path) and runs written through ``RunStore``."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn

from testbed.controller.app import create_app
from testbed.procs import free_port, wait_port
from testbed.runner import snapshot
from testbed.spec.loader import load_spec
from testbed.store import RunStore

ROOT = Path(__file__).resolve().parents[2]

TINY = """\
# Tiny: 1 server + 2 edge clients, 2 short rounds (tests).
name: tiny
seed: 3
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, profile: rpi5, count: 2}
links:
  defaults:
    edge-cloud: {bandwidth_mbps: 50, latency_ms: 10}
workload:
  fl: {rounds: 2, local_epochs: 1}
"""


@dataclass
class Controller:
    """A controller serving on ``url`` over ``store_root``."""

    url: str
    port: int
    store_root: Path
    experiments: Path
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)


def serve(store_root: Path, experiments: Path, host: str = "127.0.0.1", token: str | None = None):
    """Start a real controller (uvicorn in a thread) and wait until it listens."""
    port = free_port()
    app = create_app(store_root, experiments, token=token)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_port(port, 30)
    return Controller(f"http://127.0.0.1:{port}", port, store_root, experiments, server, thread)


def experiments_dir(folder: Path) -> Path:
    """An experiments folder with the quickstart and the tiny experiment."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "experiments" / "quickstart.yaml", folder / "quickstart.yaml")
    (folder / "tiny.yaml").write_text(TINY)
    return folder


def seed_run(
    store: RunStore,
    run_id: str,
    *,
    status: str = "completed",
    rounds: int = 3,
    acc_step: float = 0.2,
    seed: int = 42,
    crash: str | None = "edge-2",
) -> str:
    """Write a quickstart-shaped run through ``RunStore``: resolved spec, events (a
    crash of ``crash`` in round 2), per-round metrics and, when finished, a summary."""
    exp = load_spec(
        ROOT / "experiments" / "quickstart.yaml", [("seed", seed), ("workload.fl.rounds", rounds)]
    )
    run_dir = store.create_run(
        run_id, exp.name, seed=seed, backend="local", spec_path="quickstart.yaml", pid=os.getpid()
    )
    snapshot(exp, seed, run_dir, {"run_id": run_id})
    t0 = time.time() - 30
    nodes = ["edge-1", "edge-2", "edge-3", "fog"]
    store.add_event(run_id, "fleet_starting", ts=t0, nodes=["cloud", *nodes])
    store.add_event(run_id, "fleet_ready", ts=t0 + 1, superlink_port=1)
    acc = {}
    for r in range(rounds + 1):
        acc[r] = 0.1 + acc_step * r
        store.add_metric(run_id, "global_acc", acc[r], round=r, ts=t0 + 2 + r)
        store.add_metric(run_id, "global_loss", 2.3 - 0.5 * r, round=r, ts=t0 + 2 + r)
        if r == 0:
            continue
        store.add_event(run_id, "round_start", round=r, ts=t0 + 2 + r, sampled=4)
        if crash and r == 2:
            spec = {"kind": "crash", "node": crash}
            store.add_event(run_id, "fault_injected", round=r, node=crash, kind="crash", spec=spec)
            store.add_event(run_id, "node_down", round=r, node=crash, reason="crash")
        for i, n in enumerate(nodes):
            if crash == n and r >= 2:
                continue
            for name, v in (("eval_acc", acc[r] + 0.01 * i), ("train_loss", 2.0 - 0.3 * r)):
                store.add_metric(run_id, name, v, round=r, node=n, ts=t0 + 2 + r)
            for name, v in (("bytes_sent", 1e6), ("bytes_received", 1e6), ("round_trip_s", 2.0)):
                store.add_metric(run_id, name, v, round=r, node=n, ts=t0 + 2 + r)
        store.add_metric(run_id, "federated_acc", acc[r] + 0.02, round=r, ts=t0 + 2 + r)
        store.add_event(run_id, "round_end", round=r, ts=t0 + 2.5 + r, replies=4)
    if status != "running":
        for n in nodes:
            store.add_metric(run_id, "link_bytes_up", 3e6, node=n)
            store.add_metric(run_id, "link_bytes_down", 3.5e6, node=n)
        store.finish_run(
            run_id,
            status,
            {"wall_s": 30.0, "final_global_acc": acc[rounds], "rounds": rounds},
        )
    return run_id


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def controller(tmp_path: Path, store_root: Path) -> Iterator[Controller]:
    """A real controller over a fresh store and an experiments folder."""
    ctl = serve(store_root, experiments_dir(tmp_path / "experiments"))
    yield ctl
    ctl.stop()


@pytest.fixture
def seeded(controller: Controller) -> dict[str, str]:
    """Two finished runs (different seeds and curves) and one running run."""
    store = RunStore(controller.store_root)
    ids = {
        "a": seed_run(store, "quickstart-a", seed=42, acc_step=0.2),
        "b": seed_run(store, "quickstart-b", seed=7, acc_step=0.1, crash=None),
        "live": seed_run(store, "quickstart-live", status="running", rounds=2),
    }
    store.close()
    return ids
