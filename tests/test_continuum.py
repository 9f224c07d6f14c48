"""Several workloads in one spec: validation (paths and lines), planning, the store's
workload tag, and a link shared by two workloads of one node (no fleet started)."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from testbed.emulation import relay
from testbed.emulation.link import LinkParams
from testbed.emulation.proxy import ShapingProxy
from testbed.emulation.relay import DEPTH_S, DOWN, UP
from testbed.planner import make_plan
from testbed.spec.loader import SpecError, parse_spec
from testbed.store import RunStore
from tests.test_links import Server, Sink, payload, send_all

FLEET = """\
name: two
fleet:
  nodes:
    - {id: cloud, tier: cloud, profile: cloud-gpu}
    - {id: fog, tier: fog, profile: fog-gpu}
    - {id: edge, tier: edge, count: 2}
"""


def problems(text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "two.yaml")
    return [(p.line, p.path, p.message) for p in info.value.problems]


def test_one_workload_spec_plans_as_before() -> None:
    exp = parse_spec(FLEET + "workload:\n  fl: {rounds: 1}\n")
    assert exp.workload.sections == ["fl"] and exp.workload.section == "fl"
    plan = make_plan(exp)
    assert [(n.name, n.role, n.partition_id) for n in plan.nodes] == [
        ("cloud", "server", None),
        ("fog", "client", 0),
        ("edge-1", "client", 1),
        ("edge-2", "client", 2),
    ]
    assert all(n.workloads == ("fl",) for n in plan.nodes)


def test_two_workloads_each_on_its_nodes() -> None:
    exp = parse_spec(
        FLEET
        + """\
workload:
  fl: {rounds: 1, nodes: [cloud, edge]}
  functions:
    nodes: [edge-1, fog]
    functions: [{name: mm, module: matmul}]
"""
    )
    assert exp.workload.sections == ["fl", "functions"]
    plan = make_plan(exp)
    by = {n.name: n for n in plan.nodes}
    assert by["edge-1"].workloads == ("fl", "functions") and by["fog"].workloads == ("functions",)
    assert by["fog"].role == "none"  # not an FL client: FL does not run there
    assert [n.name for n in plan.clients] == ["edge-1", "edge-2"]
    assert [by[n].partition_id for n in ("edge-1", "edge-2")] == [0, 1]
    assert by["edge-1"].uplink == exp.links.for_node("edge-1", exp.fleet.nodes[2], "cloud")


def test_a_workload_naming_an_unknown_node_is_an_error_with_path_and_line() -> None:
    text = FLEET + "workload:\n  fl:\n    rounds: 1\n    nodes:\n      - cloud\n      - fog\n"
    [(line, path, msg)] = problems(text + "      - edge-9\n")
    assert (line, path) == (13, "workload.fl.nodes.2")
    assert "'edge-9' is not defined in fleet.nodes" in msg and "edge-1" in msg


def test_two_workloads_claiming_one_gpu_slot_is_an_error_with_path_and_line() -> None:
    text = (
        FLEET
        + """\
workload:
  fl:
    rounds: 1
    gpu_slots: {fog: 1}
  functions:
    functions:
      - {name: mm, module: matmul, mode: gpu, node: fog}
"""
    )
    [(line, path, msg)] = problems(text)
    assert (line, path) == (13, "workload.functions.functions.0.node")
    assert "2 GPU slots of node 'fog' claimed" in msg and "workload.fl.gpu_slots.fog" in msg
    # the cloud GPU has 4 slots: the same two claims fit there
    ok = text.replace("{fog: 1}", "{cloud: 1}").replace("node: fog", "node: cloud")
    assert parse_spec(ok).workload.sections == ["fl", "functions"]


def test_gpu_slots_on_a_node_without_gpu_and_in_process_workloads_beside_others() -> None:
    text = FLEET + "workload:\n  fl:\n    rounds: 1\n    gpu_slots: {edge-1: 1}\n"
    [(line, path, msg)] = problems(text)
    assert (line, path) == (10, "workload.fl.gpu_slots.edge-1") and "but it has 0" in msg
    text = FLEET + "workload:\n  fl: {rounds: 1}\n  compress: {}\n"
    found = problems(text)
    assert any(p == "workload.compress" and "cannot share a run" in m for _l, p, m in found)


def test_old_store_gets_the_workload_column_and_rows_are_tagged(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "testbed.db")  # a store from before the tag
    db.execute(
        "CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, ts REAL,"
        " round INTEGER, node TEXT, name TEXT NOT NULL, value REAL, tags TEXT)"
    )
    db.execute(
        "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL,"
        " ts REAL NOT NULL, kind TEXT NOT NULL, round INTEGER, node TEXT, data TEXT)"
    )
    db.execute("INSERT INTO metrics (run_id, ts, name, value) VALUES ('old', 1, 'acc', 0.5)")
    db.commit()
    db.close()
    store = RunStore(tmp_path)
    assert [r.workload for r in store.workload_metrics("old")] == [None]
    fl, fleet = store.tagged("fl"), store.tagged(None)
    fl.add_metric("r", "global_acc", 0.9, round=1)
    fl.add_event("r", "round_end", round=1)
    fleet.add_event("r", "node_down", node="edge-1")
    assert [(r.name, r.workload) for r in store.workload_metrics("r")] == [("global_acc", "fl")]
    assert sorted(store.event_workloads("r").values(), key=str) == [None, "fl"]


def test_a_route_through_a_nodes_link_shares_its_bandwidth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two servers on one node behind one link: bytes to a route go down the link (the
    node's own traffic goes up), and two transfers down at once share its one rate.

    Which token bucket each relayed byte paid into is counted (a spy on
    :meth:`Bucket.consume`): full duplex is one bucket each way. Times are judged only
    from below, where the bucket's physics bounds them (a busy host only adds time): a
    bucket of depth ``DEPTH_S`` lets ``n`` bytes through no sooner than ``n / rate -
    DEPTH_S``."""
    paid: dict[int, int] = {}  # id(bucket) -> bytes it let through
    consume = relay.Bucket.consume

    async def counted(self: relay.Bucket, n: int, loop: asyncio.AbstractEventLoop) -> None:
        if self in proxy._shaper.buckets.values():  # (this link's; a bucket per connection
            paid[id(self)] = paid.get(id(self), 0) + n  # would not count: a failure below)
        await consume(self, n, loop)

    monkeypatch.setattr(relay.Bucket, "consume", counted)
    params = LinkParams(bandwidth_mbps=20)
    size = 750_000  # 0.3 s alone at 20 Mbps
    up_server, route_server = Server(Sink()), Server(Sink())
    proxy = ShapingProxy("edge-1", "127.0.0.1", up_server.port, params, seed=1)
    port = proxy.start()
    times: dict[str, float] = {}

    def together(targets: dict[str, int]) -> float:
        def go(key: str, p: int) -> None:
            times[key] = send_all(p, payload(size, seed=2))[0]

        t0 = time.monotonic()
        threads = [threading.Thread(target=go, args=kv) for kv in targets.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.monotonic() - t0

    try:
        buckets = proxy._shaper.buckets  # (per direction; counted by identity below)
        up, down = id(buckets[UP]), id(buckets[DOWN])
        r1, r2 = proxy.add_route(route_server.port), proxy.add_route(route_server.port)
        alone, digest = send_all(r1, payload(size))
        assert digest == hashlib.sha256(payload(size)).digest()
        assert proxy.counters()["bytes_down"] == size  # towards the node
        assert paid == {down: size, up: 32}, paid  # the route's bytes paid the downlink
        paid.clear()
        opposite = together({"up": port, "down": r1})  # full duplex: one bucket each way
        # each way its own bucket (the 32-byte digests answer the other way)
        assert up != down and paid == {up: size + 32, down: size + 32}, paid
        paid.clear()
        same_way = together({"a": r1, "b": r2})
        assert paid == {down: 2 * size, up: 2 * 32}, paid  # both down: one bucket
    finally:
        proxy.stop()
        up_server.close()
        route_server.close()
    ideal = size * 8 / 20e6
    assert set(times) == {"up", "down", "a", "b"}
    # shaped: no sooner than the rate lets (a busy host only makes them later)
    assert alone >= ideal - DEPTH_S, (alone, ideal)
    assert min(times["up"], times["down"]) >= ideal - DEPTH_S, (opposite, times)
    # sharing one rate: the two together no sooner than both at that rate
    assert same_way >= 2 * ideal - DEPTH_S, (same_way, times)


OFFLOAD = """\
  semantic_offload:
    devices: [ue-1]
    fog: fog
    requests: 2
"""
UE = "    - {id: ue, tier: edge, count: 2}\n"
UE_LINK = """\
links:
  nodes:
    ue-1: {kind: mmwave, mmwave: {snr_db: 20}}
"""


def test_semantic_offload_runs_beside_fl_and_functions_on_its_own_nodes() -> None:
    text = (FLEET + UE + UE_LINK + "workload:\n  fl: {rounds: 1, nodes: [cloud, fog, edge]}\n"
            "  functions:\n    nodes: [fog]\n    functions: [{name: i, module: idle}]\n" + OFFLOAD)
    exp = parse_spec(text)
    assert exp.workload.sections == ["fl", "functions", "semantic_offload"]
    by = {n.name: n for n in make_plan(exp).nodes}
    # the fog hosts all three (its CPUs shared); the device only the offload, on mmWave
    assert by["fog"].workloads == ("fl", "functions", "semantic_offload")
    assert by["ue-1"].workloads == ("semantic_offload",) and by["ue-1"].role == "none"
    assert by["ue-2"].workloads == () and by["ue-1"].uplink.kind_in("proxy") == "mmwave"
    offload = exp.workload.model_for("semantic_offload")
    assert offload.nodes == ["ue-1", "fog"]  # its nodes: its devices and its fog


def test_what_semantic_offload_cannot_share_is_an_error_with_path_and_line() -> None:
    head = FLEET + UE + UE_LINK + "workload:\n"
    # a device that FL also runs on (FL's nodes: every node by default): two links
    [(line, path, msg)] = problems(head + "  fl: {rounds: 1}\n" + OFFLOAD)
    assert (line, path) == (14, "workload.semantic_offload.devices.0")
    assert "'ue-1' also runs ['fl']" in msg and "one emulated link" in msg
    # nodes given without its devices, and a GPU slot the functions' pinned gpu holds
    own = "    nodes: [fog]\n    gpu_slots: {fog: 1}\n"
    text = head + OFFLOAD.replace("    requests: 2\n", own)
    text += "  functions:\n    nodes: [fog]\n    functions:\n"
    text += "      - {name: mm, module: matmul, mode: gpu, node: fog}\n"
    found = {(p, m.split(";")[0]) for _l, p, m in problems(text)}
    assert ("workload.semantic_offload.devices.0",
            "node 'ue-1' is not one of this workload's nodes (['fog'])") in found
    assert any(p == "workload.semantic_offload.gpu_slots.fog" and "2 GPU slots of node 'fog'"
               in m and "workload.functions.functions.0.node" in m for p, m in found), found
    # an mmWave link on a pair with no radio side (the fog's) beside the others
    bad = head.replace("ue-1: {kind: mmwave", "fog: {kind: mmwave") + OFFLOAD
    assert any(p == "links.nodes.fog.kind" and "needs a radio side" in m
               for _l, p, m in problems(bad))


def test_functions_origin_beside_fl_is_the_fl_servers_tier_or_an_error() -> None:
    from testbed.spec.hosting import links_lead_to

    head = FLEET + "links:\n  defaults:\n    edge-cloud: {latency_ms: 20}\n"
    head += "    edge-fog: {latency_ms: 3}\n"
    fns = "  functions:\n    nodes: [edge-1]\n{origin}    functions: [{{name: i, module: idle}}]\n"
    fl = "workload:\n  fl: {rounds: 1}\n"
    [(line, path, msg)] = problems(head + fl + fns.format(origin="    origin: fog\n"))
    assert (line, path) == (15, "workload.functions.origin")
    assert "'fog'" in msg and "FL server's tier ('cloud')" in msg and "origin: cloud" in msg
    for origin in ("", "    origin: cloud\n"):  # left out, or the FL server's: honoured
        exp = parse_spec(head + fl + fns.format(origin=origin))
        edge1 = next(n for n in make_plan(exp).nodes if n.name == "edge-1")
        assert links_lead_to(exp) == "cloud" and edge1.uplink.latency_ms == 20
    alone = parse_spec(head + "workload:\n" + fns.format(origin="    origin: fog\n"))
    edge1 = next(n for n in make_plan(alone).nodes if n.name == "edge-1")
    assert links_lead_to(alone) == "fog" and edge1.uplink.latency_ms == 3
    default = parse_spec(head + "workload:\n" + fns.format(origin=""))
    assert links_lead_to(default) == "edge"  # functions alone: the edge, as before


def test_a_workloads_program_runs_beside_a_nodes_other_processes(tmp_path: Path) -> None:
    """Programs of three workloads on one node get their own process keys; a crash of
    the node kills them all (no key is overwritten, no process leaks)."""
    import sys

    from testbed.backends.local import LocalBackend

    exp = parse_spec(FLEET + UE + UE_LINK + "workload:\n" + OFFLOAD)
    backend = LocalBackend(make_plan(exp), tmp_path, warm=False)
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    try:
        keys = [backend.start_processes({"fog": sleep})["fog"] for _ in range(3)]
        assert keys == ["fog", "fog.svc", "fog.svc2"]
        assert backend.processes_of("fog") == keys and all(backend.alive()[k] for k in keys)
        backend.node("fog").kill()
        assert not any(backend.alive()[k] for k in keys)
    finally:
        backend.stop()


def test_the_fog_channel_follows_each_devices_mmwave_snr_schedule() -> None:
    """Each device asks the fog for its link's modelled SNR of the time (its schedule on
    the fleet's clock); a set ``snr_db`` of the section holds for all."""
    from nodes.semantic.device import snr_now
    from testbed.workloads.semantic_offload import device_links, snr_steps

    link = UE_LINK.replace("{snr_db: 20}", "{snr_db: 20, schedule: [{at_s: 70, snr_db: 5}, "
                           "{at_s: 100, speed_mps: 9}]}")
    link += "    ue-2: {kind: mmwave, mmwave: {distance_m: 50}}\n"
    exp = parse_spec(FLEET + UE + link + "workload:\n" + OFFLOAD.replace("[ue-1]", "[ue-1, ue-2]"))
    spec = exp.workload.semantic_offload

    class Ctx:  # what device_links reads
        experiment = exp

    links = device_links(Ctx(), spec)  # type: ignore[arg-type]
    steps = snr_steps(spec, links)
    assert steps["ue-1"] == [[0.0, 20.0], [70.0, 5.0], [100.0, 5.0]]
    assert len(steps["ue-2"]) == 1 and 0 < steps["ue-2"][0][1] < 60  # from its distance
    assert snr_steps(spec.model_copy(update={"snr_db": 12.0}), links) == {}
    now = time.time()
    assert snr_now(steps["ue-1"], now - 80) == 5.0 and snr_now(steps["ue-1"], now - 10) == 20.0
    assert snr_now([], now) is None


def test_the_timeline_draws_semantic_offloads_key_metrics_beside_the_others(
    tmp_path: Path,
) -> None:
    from testbed.controller.timeline import run_timeline

    store = RunStore(tmp_path)
    fl, off = store.tagged("fl"), store.tagged("semantic_offload")
    fl.add_event("r", "fleet_ready", ts=100.0)
    fl.add_metric("r", "global_acc", 0.5, round=1, ts=110.0)
    off.add_metric("r", "offload_e2e_ms", 10.5, node="ue-1", ts=112.0)
    off.add_metric("r", "offload_task_acc", 0.75, node="ue-1", ts=112.0)
    off.add_metric("r", "accuracy", 0.9, ts=130.0)  # a summary row: not a key metric
    tl = run_timeline(store, "r", ["fl", "semantic_offload"], {"ue-1": ["semantic_offload"]})
    assert tl["workloads"][1] == {"section": "semantic_offload",
                                  "key_metrics": ["offload_e2e_ms", "offload_task_acc"]}
    drawn = {(m["workload"], m["name"], m["t_s"]) for m in tl["metrics"]}
    assert drawn == {("fl", "global_acc", 10.0), ("semantic_offload", "offload_e2e_ms", 12.0),
                     ("semantic_offload", "offload_task_acc", 12.0)}
