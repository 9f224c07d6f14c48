"""``links.mode: netem`` with ``--backend docker`` (``make test-docker``, root): kernel
shaping in each node container's own network namespace.

- A link between two containers of the image (each in its own namespace, the testbed's
  router between them): a transfer takes the time its tbf rate says, the kernel counts
  its bytes, and a blackhole partition stops it.
- A fleet: every node container has its own namespace with the link's veth in it; a
  partition longer than the round deadline makes the node miss the round, an outage
  restarts the container in a new namespace and the link is plumbed into it again
  (bytes keep counting), and a straggler cuts the container's CPU quota live (seen
  with docker inspect) and gives it back after its round.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container

from testbed.backends.docker import NODE_LABEL, RUN_LABEL, image_name
from testbed.emulation.container_net import ContainerNetemLink, attach_netns
from testbed.emulation.link import LinkParams
from testbed.reaper import run_namespaces
from testbed.store import RunStore
from tests.docker.conftest import docker_run, labelled_containers

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="netem needs root (CAP_NET_ADMIN)")

PAYLOAD = 2_000_000  # bytes the server container sends
RATE_MBPS = 8.0
RATE_TOL = 0.25  # named tolerance: relative error of a transfer's time against its rate
PORT = 7777
SERVER = f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PORT})); s.listen(4)
while True:
    c, _ = s.accept(); c.sendall(b"x" * {PAYLOAD}); c.close()
"""
CLIENT = """
import socket, sys, time
t0 = time.monotonic(); s = socket.create_connection(("{addr}", {port}), timeout=60)
n = 0
while (b := s.recv(65536)):
    n += len(b)
print(n, round(time.monotonic() - t0, 3))
"""


def _container(client: docker.DockerClient, code: str, gate: Path | None, tag: str) -> Container:
    """A container of the image in a namespace of its own running ``code`` (after the
    file ``gate`` appears, when given); labelled so the session's sweep removes it."""
    run = f"python -c {subprocess.list2cmdline([code])}"
    if gate is not None:
        run = f"while [ ! -e {gate} ]; do sleep 0.05; done; {run}"
    return client.containers.run(
        image_name(),
        ["sh", "-c", run],
        detach=True,
        network_mode="none",
        labels={RUN_LABEL: f"netem-test-{tag}", NODE_LABEL: "probe"},
        volumes={str(gate.parent): {"bind": str(gate.parent), "mode": "rw"}} if gate else {},
    )


def _pid(c: Container) -> int:
    c.reload()
    return int(c.attrs["State"]["Pid"])


def _fetch(client: docker.DockerClient, link: ContainerNetemLink, gate: Path, tag: str) -> str:
    """Run a client container that downloads the payload across ``link``; its output."""
    gate.unlink(missing_ok=True)
    c = _container(client, CLIENT.format(addr=link.server_addr, port=PORT), gate, tag)
    try:
        link.attach(_pid(c))
        gate.touch()
        c.wait(timeout=60)
        return c.logs().decode().strip()
    finally:
        c.remove(force=True)


def test_a_link_into_containers_is_shaped_counted_and_cut(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    tag = secrets.token_hex(3)
    srv_ns = f"ct-{tag}-srv"
    server = _container(engine, SERVER, None, tag)
    link = ContainerNetemLink(f"{tag}n0", LinkParams(bandwidth_mbps=RATE_MBPS), 0, 1, srv_ns)
    try:
        attach_netns(srv_ns, _pid(server))
        link.start()
        n, secs = _fetch(engine, link, tmp_path / "gate", tag).split()
        assert int(n) == PAYLOAD
        expected = PAYLOAD * 8 / (RATE_MBPS * 1e6)  # 2.0 s at 8 Mbit/s
        assert float(secs) == pytest.approx(expected, rel=RATE_TOL), secs
        counted = link.counters()
        assert counted["bytes_down"] >= PAYLOAD  # the kernel's count on the router
        # a second client container (a restart: new namespace) adds to the same counters
        _fetch(engine, link, tmp_path / "gate", tag)
        again = link.counters()
        assert again["bytes_down"] >= counted["bytes_down"] + PAYLOAD
        assert again["attaches"] == 2
        link.partition(True)  # blackhole: nothing crosses, the client times out
        gate = tmp_path / "gate"
        gate.unlink(missing_ok=True)
        code = CLIENT.format(addr=link.server_addr, port=PORT).replace("timeout=60", "timeout=3")
        c = _container(engine, code, gate, tag)
        link.attach(_pid(c))
        gate.touch()
        assert c.wait(timeout=30)["StatusCode"] != 0
        c.remove(force=True)
        assert link.counters()["dropped_partition"] > 0
    finally:
        link.stop()
        subprocess.run(["ip", "netns", "del", srv_ns], capture_output=True)
        server.remove(force=True)
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ct-{tag}" not in ns


FLEET = """\
name: docker-netem
seed: 3
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, profile: {cpu_cores: 1, memory_mb: 2048}, count: 2}
links:
  mode: netem
  defaults:
    edge-cloud: {bandwidth_mbps: 20, latency_ms: 10}
workload:
  fl: {rounds: 4, local_epochs: 1, round_timeout_s: 12}
faults:
  - {kind: partition, node: edge-1, at_round: 2, duration_s: 16}
  - {kind: straggler, node: edge-2, at_round: 2, rounds: 1, factor: 4.0}
  - {kind: outage, node: edge-2, at_round: 4, duration_s: 4}
"""
QUOTA = 100_000  # the profile's 1 core per 100 ms period
THROTTLED = QUOTA // 4  # straggler x4


def _quota(client: docker.DockerClient, node: str) -> int | None:
    found = client.containers.list(filters={"label": f"{NODE_LABEL}={node}"})
    return int(found[0].attrs["HostConfig"]["CpuQuota"]) if found else None


def test_a_fleet_over_netem_links_in_containers(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    spec = tmp_path / "netem.yaml"
    spec.write_text(FLEET)
    out = tmp_path / "runs"
    proc = docker_run(spec, out)
    quotas: set[int] = set()
    try:
        while proc.poll() is None:  # docker inspect of edge-2's CPU quota as it runs
            q = _quota(engine, "edge-2")
            if q is not None:
                quotas.add(q)
            time.sleep(0.5)
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert {QUOTA, THROTTLED} <= quotas, quotas  # throttled live, then given back
    store = RunStore(out)
    run = store.runs()[0]
    events = store.events(run.run_id)
    ready = next(e.data_dict for e in events if e.kind == "fleet_ready")
    assert ready["links_mode"] == "netem", ready
    status = {(r, n): s for r, n, s, _w in store.round_status(run.run_id)}
    assert status[(1, "edge-1")] == "completed" and status[(2, "edge-1")] != "completed"
    assert all(status[(r, "edge-2")] == "completed" for r in (1, 2, 3)), status
    seen = {(e.kind, e.node) for e in events}
    assert {("link_partitioned", "edge-1"), ("link_healed", "edge-1")} <= seen
    assert {("node_down", "edge-2"), ("node_restarted", "edge-2")} <= seen
    throttled = next(e.data_dict for e in events if e.kind == "cpu_throttled")
    assert throttled["applied"] == f"docker cpu_quota={THROTTLED} per {QUOTA}"
    restored = next(e for e in events if e.kind == "cpu_restored")
    assert restored.round == 3
    assert restored.data_dict["applied"] == f"docker cpu_quota={QUOTA} per {QUOTA}"
    assert restored.data_dict["periods"] > 0  # the engine's CFS counters while throttled
    up = {n: v for _r, n, _k, v, _t in store.metrics(run.run_id, "link_bytes_up")}
    assert up["edge-1"] > 100_000 and up["edge-2"] > 100_000  # counted by the kernel
    assert run_namespaces(out / run.run_id) == []  # the run's ct-<tag>-* are gone
    assert labelled_containers(engine) == []
