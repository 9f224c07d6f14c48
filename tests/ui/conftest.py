"""Fixtures for the dashboard and controller tests: a real controller (uvicorn on a free
loopback port, SQLite store in tmp_path) and runs written through ``RunStore``."""

from __future__ import annotations

import os
import shutil
import sys
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


@pytest.fixture(autouse=True)
def _main_module_restored() -> Iterator[None]:
    """Streamlit's AppTest leaves the dashboard script as ``sys.modules['__main__']``:
    a process spawned later in the same pytest worker then re-runs the dashboard as its
    main module and exits, and a ``multiprocessing`` pool respawns it forever (CI hung
    80 minutes in tests/test_store.py so). Each test gets the worker's own back."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main


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


def tiny_png() -> bytes:
    """A valid 1x1 PNG (stands in for the plots the experiments write)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def _library_run(store: RunStore, run_id: str, experiment: str) -> Path:
    exp = load_spec(ROOT / "experiments" / experiment)
    run_dir = store.create_run(
        run_id, exp.name, seed=0, backend="local", spec_path=experiment, pid=os.getpid()
    )
    snapshot(exp, 0, run_dir, {"run_id": run_id})
    return run_dir


def seed_radio_run(store: RunStore, run_id: str = "semantic-mux-a") -> str:
    """A finished semantic_mux run whose rows are shaped as ``radio/experiment.py``
    reports them (``emit``: step and node None; tags kind, unit, scheme, num_tasks,
    snr_db, task), and the PNG plots it writes."""
    run_dir = _library_run(store, run_id, "semantic_mux.yaml")

    def emit(name, value, kind, unit, scheme, k, snr=None, task=None):  # radio's emit
        tags = {"kind": kind, "unit": unit, "scheme": scheme, "num_tasks": k,
                "snr_db": snr, "task": task}  # fmt: skip
        store.add_metric(run_id, name, value, round=None, node=None, tags=tags)

    base = {"semantic_mux": 0.9, "orthogonal": 0.8, "bit_level": 0.7}
    for k in (2, 4, 8):
        for scheme, b in base.items():
            emit("train_time_s", 10.0 * k, "measured", "s", scheme, k)
            for snr in (-5.0, 0.0, 20.0):
                acc = b - 0.02 * k + 0.005 * snr
                for t in ("digit", "parity")[: min(k, 2)]:
                    emit("accuracy", acc, "measured", "fraction", scheme, k, snr, t)
                emit("mean_accuracy", acc, "measured", "fraction", scheme, k, snr)
            uses = 8 if scheme == "semantic_mux" else 8 * k
            emit("channel_uses", uses, "measured", "REs per inference", scheme, k)
            emit("communication_load_symbols", 4 * uses, "measured",
                 "complex symbols per inference", scheme, k)  # fmt: skip
            emit("airtime_s", uses * 1e-5, "modelled", "s", scheme, k)
            emit("latency_s", uses * 1e-5 + 1e-3, "modelled", "s", scheme, k)
            emit("energy_j", uses * 1e-6, "modelled", "J", scheme, k)
        for scheme in ("orthogonal", "bit_level"):
            emit("ratio_latency_s", 2.0 * k, "modelled", f"{scheme} / semantic_mux", scheme, k)
            emit("ratio_load_symbols", k, "measured", f"{scheme} / semantic_mux", scheme, k)
    for name in ("accuracy_vs_k.png", "accuracy_vs_snr.png", "load_latency_vs_k.png"):
        (run_dir / name).write_bytes(tiny_png())
    (run_dir / "results.json").write_text('{"rows": []}')
    store.finish_run(run_id, "completed", {"wall_time_s": 60.0})
    return run_id


def seed_compress_run(store: RunStore, run_id: str = "tt-edge-a") -> str:
    """A finished compress run whose rows are shaped as ``nodes/compression/experiment.py``
    reports them (``_metric``: tags as strings; step = eps index; ``accuracy_before``
    without eps; modelled rows tagged with the engine profile)."""
    run_dir = _library_run(store, run_id, "tt_edge.yaml")

    def metric(name, value, step, **tags):  # compression's _metric
        store.add_metric(run_id, name, value, round=step, node=None,
                         tags={k: str(v) for k, v in tags.items()})  # fmt: skip

    metric("accuracy_before", 0.95, None, kind="measured")
    for i, eps in enumerate((0.1, 0.5, 0.9)):
        row = {"ratio": 1.5 + 4 * eps, "weight_rel_error": eps / 2, "acc_after": 0.95 - eps / 3,
               "acc_finetuned": 0.94 - eps / 10, "compress_seconds": 0.2}  # fmt: skip
        for key, v in row.items():
            metric(key, v, i, eps=eps, kind="measured")
        for key, v in (("modelled_speedup_x", 3.0 + eps), ("modelled_energy_saving_pct", 40.0)):
            metric(key, v, i, eps=eps, kind="modelled", profile="riscv-edge-ttd")
    (run_dir / "tt_edge_accuracy.png").write_bytes(tiny_png())
    store.finish_run(run_id, "completed", {"seconds": 20.0})
    return run_id


@pytest.fixture
def library_runs(seeded: dict[str, str], controller: Controller) -> dict[str, str]:
    """The seeded FL runs plus a finished radio run and a finished compression run."""
    store = RunStore(controller.store_root)
    ids = {**seeded, "radio": seed_radio_run(store), "compress": seed_compress_run(store)}
    store.close()
    return ids
