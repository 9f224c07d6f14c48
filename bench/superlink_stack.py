"""The SuperLink's CPU per Fleet request, Flower's middleware stack vs ``fast``'s scoped
one (nodes/fl/superlink_stack.py), in ONE run.

For each protocol timing (``flower``, then ``fast``, then ``flower`` again, so a drift
of the machine shows): a real ``flower-superlink`` (``superlink_command``), K real Fleet
API clients as a SuperNode makes them (own key pair, Flower's interceptors) register and
activate, then send R empty ``PullMessages`` and R/10 ``SendNodeHeartbeat`` each, from K
threads. The SuperLink's own CPU time (user + system, ``/proc/<pid>/stat``) over the
requests is divided by their number; wall time too. The requests are what an idle
SuperNode sends between rounds (no run is submitted: every pull is empty).

    python bench/superlink_stack.py [--clients 20] [--requests 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nodes.agent import superlink_command  # noqa: E402
from testbed.procs import free_port, wait_port  # noqa: E402


def _client(address: str) -> tuple[Any, bytes]:
    from flwr.supercore.interceptors.http.runtime_version import RuntimeVersionHttpInterceptor
    from flwr.supercore.primitives.asymmetric import generate_key_pairs, public_key_to_bytes
    from flwr.supernode.fleet_http_client import FleetHttpClient
    from flwr.supernode.node_auth_http_interceptor import NodeAuthHttpInterceptor

    private, public = generate_key_pairs()
    interceptors: list[Any] = [
        RuntimeVersionHttpInterceptor(component_name="SuperNode"),
        NodeAuthHttpInterceptor(private, public),
    ]
    client = FleetHttpClient.from_server_address(address, True, None, interceptors=interceptors)
    return client, public_key_to_bytes(public)


def _node(address: str, requests: int) -> int:
    """One SuperNode's requests: register, activate, ``requests`` empty pulls and a
    heartbeat every 10th; returns how many were sent."""
    from flwr.proto.fleet_pb2 import (
        ActivateNodeRequest,
        PullMessagesRequest,
        RegisterNodeFleetRequest,
    )
    from flwr.proto.heartbeat_pb2 import SendNodeHeartbeatRequest
    from flwr.proto.node_pb2 import Node

    client, key = _client(address)
    client.RegisterNode(RegisterNodeFleetRequest(public_key=key))
    node_id = client.ActivateNode(
        ActivateNodeRequest(public_key=key, heartbeat_interval=30)
    ).node_id
    node = Node(node_id=node_id)
    sent = 2
    for i in range(requests):
        client.PullMessages(PullMessagesRequest(node=node))
        sent += 1
        if i % 10 == 0:
            client.SendNodeHeartbeat(SendNodeHeartbeatRequest(node=node, heartbeat_interval=30))
            sent += 1
    return sent


def measure(timing: str, clients: int, requests: int, work: Path) -> dict[str, float]:
    """One SuperLink in ``timing``: CPU-ms and wall-ms per request."""
    port = free_port()
    log = work / f"superlink-{timing}-{port}.log"
    env = {**os.environ, "FLWR_HOME": str(work / f"home-{port}")}
    cmd = superlink_command(port, isolation="process", protocol_timing=timing)
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_port(port, 60, proc)
        time.sleep(2.0)  # (its start-up CPU is not the requests')
        link = psutil.Process(proc.pid)
        cpu0, t0 = sum(link.cpu_times()[:2]), time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            sent = sum(pool.map(lambda _: _node(f"127.0.0.1:{port}", requests), range(clients)))
        cpu, wall = sum(link.cpu_times()[:2]) - cpu0, time.perf_counter() - t0
    finally:
        proc.kill()
        proc.wait()
    scoped = "superlink): " in log.read_text(errors="replace")
    if scoped != (timing == "fast"):
        raise RuntimeError(f"{timing}: the SuperLink's log says scoped={scoped} ({log})")
    return {"requests": sent, "cpu_ms": 1000 * cpu / sent, "wall_ms": 1000 * wall / sent}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--requests", type=int, default=100)
    args = ap.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    rows: dict[str, list[dict[str, float]]] = {"flower": [], "fast": []}
    with tempfile.TemporaryDirectory() as tmp:
        for timing in ("flower", "fast", "flower", "fast"):
            row = measure(timing, args.clients, args.requests, Path(tmp))
            rows[timing].append(row)
            print(
                f"{timing:6s}  {row['requests']:6.0f} requests  "
                f"SuperLink CPU {row['cpu_ms']:.2f} ms/request  wall {row['wall_ms']:.2f} ms"
            )
    flower = statistics.mean(r["cpu_ms"] for r in rows["flower"])
    fast = statistics.mean(r["cpu_ms"] for r in rows["fast"])
    print(f"load after: {os.getloadavg()[0]:.2f}")
    print(
        f"SuperLink CPU per request: flower {flower:.2f} ms, fast {fast:.2f} ms, "
        f"fast / flower = {fast / flower:.2f}"
    )


if __name__ == "__main__":
    main()
