"""What the function runtime adds to a request, and how exact its device time is.

Same run, same function (matmul n=256 and idle 5 ms), four paths:

1. in-process: ``handler(request)`` called directly (the baseline);
2. worker: through the backend worker process (JSON lines over a pipe);
3. node: through the node runtime's HTTP server on loopback;
4. node + link: through the node's shaping proxy on an unlimited 0-ms link.

Prints median per-request milliseconds, the overhead each layer adds and the ratio to
the baseline. Then the emulation check: on a profile with ``cpu_speed_factor`` 0.25 a
request's device time is 4 x its CPU time (+ its own wait); the node stretches the wall
time to it: prints the median of server wall time / device time (goal 1.00).

    python bench/functions.py [--n 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nodes.functions.server import NodeRuntime  # noqa: E402
from nodes.functions.worker import import_function  # noqa: E402
from nodes.functions.workloads import module_path  # noqa: E402
from testbed.emulation.link import LinkParams  # noqa: E402
from testbed.emulation.proxy import ShapingProxy  # noqa: E402

CASES = {"matmul": {"n": 256, "seed": 1}, "idle": {"wait_ms": 5.0}}


def med_ms(fn, n: int) -> float:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)


def post(port: int, path: str, body: bytes, conn: dict) -> dict:
    c = conn.setdefault(port, http.client.HTTPConnection("127.0.0.1", port, timeout=60))
    c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    return json.loads(c.getresponse().read())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port.json"
        prof = {"cpu_speed_factor": 1.0}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nodes.functions.server",
                "--node",
                "bench",
                "--profile-json",
                json.dumps(prof),
                "--host-gflops",
                "100",
                "--gpu",
                "emulated",
                "--port-file",
                str(port_file),
            ],
            cwd=ROOT,
        )
        try:
            while not port_file.exists():
                time.sleep(0.05)
            port = json.loads(port_file.read_text())["port"]
            proxy = ShapingProxy("bench", "127.0.0.1", port, LinkParams())
            pport = proxy.start()
            conn: dict = {}
            rt = NodeRuntime("bench", prof, 100.0, "emulated")
            for name, req in CASES.items():
                path = str(module_path(name))
                mod = import_function(path)
                body = json.dumps(req).encode()
                post(
                    port,
                    f"/deploy/{name}",
                    json.dumps({"module": path, "backend": "cpu", "warmup": req}).encode(),
                    conn,
                )
                rt.deploy(name, path, "cpu", warmup=req)
                mod.handler(req)
                base = med_ms(lambda m=mod, r=req: m.handler(r), a.n)
                worker = med_ms(lambda n=name, r=req: rt.invoke(n, r, time.monotonic()), a.n)
                node = med_ms(lambda n=name, b=body: post(port, f"/invoke/{n}", b, conn), a.n)
                linked = med_ms(lambda n=name, b=body: post(pport, f"/invoke/{n}", b, conn), a.n)
                results[name] = {
                    "in_process_ms": base,
                    "worker_ms": worker,
                    "node_ms": node,
                    "node_link_ms": linked,
                }
            rt.shutdown()
            proxy.stop()
        finally:
            proc.terminate()
            proc.wait(timeout=20)

    slow = NodeRuntime("slow", {"cpu_speed_factor": 0.25}, 100.0, "emulated")
    try:
        stretch = {}
        for name, req in CASES.items():
            slow.deploy(name, str(module_path(name)), "cpu", warmup=req)
            ratios = []
            for _ in range(max(20, a.n // 10)):
                out = slow.invoke(name, req, time.monotonic())
                ratios.append(out["server_wall_ms"] / out["service_ms"])
            stretch[name] = statistics.median(ratios)
    finally:
        slow.shutdown()

    print(
        f"{'function':8} {'in-process':>11} {'worker':>9} {'node HTTP':>10} {'+link':>9}"
        "   overhead of node+link (ms)   ratio to in-process"
    )
    for name, r in results.items():
        ovh = r["node_link_ms"] - r["in_process_ms"]
        ratio = r["node_link_ms"] / r["in_process_ms"]
        print(
            f"{name:8} {r['in_process_ms']:10.2f}  {r['worker_ms']:8.2f}  {r['node_ms']:9.2f}"
            f"  {r['node_link_ms']:8.2f}   {ovh:26.2f}   {ratio:.2f}"
        )
    print("stretched wall time / expected device time on a 0.25 CPU (goal 1.00):")
    for name, v in stretch.items():
        print(f"  {name}: {v:.3f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"paths": results, "stretch": stretch}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
