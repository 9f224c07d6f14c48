"""The pipeline stage server of one node: runs its layers and passes activations on.

Started by the backend on a fleet node (``start_services``), behind the node's link.
It holds the unit ranges it was given (``--ranges``), checks them against the node's
memory cap at start (it refuses to start when they do not fit), and serves:

- ``POST /step``: one step of one request (see :mod:`nodes.llm.wire`). The node runs
  its units one step at a time (a device runs one thing: a queue forms here), the
  measured compute time is stretched to the node's profile
  (:func:`nodes.device_control.stretch`, on the run's dilated clock: a device of speed
  ``s`` runs at its own speed whenever ``s <= TDF``, recorded ``timing: stretched``; a
  faster one runs at ``TDF`` x this host's speed, ``timing: host-speed``), then the
  activations go to the next hop's port (the next node's link) and its answer comes
  back with this hop's record appended. The record's ``device_ms`` and ``queue_ms`` are
  emulated time (wall / TDF, :mod:`kernel.dilation`); ``compute_ms`` is this host's
  own work and ``wall_ms`` the hop's wall time, both as measured.
  A step may carry a *micro-batch* (GPipe): ``header["batch"]`` lists each request's
  ``{"request", "pos", "n", "final"}`` and ``x`` is their inputs stacked along the
  token axis (``n`` rows each); the node runs them in one turn of its device, request
  after request (no fused kernel), and passes the stacked outputs on; the last stage
  answers ``"tokens"`` (one per request, in order).
- ``GET /stats``: busy seconds, steps, parameter bytes, uptime (wall seconds: their
  ratio is the node's utilisation on either clock).

A hop that cannot reach the next one answers 502 with the failed hop named.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import torch

from kernel.dilation import emulated, tdf, wall
from nodes.device_control import stretch
from nodes.llm.model import ModelConfig, Stage
from nodes.llm.wire import Client, decode, encode


class StageNode:
    """A node's stages and its one-at-a-time device."""

    def __init__(self, name: str, cfg: ModelConfig, ranges: list[tuple[int, int]],
                 speed: float, mem_bytes: int) -> None:  # fmt: skip
        self.name, self.speed = name, speed
        self.stages = {(a, b): Stage(cfg, a, b) for a, b in ranges}
        self.param_bytes = sum(s.param_bytes for s in self.stages.values())
        if self.param_bytes > mem_bytes:
            raise SystemExit(
                f"node {name}: stages {ranges} need {self.param_bytes / 2**20:.1f} MiB, "
                f"over its memory cap {mem_bytes / 2**20:.0f} MiB"
            )
        self.device = threading.Lock()
        self.busy_s, self.steps, self.started = 0.0, 0, time.monotonic()
        self.client = Client(timeout_s=wall(120.0))  # 120 emulated s
        torch.set_num_threads(1)

    def compute(
        self, header: dict[str, Any], x: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Run this hop's units on ``x``; its record (ms)."""
        stage = self.stages.get((int(header["start"]), int(header["stop"])))
        if stage is None:
            raise KeyError(f"node {self.name} holds {sorted(self.stages)}, not "
                           f"{(header['start'], header['stop'])}")  # fmt: skip
        items = header.get("batch") or [
            {"request": header["request"], "pos": header["pos"], "n": int(x.shape[0]),
             "final": header.get("final", False)}
        ]  # fmt: skip
        parts = torch.split(x, [int(it["n"]) for it in items])
        queued = time.perf_counter()
        with self.device:
            t0, c0 = time.perf_counter(), time.thread_time()
            outs = [stage.run(str(it["request"]), xi, int(it["pos"]))
                    for it, xi in zip(items, parts, strict=True)]  # fmt: skip
            y = outs[0] if len(outs) == 1 else torch.cat(outs)
            real, cpu = time.perf_counter() - t0, time.thread_time() - c0
            # the work is this thread's CPU time (torch single-threaded here), as FL
            # training's: other processes contending for the host's cores stretch the
            # wall time, and stretching that by 1 / speed would multiply the contention
            device_s = stretch(real, self.speed, cpu_s=cpu)
            for it in items:
                if it.get("final"):
                    stage.drop(str(it["request"]))
            spent = time.perf_counter() - t0  # wall, the stretch's wait included
            self.busy_s += spent
            self.steps += 1
        # a device no faster than TDF x this host is stretched to its own speed; a faster
        # one cannot be (it runs at TDF x host speed)
        timing = "host-speed" if self.speed > tdf() else "stretched"
        rec = {"node": self.name, "start": header["start"], "stop": header["stop"],
               "queue_ms": emulated(t0 - queued) * 1e3, "compute_ms": real * 1e3,
               "cpu_ms": cpu * 1e3,
               "wall_ms": spent * 1e3, "device_ms": device_s * 1e3,
               "in_bytes": x.numel() * x.element_size(), "timing": timing}  # fmt: skip
        return y, rec

    def step(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """Serve one step: compute, forward, answer (HTTP status, JSON)."""
        header, x = decode(body)
        y, rec = self.compute(header, x)
        hops = list(header.get("next") or [])
        if not hops:
            if header.get("batch"):
                return 200, {"tokens": [int(t) for t in y], "hops": [rec]}
            return 200, {"token": int(y[0]), "hops": [rec]}
        port, a, b = hops[0]
        # a micro-batch keeps each request's rows: only the head (the last unit, never
        # followed by a hop) maps a request's rows to one token
        nxt = {**header, "start": a, "stop": b, "next": hops[1:]}
        try:
            status, answer = self.client.post(int(port), "/step", encode(nxt, y))
        except OSError as e:
            return 502, {"error": f"next hop (units {a}-{b}) unreachable: {e}", "hops": [rec]}
        answer["hops"] = [rec, *answer.get("hops", [])]
        return status, answer


class Handler(BaseHTTPRequestHandler):
    node: ClassVar[StageNode]
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed ACK

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib name)
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 (stdlib name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/step":
            return self._send(404, {"error": f"no {self.path}"})
        try:
            status, answer = self.node.step(body)
        except (ValueError, KeyError) as e:
            status, answer = 400, {"error": str(e)}
        self._send(status, answer)

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        n = self.node
        self._send(200, {"node": n.name, "busy_s": n.busy_s, "steps": n.steps,
                         "param_bytes": n.param_bytes,
                         "uptime_s": time.monotonic() - n.started})  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--node", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--port-file", type=Path)
    ap.add_argument("--model-json", required=True, help="ModelConfig fields")
    ap.add_argument("--ranges", required=True, help="JSON list of [start, stop] unit ranges")
    ap.add_argument("--speed", type=float, default=1.0, help="profile cpu_speed_factor")
    ap.add_argument("--memory-mb", type=int, default=1 << 20)
    args = ap.parse_args(argv)
    cfg = ModelConfig(**json.loads(args.model_json))
    ranges = [(int(a), int(b)) for a, b in json.loads(args.ranges)]
    Handler.node = StageNode(args.node, cfg, ranges, args.speed, args.memory_mb << 20)
    from nodes.agent import bind_host

    server = ThreadingHTTPServer((bind_host(), args.port), Handler)
    server.daemon_threads = True
    if args.port_file:
        tmp = args.port_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"port": args.port, "param_bytes": Handler.node.param_bytes}))
        tmp.replace(args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
