"""The JSON records of the function runtime, typed.

A worker (:mod:`nodes.functions.worker`) answers its node runtime
(:mod:`nodes.functions.server`) over JSON lines; the runtime answers HTTP clients (the
testbed's functions experiment) with JSON bodies. These are their shapes. Times are in
seconds unless the name ends in ``_ms``.
"""

from __future__ import annotations

from typing import Any, TypedDict

Request = dict[str, Any]
"""A function's request or response: a JSON object."""


class CallResult(TypedDict):
    """One timed call of a handler; times in seconds on this host."""

    response: Any
    error: str | None
    wall_s: float
    cpu_s: float
    runq_s: float


class Calibration(TypedDict):
    """Medians of warm calls (seconds), payload sizes (bytes), host GFLOPS."""

    wall_s: float
    cpu_s: float
    request_bytes: int
    response_bytes: int
    load_s: float
    host_gflops: float


class WorkerReply(CallResult):
    """A worker's answer to request ``id`` (see :mod:`nodes.functions.worker`)."""

    id: int


class ColdStart(TypedDict):
    """A backend start: which function, on which backend, how long (seconds)."""

    function: str
    backend: str
    cold_start_s: float


class Invocation(TypedDict):
    """The response to ``POST /invoke/NAME``; times in milliseconds."""

    output: Any
    error: str | None
    backend: str
    timing: str
    service_ms: float
    server_ms: float
    server_wall_ms: float


class FunctionStats(TypedDict):
    """One function in ``GET /stats``."""

    backend: str
    requests: int
    errors: int
    gpu_seconds: float
    cold_starts: list[ColdStart]
    switching: bool


class RuntimeStats(TypedDict):
    """``GET /stats``: the node, its GPU mode and speed-up, its functions."""

    node: str
    gpu: str | None
    gpu_speedup: float | None
    functions: dict[str, FunctionStats]
