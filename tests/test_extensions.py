"""One of each extension, defined in this test module and registered through the public
API only, then run for real (docs/architecture.md quotes these definitions).

- hooks that run inside node processes (the partitioner, the strategy class) are named
  by dotted path ``tests.test_extensions:...`` in the YAML: the ServerApp and every
  ClientApp import this module, as they would a user's package;
- hooks that run in the controller process (the fault kind, the link kind, the backend,
  the placement policy, the workload) register by name with the registry's decorator
  when this module is imported, before the spec that names them is loaded.

The fleet test (slow, about 50 s) runs one FL run on the user backend (2 nodes, 2
rounds, digits) with the user partitioner, strategy, link kind and fault; the placement
policy runs through a 3 s functions run (about 7 s); the workload through
``run_experiment``.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.serverapp.strategy import FedAvg
from pydantic import Field

from kernel.frozen import Frozen
from nodes.fl.telemetry import Telemetry
from testbed.backends import register_backend
from testbed.backends.local import LocalBackend
from testbed.emulation.kinds import LINK_KINDS, LinkEnds, LinkKind, link_kind, register_link_kind
from testbed.emulation.link import Link, LinkParams, LinkSchedule
from testbed.emulation.proxy import ShapingProxy
from testbed.faults import FaultContext, FaultKind, FaultParams, register_fault
from testbed.functions.placement import Job, Placement, Site, place, policy
from testbed.planner import make_plan
from testbed.runner import run_experiment
from testbed.simulation.links import check_links, client_model
from testbed.simulation.vfaults import VirtualFaults, check_faults
from testbed.spec.loader import SpecError, parse_spec
from testbed.store import RunStore
from testbed.workloads import LibraryWorkload, RunContext, register_workload
from tests.conftest import ROOT, processes_under

# pytest imports this file as ``test_extensions``; the dotted paths below name it
# ``tests.test_extensions``: make both names one module (a user's package has one name)
sys.modules.setdefault("tests.test_extensions", sys.modules[__name__])


# -- a partitioner (nodes/data/partition.py signature; named by dotted path) ------------
def label_ranges(
    y: np.ndarray, num_partitions: int, rng: np.random.Generator, **_: object
) -> list[np.ndarray]:
    """Silo ``i`` holds the ``i``-th range of labels; ranges shrink: ``n - i`` shares each
    (2 silos of digits: labels 0-6 and 7-9)."""
    classes = np.unique(y)
    shares = np.arange(num_partitions, 0, -1)
    cuts = np.round(np.cumsum(shares)[:-1] / shares.sum() * len(classes)).astype(int)
    return [np.flatnonzero(np.isin(y, block)) for block in np.split(classes, cuts)]


# -- a strategy class (a Flower strategy subclass; named by dotted path) ---------------
class MyStrategy(FedAvg):
    """FedAvg with a quorum: a round with fewer than ``quorum`` good train replies keeps
    the global model as it was (Flower's ``Strategy.start`` keeps it on ``None``)."""

    def __init__(self, quorum: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.quorum = quorum

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        if sum(not m.has_error() for m in replies) < self.quorum:
            return None, None
        arrays, metrics = super().aggregate_train(server_round, replies)
        return arrays, metrics


# -- a fault kind (testbed/faults/base.py; one class) ----------------------------------
@register_fault("leave")
class Leave(FaultKind):
    """The node leaves the federation: a clean stop (SIGTERM), it does not come back."""

    Params = FaultParams  # no parameters of its own
    label = "leave (node stops cleanly, never returns)"
    marker = "triangle-left"
    effects = ("node_down",)

    def apply(self, ctx: FaultContext, name: str | None) -> None:
        assert name is not None
        ctx.backend.node(name).stop()
        ctx.node_down(name, "left the federation", self.spec.kind)

    def apply_virtual(self, vf: VirtualFaults, name: str, t: float, rnd: int) -> None:
        vf.down(name, t, None, rnd=rnd, kind=self.spec.kind, why="left the federation")


# -- a link kind (testbed/emulation/kinds.py LinkKind) ---------------------------------
CAP_MBPS = 20.0


@register_link_kind("capped")
class Capped(LinkKind):
    """The userspace proxy with its bandwidth capped at ``CAP_MBPS`` (a metered uplink),
    on the host (local and docker backends) and on the virtual clock (simulation)."""

    def cap(self, params: LinkParams) -> LinkParams:
        return params.replace(bandwidth_mbps=min(params.bandwidth_mbps or CAP_MBPS, CAP_MBPS))

    def build(self, node_name: str, params: LinkParams, ends: LinkEnds, **options: Any) -> Link:
        capped = self.cap(params)
        return ShapingProxy(node_name, ends.server_host, ends.server_port, capped, seed=ends.seed)

    def price(self, schedule: LinkSchedule, **options: Any) -> LinkSchedule:
        return LinkSchedule([(t, self.cap(p)) for t, p in schedule.segments])


# -- a backend (testbed/backends/base.py Backend; here a variant of ``local``) ---------
NICE = 5


@register_backend("local-nice")
class NiceLocalBackend(LocalBackend):
    """The local backend with its client nodes at nice ``NICE`` (the local default: 19)."""

    name = "local-nice"
    node_nice = NICE  # each node's agent sets it before the node starts (no race)

    def node_limits(self) -> dict[str, dict[str, Any]]:
        limits = super().node_limits()
        for name, lim in limits.items():  # observed: the nice values of the node's tree
            lim["nice"] = sorted({p.nice() for p in self.procs.tree(name)})
        return limits


# -- a placement policy (testbed/functions/placement.py Policy) ------------------------
@policy("nearest")
def nearest(jobs: list[Job], sites: list[Site], host_gflops: float) -> dict[str, Placement]:
    """Every function on the CPU of the node nearest the origin (lowest latency)."""
    site = min(sites, key=lambda s: (s.latency_ms, s.name))
    return {
        j.name: Placement(
            site.name,
            "cpu",
            False,
            site.estimate_ms(j.cost, "cpu", host_gflops, j.rate_rps),
            f"nearest node ({site.latency_ms} ms)",
        )
        for j in jobs
    }


# -- a workload (testbed/workloads/base.py Workload; keyed by its section) ----------------
class UploadSpec(Frozen):
    """``workload.upload``: the size of the update every client node sends."""

    model_mb: float = Field(gt=0, description="update size, MB (10**6 bytes)")


@register_workload("upload")
class Upload(LibraryWorkload):
    """The planned upload time of an update over each client node's link, in-process:
    one-way latency plus size over bandwidth, s."""

    spec_model = UploadSpec

    def run(self, ctx: RunContext) -> dict[str, Any]:
        spec = ctx.experiment.workload.section_spec()
        assert isinstance(spec, UploadSpec)
        times: dict[str, float] = {}
        for node in ctx.plan.clients:
            p = node.uplink.params()
            rate = p.bandwidth_mbps or float("inf")
            times[node.name] = p.latency_ms / 1e3 + spec.model_mb * 8 / rate
            ctx.metric({"name": "upload_s", "value": times[node.name], "node": node.name})
        return {"slowest": max(times, key=times.__getitem__), "upload_s": times}


# == tests ==============================================================================
UPLOAD_YAML = """\
name: upload
seed: 1
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, count: 2}
    - {id: fog, tier: fog}
links:
  defaults:
    edge-cloud: {latency_ms: 20, bandwidth_mbps: 10}
    fog-cloud: {latency_ms: 5, bandwidth_mbps: 100}
workload:
  upload: {model_mb: 2.5}
"""


def test_every_extension_is_registered_by_name() -> None:
    from nodes.data.partition import PARTITIONERS
    from nodes.fl.strategies import STRATEGIES
    from testbed.backends import get_backend
    from testbed.faults import FAULT_KINDS, schema
    from testbed.functions.placement import POLICIES
    from testbed.workloads import WORKLOADS

    assert FAULT_KINDS["leave"] is Leave and schema()["leave"]["label"] == Leave.label
    assert LINK_KINDS["capped"] is Capped
    assert get_backend("local-nice") is NiceLocalBackend
    assert POLICIES["nearest"] is nearest
    assert WORKLOADS["upload"] is Upload
    assert PARTITIONERS["tests.test_extensions:label_ranges"] is label_ranges
    assert STRATEGIES["tests.test_extensions:MyStrategy"] is MyStrategy


def test_docs_architecture_quotes_this_module() -> None:
    """Every code example of docs/architecture.md is a verbatim excerpt of this file."""
    import re

    doc = (ROOT / "docs" / "architecture.md").read_text()
    blocks = re.findall(r"```(?:python|yaml)\n(.*?)```", doc, flags=re.S)
    assert len(blocks) >= 13  # 7 extension points: code, and YAML for 6 of them
    source = Path(__file__).read_text()
    assert [b for b in blocks if b not in source] == []


def test_docs_architecture_cites_what_exists() -> None:
    """Every ``file::name`` of docs/architecture.md names a function or class (or a
    method of one) defined in that file, and every file it names exists."""
    import ast
    import re

    doc = (ROOT / "docs" / "architecture.md").read_text()
    refs = re.findall(r"([\w/]+\.py)?::([\w.]+)", doc)
    assert len(refs) >= 20
    missing, last = [], ""
    for path, name in refs:
        last = path or last
        tree = ast.parse((ROOT / last).read_text())
        defs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        outer, _, inner = name.partition(".")
        node = defs.get(outer)
        if node is None or (inner and inner not in {getattr(n, "name", "") for n in node.body}):
            missing.append(f"{last}::{name}")
    assert missing == []
    files = set(re.findall(r"\b((?:testbed|nodes|tests|ui|experiments)/[\w/]+\.(?:py|yaml))", doc))
    assert [f for f in sorted(files) if not (ROOT / f).is_file()] == []


def test_a_fault_kind_is_named_in_the_yaml_by_name_or_dotted_path() -> None:
    from testbed.faults import FAULT_KINDS

    for kind in ("leave", "tests.test_extensions:Leave"):
        exp = parse_spec(FL_YAML.replace("kind: leave", f"kind: {kind}"))
        assert FAULT_KINDS[exp.faults[0].kind] is Leave
        check_faults(exp.faults)  # --backend simulation takes it: it has a virtual effect
        vf = VirtualFaults(exp.faults, {"edge-1": "edge", "edge-2": "edge"}, 0, Telemetry(None))
        vf.round_started(2, 7.0, 10.0)  # at_round 2, phase before: gone from virtual 7 s on
        assert vf.of("edge-2").down_reason(6.9, 6.9) is None
        assert vf.of("edge-2").down_reason(1e9, 1e9) == "left the federation"
        assert vf.of("edge-1").down == []
    with pytest.raises(SpecError, match="must be a subclass of testbed.faults.FaultKind"):
        parse_spec(FL_YAML.replace("kind: leave", "kind: tests.test_extensions:nearest"))
    for key in ("speed", "factor"):  # a key no kind has, another kind's parameter
        with pytest.raises(SpecError, match=rf"faults\.0\.{key}: not a parameter of fault kind"):
            parse_spec(FL_YAML.replace("at_round: 2}", f"at_round: 2, {key}: 2}}"))


def test_a_workload_from_here_runs_through_run_experiment(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    res = run_experiment(parse_spec(UPLOAD_YAML), store)
    assert res.status == "completed", res.summary
    got = {m.node: m.value for m in store.metrics(res.run_id, "upload_s")}
    want = {"edge-1": 0.020 + 20 / 10, "edge-2": 0.020 + 20 / 10, "fog": 0.005 + 20 / 100}
    assert got.keys() == want.keys()  # 2.5 MB = 20 Mbit over 10 and 100 Mbit/s
    assert all(got[n] == pytest.approx(want[n], rel=1e-12) for n in want)
    assert res.summary["slowest"] == "edge-1" and store.run(res.run_id).status == "completed"
    with pytest.raises(SpecError, match=r"workload\.upload\.model_mb"):
        parse_spec(UPLOAD_YAML.replace("2.5", "-1"))


def test_the_partitioner_splits_by_label_ranges() -> None:
    y = np.repeat(np.arange(10), 3)
    a, b = label_ranges(y, 2, np.random.default_rng(0))
    assert set(y[a]) == set(range(7)) and set(y[b]) == {7, 8, 9}
    assert sorted([*a, *b]) == list(range(len(y)))


def test_the_placement_policy_picks_the_nearest_node() -> None:
    from testbed.functions.experiment import origin_links
    from testbed.functions.placement import Cost

    exp = parse_spec(UPLOAD_YAML)
    sites = [
        Site(name, tier, prof, link.latency_ms, link.bandwidth_mbps)
        for name, (tier, prof, link) in origin_links(exp, "edge").items()
    ]
    job = Job("f", "cpu", 100.0, Cost(wall_s=0.01, cpu_s=0.01, request_bytes=1, response_bytes=1))
    got = place("nearest", [job], sites, 10.0)["f"]
    assert got.node == "edge-1" and got.backend == "cpu" and got.reason.startswith("nearest")


def test_the_link_kind_caps_what_crosses_it_locally_and_on_the_virtual_clock() -> None:
    """256 KB through a ``capped`` link whose YAML bandwidth is 1000 Mbit/s take at least
    the time the cap allows, and the simulation prices the same link at that time."""
    node = make_plan(parse_spec(FL_YAML)).clients[0]  # links.mode: capped, 1000 Mbit/s, 5 ms
    check_links(parse_spec(FL_YAML))  # the simulation's preflight: capped is priced
    payload = os.urandom(256 * 1024)
    virtual_s = client_model(node, "capped").link.transfer(0.0, len(payload))
    assert virtual_s == pytest.approx(0.005 + len(payload) * 8 / (CAP_MBPS * 1e6))
    got = bytearray()
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def sink() -> None:
        conn, _ = server.accept()
        with conn:
            while chunk := conn.recv(65536):
                got.extend(chunk)

    reader = threading.Thread(target=sink, daemon=True)
    reader.start()
    ends = LinkEnds(index=0, seed=0, server_host="127.0.0.1", server_port=port)
    link = link_kind("capped").build("n", node.uplink.params(), ends)
    link.start()
    try:
        assert link.params.bandwidth_mbps == CAP_MBPS
        host, _, lport = link.connect_address(port).rpartition(":")
        t0 = time.monotonic()
        with socket.create_connection((host, int(lport))) as c:
            c.sendall(payload)
        reader.join(timeout=30)
        elapsed = time.monotonic() - t0
    finally:
        link.stop()
        server.close()
    assert bytes(got) == payload
    # no sooner than the cap allows (a busy host only makes it later; 0.8: the proxy's
    # token bucket lets its depth, 0.02 s of the rate, through at once)
    assert 0.8 * virtual_s <= elapsed, (elapsed, virtual_s)
    assert link.counters()["bytes_up"] == len(payload)


FL_YAML = """\
name: extensions
seed: 3
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, count: 2}
links:
  mode: capped
  defaults:
    edge-cloud: {latency_ms: 5, bandwidth_mbps: 1000}
workload:
  fl:
    rounds: 2
    dataset: {name: digits}
    partitioner: {name: tests.test_extensions:label_ranges}
    strategy: {name: tests.test_extensions:MyStrategy, params: {quorum: 2}}
    evaluation: {federated: none, per_silo: true}
    round_timeout_s: 20
faults:
  - {kind: leave, node: edge-2, at_round: 2}
"""


@pytest.mark.slow
def test_user_partitioner_strategy_fault_link_and_backend_on_a_real_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # this module must be importable by the ServerApp and ClientApps, as a user's package
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    store = RunStore(tmp_path)
    res = run_experiment(parse_spec(FL_YAML), store, backend="local-nice")
    assert res.status == "completed", res.summary
    events = store.events(res.run_id)
    # partitioner: edge-1 holds labels 0-6, edge-2 labels 7-9 (the server's silo census)
    held = {e.node: np.flatnonzero(e.data_dict["counts"]).tolist()
            for e in events if e.kind == "silo_classes"}  # fmt: skip
    assert held == {"edge-1": list(range(7)), "edge-2": [7, 8, 9]}
    # fault: edge-2 left before round 2 and trained no more; edge-1 trained both rounds
    down = [(e.round, e.node, e.data_dict["reason"]) for e in events if e.kind == "node_down"]
    assert down == [(2, "edge-2", "left the federation")]  # (it acts in round 2)
    trained = {(m.round, m.node) for m in store.metrics(res.run_id, "train_loss")}
    assert trained == {(1, "edge-1"), (1, "edge-2"), (2, "edge-1")}
    status = {(s.round, s.node): s.status for s in store.round_status(res.run_id)}
    assert status[(2, "edge-2")] in ("failed", "excluded")
    # strategy: round 2 had one good reply < quorum 2, so the global model was kept
    acc = {m.round: m.value for m in store.metrics(res.run_id, "global_acc")}
    assert sorted(acc) == [0, 1, 2] and acc[2] == acc[1] != acc[0]
    # backend: every process of each node ran at the lower priority
    nice = {e.node: e.data_dict["nice"] for e in events if e.kind == "node_limits"}
    assert nice == {"edge-1": [NICE], "edge-2": [NICE]}
    # link kind: the nodes' traffic crossed the capped links
    up = {m.node: m.value for m in store.metrics(res.run_id, "link_bytes_up")}
    assert set(up) == {"edge-1", "edge-2"} and all((v or 0) > 0 for v in up.values())
    assert processes_under(tmp_path) == []


FUNCTIONS_YAML = """\
name: nearest
seed: 2
fleet:
  nodes:
    - {id: fog, tier: fog, profile: fog-server}
    - {id: cloud, tier: cloud, profile: cloud-gpu}
links:
  defaults:
    edge-fog: {latency_ms: 15}
    edge-cloud: {latency_ms: 30}
workload:
  functions:
    policy: nearest
    duration_s: 3
    origin: edge
    functions:
      - {name: idle, module: idle, arrivals: {rate_rps: 3}}
"""


@pytest.mark.slow  # a real functions fleet for ~10-25 s: in `make test-e2e`
def test_the_placement_policy_places_a_functions_run(tmp_path: Path) -> None:
    """The functions workload places with the user policy: every request goes to the fog
    node's CPU (the nearest), through its 15 ms link."""
    store = RunStore(tmp_path)
    res = run_experiment(parse_spec(FUNCTIONS_YAML), store)
    assert res.status == "completed", res.summary
    rows = store.tagged_metrics(res.run_id)
    placed = [(r.tags["site"], r.tags["reason"]) for r in rows if r.name == "on_gpu"]
    assert placed == [("fog", "placement: nearest node (15.0 ms)")]
    served = [r for r in rows if r.name == "e2e_ms"]
    assert served and {(r.tags["site"], r.tags["backend"]) for r in served} == {("fog", "cpu")}
    assert all((r.value or 0) >= 2 * 15 for r in served)  # a round trip over the link
    assert processes_under(tmp_path) == []
