"""The node's function runtime: real worker processes, device-time emulation, HTTP API."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodes.functions.server import BackendError, NodeRuntime
from nodes.functions.workloads import module_path

MATMUL = str(module_path("matmul"))
ORIN = {"cpu_speed_factor": 0.5, "gpu_fp32_tflops": 1.0, "gpu_efficiency": 0.5}
ORIN |= {"gpu_overhead_ms": 2.0, "gpu_cold_start_s": 0.2}


def test_device_time_arithmetic() -> None:
    rt = NodeRuntime("n", ORIN, host_gflops=100.0, gpu="emulated")  # GPU speed-up 5

    class B:
        kind, label = "cpu", "cpu"

    class G:
        kind, label = "gpu", "gpu-emulated"

    # 30 ms wall = 20 ms CPU + 4 ms waiting for a core of this host + 6 ms sleeping
    assert rt.device_time(B, 0.030, 0.020, 0.004) == pytest.approx((0.006 + 0.040, "stretched"))
    assert rt.device_time(G, 0.030, 0.020, 0.004) == pytest.approx(
        (0.006 + 0.004 + 0.002, "modelled")
    )


def test_cpu_backend_is_stretched_and_gpu_backend_is_modelled_on_a_virtual_clock() -> None:
    rt = NodeRuntime("n", ORIN, host_gflops=100.0, gpu="emulated")
    try:
        rec = rt.deploy("mm", MATMUL, "cpu", warmup={"n": 256})
        assert rec["backend"] == "cpu" and rec["cold_start_s"] > 0
        t = time.monotonic()
        out = rt.invoke("mm", {"n": 384, "seed": 1}, t)
        assert out["error"] is None and out["output"]["n"] == 384
        assert out["backend"] == "cpu" and out["timing"] == "stretched"
        # twice as slow as this host: the wall time really is the device time
        assert out["server_wall_ms"] >= out["service_ms"] * 0.95

        sw = rt.switch("mm", "gpu")
        assert sw["backend"] == "gpu-emulated" and sw["cold_start_s"] >= 0.2
        t = time.monotonic()
        a = rt.invoke("mm", {"n": 384, "seed": 2}, t)
        b = rt.invoke("mm", {"n": 384, "seed": 3}, t)  # arrived together: queues behind a
        assert a["backend"] == b["backend"] == "gpu-emulated"
        assert a["timing"] == "modelled" and a["service_ms"] >= 2.0  # overhead included
        assert b["server_ms"] == pytest.approx(a["server_ms"] + b["service_ms"], rel=0.05)
        assert a["output"] == rt.invoke("mm", {"n": 384, "seed": 2}, time.monotonic())["output"]
        st = rt.stats()["functions"]["mm"]
        assert st["backend"] == "gpu-emulated" and st["gpu_seconds"] > 0.2
        assert [c["backend"] for c in st["cold_starts"]] == ["cpu", "gpu-emulated"]
    finally:
        rt.shutdown()


def test_a_node_without_gpu_refuses_a_gpu_backend() -> None:
    rt = NodeRuntime("n", {"cpu_speed_factor": 1.0}, host_gflops=100.0, gpu="auto")
    assert rt.gpu is None
    with pytest.raises(BackendError, match="no GPU"):
        rt.deploy("mm", MATMUL, "gpu")


def _req(port: int, method: str, path: str, body: bytes = b"") -> tuple[int, dict]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request(method, path, body=body)
    r = c.getresponse()
    return r.status, json.loads(r.read())


def test_http_api_and_clean_exit(tmp_path: Path) -> None:
    port_file = tmp_path / "port.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nodes.functions.server",
            "--node",
            "n",
            "--profile-json",
            json.dumps(ORIN),
            "--host-gflops",
            "100",
            "--gpu",
            "emulated",
            "--port-file",
            str(port_file),
        ]
    )
    try:
        deadline = time.time() + 30
        while not port_file.exists() and time.time() < deadline:
            time.sleep(0.05)
        port = json.loads(port_file.read_text())["port"]
        assert _req(port, "GET", "/healthz") == (200, {"ok": True, "node": "n"})
        assert _req(port, "POST", "/invoke/ghost", b"{}")[0] == 404
        assert _req(port, "POST", "/deploy/mm", b"not json")[0] == 400
        assert _req(port, "POST", "/go/mm", b"{}") == (404, {"error": "no route /go/mm"})
        assert _req(port, "POST", "/invoke", b"{}") == (404, {"error": "no route /invoke"})
        code, missing = _req(port, "POST", "/deploy/mm", b'{"backend": "cpu"}')
        assert code == 404 and "'module'" in missing["error"]
        code, rec = _req(
            port, "POST", "/deploy/mm", json.dumps({"module": MATMUL, "backend": "gpu"}).encode()
        )
        assert code == 200 and rec["backend"] == "gpu-emulated"
        code, out = _req(port, "POST", "/invoke/mm", b'{"n": 64}')
        assert code == 200 and out["backend"] == "gpu-emulated" and out["output"]["n"] == 64
        code, bad = _req(
            port,
            "POST",
            "/deploy/x",
            json.dumps({"module": "/nonexistent.py", "backend": "cpu"}).encode(),
        )
        assert code == 503 and "does not exist" in bad["error"]
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_host_gflops_does_not_move_with_the_hosts_load() -> None:
    """Issue 29: the emulated GPUs' speed-up is profile / host GFLOPS; measured per wall
    second the host figure fell 5x under load (17.5 vs 100), so the same GPU looked 5x
    faster. Per CPU second of the measuring thread it does not fall while three busy
    processes contend for this host's cores (per wall second it would fall by ~2x here)."""
    import multiprocessing

    from nodes.functions.worker import host_gflops

    quiet = host_gflops(0.5)
    ctx = multiprocessing.get_context("fork")
    hogs = [ctx.Process(target=_spin, args=(4.0,)) for _ in range(3)]
    for h in hogs:
        h.start()
    try:
        loaded = host_gflops(0.5)
    finally:
        for h in hogs:
            h.terminate()
            h.join()
    # one-sided: the failure this guards against is the figure falling with the load (per
    # wall second it does, to ~1/2 here); a "quiet" sample taken while the suite's other
    # workers run can itself read low, so the loaded one may come out higher
    assert loaded / quiet > 0.75, (quiet, loaded)


def test_under_time_dilation_a_call_lasts_tdf_times_its_device_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TDF 3: a device 2x slower than this host serves in TDF x its (emulated) device
    time on the wall clock; the records stay emulated; a faster CPU (2x, under TDF) is
    stretched too, not modelled; the modelled GPU cold start is waited TDF x."""
    monkeypatch.setenv("TESTBED_TDF", "3")
    rt = NodeRuntime("n", ORIN, host_gflops=100.0, gpu="emulated")
    try:
        rt.deploy("mm", MATMUL, "cpu", warmup={"n": 256})
        out = rt.invoke("mm", {"n": 384, "seed": 1}, time.monotonic())
        assert out["timing"] == "stretched"
        assert out["server_wall_ms"] >= 3 * out["service_ms"] * 0.95
        assert out["server_ms"] == pytest.approx(out["service_ms"], rel=0.05)
        t0 = time.monotonic()
        sw = rt.switch("mm", "gpu")
        took = time.monotonic() - t0
        # emulated: the worker's start-up (load-dependent) plus 0.2 s modelled, waited 0.6 s
        assert took >= 0.6
        assert 0.2 <= sw["cold_start_s"] <= took / 3 + 0.01
    finally:
        rt.shutdown()
    fast = NodeRuntime("f", {"cpu_speed_factor": 2.0}, host_gflops=100.0, gpu="auto")

    class B:
        kind, label = "cpu", "cpu"

    assert fast.device_time(B, 0.030, 0.020, 0.004)[1] == "stretched"  # 2 <= TDF 3
