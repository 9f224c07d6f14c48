"""One backend of one function: a process that loads the function and runs requests.

Started by the node's function runtime (:mod:`nodes.functions.server`) as
``python -m nodes.functions.worker --module PATH --device cpu|cuda``. It speaks JSON
lines on its stdin / stdout (the module's own prints go to stderr):

- on start it imports the module, calls ``load(device)`` if defined, runs one warm-up
  request when ``--warmup`` is given, and writes ``{"ready": true, "load_s": ...}``;
- then for every line ``{"id": k, "request": {...}}`` it writes
  ``{"id": k, "response": {...} | null, "error": str | null, "wall_s": ..., "cpu_s": ...}``.

``cpu_s`` is the process CPU time of the call (torch runs one intra-op thread here, so
CPU time is the accelerable compute); ``runq_s`` is the time it waited for a core of
this shared host; ``wall_s - cpu_s - runq_s`` is the function's own waiting (sleep,
I/O). The runtime turns them into emulated device time.

``--calibrate N`` instead runs N requests built by the module's ``make_request`` and
prints the medians (the placement policies' cost model), plus this host's single-thread
FP32 matmul throughput.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from nodes.functions.protocol import Calibration, CallResult, Request


def import_function(path: str | os.PathLike[str]) -> ModuleType:
    """Import a function module from a file; it must define ``handler``."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"function module {str(p)!r} does not exist")
    spec = importlib.util.spec_from_file_location(f"fn_{p.stem}", p)
    if spec is None or spec.loader is None:
        raise ValueError(f"function module {str(p)!r} cannot be imported (not a .py file?)")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not callable(getattr(mod, "handler", None)):
        raise ValueError(f"function module {str(p)!r} defines no handler(request)")
    return mod


def runqueue_wait_s() -> float:
    """Time this thread has waited on a run queue (Linux schedstat; 0 where absent).

    On a shared host, a runnable worker waits for a core; that wait belongs to this
    host, not to the emulated device, and is taken out of the device time.
    """
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def worker_env() -> dict[str, str]:
    """Environment of a worker process: one math-library thread (see ``cpu_s``)."""
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def _params_as_request(params: Request, _i: int) -> Request:
    return dict(params)


def request_maker(mod: ModuleType) -> Callable[[Request, int], Request]:
    """The module's ``make_request(params, i)``; by default the params themselves."""
    maker: Callable[[Request, int], Request] = getattr(
        mod, "make_request", _params_as_request
    )
    return maker


def timed_call(mod: ModuleType, request: Request) -> CallResult:
    """Run the handler once, measuring wall, CPU and run-queue time."""
    t, c, q = time.perf_counter(), time.process_time(), runqueue_wait_s()
    response: Any = None
    error: str | None = None
    try:
        response = mod.handler(request)
    except Exception as exc:  # the function's own error goes back to the caller
        error = f"{type(exc).__name__}: {exc}"
    return {
        "response": response,
        "error": error,
        "wall_s": time.perf_counter() - t,
        "cpu_s": time.process_time() - c,
        "runq_s": runqueue_wait_s() - q,
    }


def host_gflops(seconds: float = 1.0, n: int = 512) -> float:
    """This host's single-thread FP32 matmul throughput (GFLOPS), measured now per
    second of this thread's CPU time: other processes contending for the host's cores
    stretch the wall time, not the CPU time, so the figure (and the emulated GPUs'
    speed-up over it) no longer moves with the host's load (it did: 17.5 GFLOPS per
    wall second under load, 97-103 quiet)."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    k, c0 = 0, time.thread_time()
    while time.thread_time() - c0 < seconds:
        a @ b
        k += 1
    return float(2 * n**3 * k / (time.thread_time() - c0) / 1e9)


def _single_thread() -> None:
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # a function without torch
        pass


def calibrate(path: str, params: Request, n: int) -> Calibration:
    """Median wall / CPU seconds of ``n`` warm requests, payload size, host GFLOPS."""
    t0 = time.perf_counter()
    mod = import_function(path)
    _single_thread()
    if callable(getattr(mod, "load", None)):
        mod.load("cpu")
    load_s = time.perf_counter() - t0
    make = request_maker(mod)
    mod.handler(make(params, 0))
    calls = [timed_call(mod, make(params, i + 1)) for i in range(n)]
    errors = [c["error"] for c in calls if c["error"]]
    if errors:
        raise RuntimeError(f"function {path!r} failed during calibration: {errors[0]}")
    return {
        "wall_s": statistics.median(c["wall_s"] for c in calls),
        "cpu_s": statistics.median(c["cpu_s"] for c in calls),
        "request_bytes": len(json.dumps(make(params, 1))),
        "response_bytes": len(json.dumps(calls[-1]["response"])),
        "load_s": load_s,
        "host_gflops": host_gflops(),
    }


def serve(path: str, device: str, warmup: Request | None) -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the function's prints must not corrupt the protocol
    t0 = time.perf_counter()
    try:
        mod = import_function(path)
        _single_thread()
        if callable(getattr(mod, "load", None)):
            mod.load(device)
        if warmup is not None:
            mod.handler(warmup)
    except Exception as exc:
        out.write(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return 1
    out.write(json.dumps({"ready": True, "load_s": time.perf_counter() - t0}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        out.write(json.dumps({"id": msg["id"], **timed_call(mod, msg["request"])}) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nodes.functions.worker")
    ap.add_argument("--module", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--warmup", default=None, help="JSON request run once before ready")
    ap.add_argument("--calibrate", type=int, default=0)
    ap.add_argument("--params", default="{}", help="make_request params (calibration)")
    a = ap.parse_args(argv)
    if a.calibrate:
        print(json.dumps(calibrate(a.module, json.loads(a.params), a.calibrate)))
        return 0
    return serve(a.module, a.device, json.loads(a.warmup) if a.warmup else None)


if __name__ == "__main__":
    sys.exit(main())
