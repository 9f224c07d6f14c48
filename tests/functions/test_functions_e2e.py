"""End to end on the local backend: two functions, real node runtimes, links and load."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodes.functions.workloads import module_path
from testbed.report import write_report
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.conftest import processes_under


def spec_yaml(tmp: Path, policy: str) -> str:
    return f"""\
name: fn-e2e
seed: 3
profiles:
  orin-fast-start:              # the Orin with a short modelled GPU cold start
    cpu_speed_factor: 0.55
    gpu_fp32_tflops: 1.28
    gpu_cold_start_s: 0.3
fleet:
  nodes:
    - {{id: edge, tier: edge, profile: orin-fast-start}}
    - {{id: cloud, tier: cloud, profile: cloud-gpu}}
links:
  defaults:
    edge-edge: {{latency_ms: 1}}
    edge-cloud: {{latency_ms: 25}}
workload:
  functions:
    policy: {policy}
    duration_s: 14
    runtime: {{time_scale: 0.008}}    # evaluate every 0.48 s, 1 s cold-start wait
    functions:
      - name: mm
        module: matmul
        slo_ms: 3                      # the CPU cannot meet it: promotion expected
        request: {{n: 512}}            # CPU ~55 ms: the GPU stays faster on a loaded host
        arrivals: {{kind: poisson, rate_rps: 8}}
      - name: idle
        module: {tmp / "idle_fn.py"}
        slo_ms: 100
        request: {{wait_ms: 5}}
        arrivals: {{kind: bursty, rate_rps: 5}}
"""


@pytest.mark.slow  # a real functions fleet for ~10-25 s: in `make test-e2e`
def test_two_functions_gaia_link_promotes_the_accelerable_one_only(tmp_path: Path) -> None:
    shutil.copy(module_path("idle"), tmp_path / "idle_fn.py")
    store = RunStore(tmp_path / "runs")
    exp = parse_spec(spec_yaml(tmp_path, "gaia-link"))
    res = run_experiment(exp, store, spec_path="inline", sweep_id="fn-sweep")
    assert res.status == "completed", res.summary
    s = res.summary
    mm, idle = s["functions"]["mm"], s["functions"]["idle"]
    assert mm["mode"] == "cpu_preferred" and idle["mode"] == "cpu"
    assert mm["node"] == "edge" and idle["node"] == "edge"  # both near the origin
    assert mm["requests"] > 40 and idle["requests"] > 20
    assert s["requests_failed"] == 0

    db = store._db
    tags = [
        (node, json.loads(t))
        for node, t in db.execute(
            "SELECT node, tags FROM metrics WHERE run_id=? AND name='e2e_ms'", (res.run_id,)
        )
    ]
    # the runtime promoted mm (case 2) and later requests ran on the emulated GPU
    decisions = db.execute(
        "SELECT node, value, tags FROM metrics WHERE run_id=? AND name='mode_decision'",
        (res.run_id,),
    ).fetchall()
    promoted = [d for d in decisions if d[0] == "mm" and d[1] == 1.0 and "gpu_preferred" in d[2]]
    assert promoted, decisions
    mm_backends = {t["backend"] for n, t in tags if n == "mm"}
    assert mm_backends == {"cpu", "gpu-emulated"}
    assert {t["timing"] for n, t in tags if n == "mm" and t["backend"] == "gpu-emulated"} == {
        "modelled"
    }
    assert mm["switches"] >= 1 and mm["gpu_seconds"] > 0
    # the idle function never holds a GPU
    assert {t["backend"] for n, t in tags if n == "idle"} == {"cpu"}
    assert idle["gpu_seconds"] == 0 and idle["switches"] == 0
    assert "gpu-emulated: modelled" in mm["timing"] and "cpu: stretched" in idle["timing"]
    assert not any(d[0] == "idle" for d in decisions)
    # the emulated GPU is labelled as such
    assert s["gpu_timing"].startswith("emulated")
    # link latency is in the end-to-end figure: >= 2 x 1 ms, and the idle wait of 5 ms
    assert min(t["network_ms"] for n, t in tags) >= 1.5
    assert idle["p50_ms"] >= 5.0
    assert processes_under(tmp_path) == []
    # the sweep report: table, notes on labels, plots
    md, page = write_report(store, "fn-sweep", tmp_path / "report")
    text = md.read_text()
    # the end backend is what the runtime decided last: the GPU, unless case 3.1 found it no
    # faster on this host (it did once on a loaded 2-core CI machine with a smaller matmul)
    end = mm["end_backend"]
    assert f"| gaia-link | mm | edge (edge) | cpu_preferred | cpu -> {end} |" in text
    demoted = [d for d in decisions if d[0] == "mm" and "case 3.1" in d[2]]
    assert end == "gpu-emulated" or demoted, (end, decisions)
    assert "emulated (modelled from profile)" in text and "idle 0.0 GPU-s" in text
    assert (tmp_path / "report" / "timeline.png").stat().st_size > 5000


@pytest.mark.slow
def test_ctrl_c_keeps_the_recorded_requests_and_stops_every_process(tmp_path: Path) -> None:
    shutil.copy(module_path("idle"), tmp_path / "idle_fn.py")
    spec = tmp_path / "fn.yaml"
    spec.write_text(spec_yaml(tmp_path, "gaia").replace("duration_s: 14", "duration_s: 300"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed", "run", str(spec), "--out", str(tmp_path / "runs")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    db = tmp_path / "runs" / "testbed.db"
    deadline = time.time() + 120
    while time.time() < deadline:
        if db.exists() and "e2e_ms" in RunStore(tmp_path / "runs").metric_names():
            break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("no request recorded in time")
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    store = RunStore(tmp_path / "runs")
    [run] = store.runs()
    assert run.status == "interrupted"
    n = store._db.execute(
        "SELECT COUNT(*) FROM metrics WHERE run_id=? AND name='e2e_ms'", (run.run_id,)
    ).fetchone()[0]
    assert n > 10
    assert processes_under(tmp_path) == []
