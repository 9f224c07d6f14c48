"""The function runtime of one node: deploys functions and serves them over HTTP.

Gaia's node side. Every deployed function has an *active backend* (a worker process,
:mod:`nodes.functions.worker`) on the CPU or on the GPU; a switch starts the other
backend (a real cold start: process start, imports, model load), keeps serving on the
old one until the new one is ready, then swaps and stops the old one (Knative-style
revision roll-over).

Device time. The worker measures each call's CPU time ``c`` and wall time ``w`` on this
host. The node turns them into the time the emulated device would take::

    CPU backend:           (w - c - q) + c / cpu_speed_factor
    emulated GPU backend:  (w - c - q) + c / gpu_speedup + gpu_overhead_ms
    real CUDA backend:     w                                  (measured)

where ``q`` is the time the worker waited for a core of this shared host (Linux
schedstat run delay): host contention is not device time.

with ``gpu_speedup = gpu_fp32_tflops * gpu_efficiency / host_gflops`` (profile figures
over this host's single-thread throughput, measured at the start of the run). When the
device time is longer than ``w`` the node waits the difference (the device is slower
than this host: *stretched*, real in wall time); when shorter it cannot go faster than
this host, so the time is *modelled*: each backend keeps a virtual clock (a FIFO queue
of device times) and the response carries ``server_ms`` = queueing + service on that
clock, next to the real ``server_wall_ms``. Every response says which (``timing``:
``stretched`` | ``modelled`` | ``measured``) and on which backend (``cpu`` |
``gpu-emulated`` | ``gpu-cuda``).

HTTP API (JSON bodies):

- ``POST /invoke/NAME``: the function's request -> ``{"output", "backend", "timing",
  "server_ms", "server_wall_ms", "service_ms", "error"}``
- ``POST /deploy/NAME`` ``{"module", "backend", "warmup"}`` -> cold start record
- ``POST /switch/NAME`` ``{"backend"}`` -> cold start record of the new backend
- ``GET /stats`` -> per function: backend, requests, GPU-seconds, cold starts
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, ClassVar

from kernel.dilation import emulated, tdf, wall
from nodes.functions.protocol import (
    ColdStart,
    FunctionStats,
    Invocation,
    Request,
    RuntimeStats,
    WorkerReply,
)
from nodes.functions.worker import worker_env


class BackendError(RuntimeError):
    """A backend failed to start or died."""


@dataclass
class Backend:
    """A running worker process serving one function on one device."""

    kind: str  # cpu | gpu
    label: str  # cpu | gpu-emulated | gpu-cuda
    proc: subprocess.Popen[str]
    started: float
    ready: float = 0.0
    stopped: float | None = None
    cold_start_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    v_free: float = 0.0  # virtual clock: when the emulated device is free again
    next_id: int = 0

    def _pipe(self, stream: IO[str] | None) -> IO[str]:
        if stream is None:  # started without pipes: not a backend of this runtime
            raise BackendError(f"{self.label} backend has no pipe to its worker")
        return stream

    def call(self, request: Request) -> WorkerReply:
        """One request (the caller holds ``lock``)."""
        self.next_id += 1
        stdin, stdout = self._pipe(self.proc.stdin), self._pipe(self.proc.stdout)
        try:
            stdin.write(json.dumps({"id": self.next_id, "request": request}) + "\n")
            stdin.flush()
            line = stdout.readline()
        except (BrokenPipeError, ValueError) as exc:
            raise BackendError(f"{self.label} backend died: {exc}") from exc
        if not line:
            raise BackendError(f"{self.label} backend exited (code {self.proc.poll()})")
        reply: WorkerReply = json.loads(line)
        return reply

    def stop(self) -> None:
        if self.stopped is None:
            self.stopped = time.monotonic()
        if self.proc.poll() is None:
            try:
                self._pipe(self.proc.stdin).close()  # the worker exits at end of input
            except BrokenPipeError:  # it is already going (its group got SIGTERM)
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def gpu_seconds(self, now: float) -> float:
        """Emulated seconds this backend has held a GPU (0 for a CPU backend)."""
        if self.kind != "gpu":
            return 0.0
        return emulated((self.stopped or now) - self.started)


@dataclass
class Function:
    name: str
    module: str
    warmup: Request | None
    active: Backend
    retired: list[Backend] = field(default_factory=list)
    requests: int = 0
    errors: int = 0
    cold_starts: list[ColdStart] = field(default_factory=list)
    switching: bool = False


class NodeRuntime:
    """Functions deployed on one node, with the node's device profile."""

    def __init__(self, node: str, profile: dict[str, Any], host_gflops: float, gpu: str) -> None:
        self.node = node
        self.profile = profile
        self.host_gflops = host_gflops
        self.gpu = self._gpu_mode(gpu)
        self.functions: dict[str, Function] = {}
        self._lock = threading.Lock()

    def _gpu_mode(self, gpu: str) -> str | None:
        if not self.profile.get("gpu_fp32_tflops") or not self.profile.get("gpu_slots", 1):
            return None
        if gpu in ("auto", "cuda"):
            try:
                import torch

                if torch.cuda.is_available():
                    return "cuda"
            except ImportError:
                pass
            if gpu == "cuda":
                raise BackendError(f"node {self.node}: gpu: cuda asked for but CUDA is absent")
        return "emulated"

    @property
    def gpu_speedup(self) -> float:
        p = self.profile
        tflops, efficiency = float(p["gpu_fp32_tflops"]), float(p.get("gpu_efficiency", 0.25))
        return tflops * 1e3 * efficiency / self.host_gflops

    # -- backends ------------------------------------------------------------------
    def _start_backend(self, module: str, kind: str, warmup: Request | None) -> Backend:
        if kind == "gpu" and self.gpu is None:
            raise BackendError(f"node {self.node} has no GPU (profile gpu_fp32_tflops unset)")
        label = "cpu" if kind == "cpu" else f"gpu-{self.gpu}"
        device = "cuda" if label == "gpu-cuda" else "cpu"
        cmd = [sys.executable, "-m", "nodes.functions.worker", "--module", module]
        cmd += ["--device", device]
        if warmup is not None:
            cmd += ["--warmup", json.dumps(warmup)]
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=worker_env()
        )
        b = Backend(kind, label, proc, started=t0)
        line = b._pipe(proc.stdout).readline()
        msg = json.loads(line) if line else {"ready": False, "error": f"exit {proc.wait()}"}
        if not msg.get("ready"):
            b.stop()
            raise BackendError(f"{label} backend of {module} failed: {msg.get('error')}")
        if label == "gpu-emulated":  # CUDA context + model upload: modelled, waited for
            time.sleep(wall(float(self.profile.get("gpu_cold_start_s", 0.0))))
        b.ready = time.monotonic()
        b.cold_start_s = emulated(b.ready - t0)
        b.v_free = emulated(b.ready)  # the virtual clock runs in emulated seconds
        return b

    def deploy(self, name: str, module: str, kind: str, warmup: Request | None = None) -> ColdStart:
        b = self._start_backend(module, kind, warmup)
        fn = Function(name, module, warmup, b)
        with self._lock:
            old = self.functions.pop(name, None)
            self.functions[name] = fn
        if old is not None:
            old.active.stop()
        rec = ColdStart(function=name, backend=b.label, cold_start_s=b.cold_start_s)
        fn.cold_starts.append(rec)
        return rec

    def switch(self, name: str, kind: str) -> ColdStart:
        fn = self.functions[name]
        if fn.active.kind == kind:
            return ColdStart(function=name, backend=fn.active.label, cold_start_s=0.0)
        fn.switching = True
        try:
            b = self._start_backend(fn.module, kind, fn.warmup)
        finally:
            fn.switching = False
        old, fn.active = fn.active, b
        with old.lock:  # let its in-flight request finish
            old.stop()
        fn.retired.append(old)
        rec = ColdStart(function=name, backend=b.label, cold_start_s=b.cold_start_s)
        fn.cold_starts.append(rec)
        return rec

    # -- requests ------------------------------------------------------------------
    def device_time(
        self, b: Backend, wall_s: float, cpu_s: float, runq_s: float = 0.0
    ) -> tuple[float, str]:
        """Emulated service time of one call and how it was obtained.

        Run-queue time (waiting for a core of this shared host) is not device time.
        Under time dilation (:mod:`kernel.dilation`) the result is in emulated seconds
        (the caller waits TDF x it): the function's own waiting (sleep, I/O), measured
        on the wall clock, counts ``wait_s / TDF``; a real GPU's time is the device's own.
        """
        cpu_s = min(cpu_s, wall_s)
        wait_s = max(0.0, wall_s - cpu_s - runq_s)
        if b.label == "gpu-cuda":
            return wall_s, "measured"
        if b.kind == "gpu":
            ovh = float(self.profile.get("gpu_overhead_ms", 0.0)) / 1000.0
            return wait_s / tdf() + cpu_s / self.gpu_speedup + ovh, "modelled"
        speed = float(self.profile.get("cpu_speed_factor", 1.0))
        # a device no faster than TDF x this host is emulated by waiting (wall = device
        # time x TDF, up to host contention); a faster one only on the virtual clock
        return wait_s / tdf() + cpu_s / speed, "stretched" if speed <= tdf() else "modelled"

    def invoke(self, name: str, request: Request, t_arrival: float) -> Invocation:
        fn = self.functions.get(name)
        if fn is None:
            raise KeyError(name)
        while True:
            b = fn.active
            with b.lock:
                if b.stopped is not None:  # swapped while this request waited: retry
                    continue
                res = b.call(request)
                service, timing = self.device_time(
                    b, res["wall_s"], res["cpu_s"], res.get("runq_s", 0.0)
                )
                if wall(service) > res["wall_s"]:  # (emulated s, TDF x on the wall)
                    time.sleep(wall(service) - res["wall_s"])
                b.v_free = max(emulated(t_arrival), b.v_free) + service
                break
        fn.requests += 1
        fn.errors += res["error"] is not None
        return Invocation(
            output=res["response"],
            error=res["error"],
            backend=b.label,
            timing=timing,
            service_ms=service * 1e3,
            server_ms=(b.v_free - emulated(t_arrival)) * 1e3,
            server_wall_ms=(time.monotonic() - t_arrival) * 1e3,
        )

    def stats(self) -> RuntimeStats:
        now = time.monotonic()
        out: dict[str, FunctionStats] = {}
        for name, fn in self.functions.items():
            backends = [*fn.retired, fn.active]
            out[name] = FunctionStats(
                backend=fn.active.label,
                requests=fn.requests,
                errors=fn.errors,
                gpu_seconds=sum(b.gpu_seconds(now) for b in backends),
                cold_starts=fn.cold_starts,
                switching=fn.switching,
            )
        speedup = self.gpu_speedup if self.gpu else None
        return {"node": self.node, "gpu": self.gpu, "gpu_speedup": speedup, "functions": out}

    def shutdown(self) -> None:
        for fn in list(self.functions.values()):
            fn.active.stop()


PostRoute = Callable[["NodeRuntime", str, Request, float], Mapping[str, object]]

#: ``POST /ROUTE/NAME``: what each route does with the function ``NAME`` and the body.
POST_ROUTES: dict[str, PostRoute] = {
    "invoke": lambda rt, name, body, t_arrival: rt.invoke(name, body, t_arrival),
    "deploy": lambda rt, name, body, _t: rt.deploy(
        name, body["module"], body["backend"], body.get("warmup")
    ),
    "switch": lambda rt, name, body, _t: rt.switch(name, body["backend"]),
}


class RuntimeHandler(BaseHTTPRequestHandler):
    """The HTTP API of a :class:`NodeRuntime` (``runtime``, set by :func:`make_handler`)."""

    runtime: ClassVar[NodeRuntime]
    protocol_version = "HTTP/1.1"
    # headers and body are two writes: with Nagle on, the body waits for the client's
    # delayed ACK (40 ms on Linux) on every keep-alive request
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _reply(self, code: int, body: Mapping[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Request:
        n = int(self.headers.get("Content-Length") or 0)
        body: Request = json.loads(self.rfile.read(n) or b"{}")
        return body

    def do_GET(self) -> None:  # noqa: N802
        rt = self.runtime
        if self.path == "/stats":
            self._reply(200, rt.stats())
        elif self.path == "/healthz":
            self._reply(200, {"ok": True, "node": rt.node})
        else:
            self._reply(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:  # noqa: N802
        t_arrival = time.monotonic()
        try:
            body = self._body()
        except json.JSONDecodeError as exc:
            self._reply(400, {"error": f"request body is not JSON: {exc}"})
            return
        parts = self.path.strip("/").split("/")
        route = POST_ROUTES.get(parts[0]) if len(parts) == 2 else None
        if route is None:
            self._reply(404, {"error": f"no route {self.path}"})
            return
        try:
            self._reply(200, route(self.runtime, parts[1], body, t_arrival))
        except KeyError as exc:
            self._reply(404, {"error": f"no function or field {exc}"})
        except BackendError as exc:
            self._reply(503, {"error": str(exc)})


def make_handler(rt: NodeRuntime) -> type[RuntimeHandler]:
    """A request handler class serving ``rt`` (for ``ThreadingHTTPServer``)."""

    class Handler(RuntimeHandler):
        runtime = rt

    return Handler


def serve(
    node: str,
    profile: dict[str, Any],
    host_gflops: float,
    gpu: str,
    port_file: str | None,
    port: int = 0,
) -> int:
    """Serve node ``node``'s function runtime on 127.0.0.1:``port`` (0: a free one,
    written to ``port_file`` with the pid and the GPU backend) until SIGTERM/SIGINT."""
    from nodes.agent import watch_parent

    rt = NodeRuntime(node, profile, host_gflops, gpu)
    from nodes.agent import bind_host

    httpd = ThreadingHTTPServer((bind_host(), port), make_handler(rt))
    httpd.daemon_threads = True

    def stop(_signum: int, _frame: object) -> None:
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    watch_parent()
    port = int(httpd.server_address[1])
    if port_file:
        tmp = Path(port_file + ".tmp")
        tmp.write_text(json.dumps({"port": port, "pid": os.getpid(), "gpu": rt.gpu}))
        os.replace(tmp, port_file)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        rt.shutdown()
        httpd.server_close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nodes.functions.server")
    ap.add_argument("--node", required=True)
    ap.add_argument("--profile-json", required=True)
    ap.add_argument("--host-gflops", type=float, required=True)
    ap.add_argument("--gpu", choices=("auto", "emulated", "cuda"), default="auto")
    ap.add_argument("--port-file", default=None)
    ap.add_argument("--port", type=int, default=0, help="listen port (0: a free one)")
    a = ap.parse_args(argv)
    return serve(a.node, json.loads(a.profile_json), a.host_gflops, a.gpu, a.port_file, a.port)


if __name__ == "__main__":
    sys.exit(main())
