"""A million virtual clients: per-client state made on first use, by seeded rules, equal
to what an eager draw gives (no Ray; docs/simulation.md, "A million virtual clients")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nodes.data.partition import EqualParts
from nodes.fl.identity import NodeNames, node_names
from testbed.capacity import FleetTooLarge, HostCapacity, check_fits
from testbed.chaos import finalize_statuses
from testbed.planner import ProfileRule, make_plan
from testbed.simulation.availability import Availability, read_intervals
from testbed.simulation.links import client_model
from testbed.simulation.population import ClientPopulation, PopulationClients
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

ROOT = Path(__file__).resolve().parents[2]

MILLION = """\
name: m1
seed: 5
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - id: phone
      tier: edge
      count: 1000000
      profile_mix: {rpi5: 0.5, jetson-orin-nano: 0.3, host: 0.2}
    - {id: pi, tier: fog, profile: rpi5, count: 3}
links:
  defaults:
    edge-cloud: {bandwidth_mbps: 20, latency_ms: 30}
  nodes:
    phone-77: {bandwidth_mbps: 1, latency_ms: 200}
    phone-999999: {bandwidth_mbps: 2}
workload:
  fl:
    dataset: {name: synthetic, num_samples: 2000000}
    model: {name: mlp}
    strategy: {name: fedavg, params: {fraction_train: 0.001, fraction_evaluate: 0.001}}
    rounds: 2
"""

#: Client indices looked at: both ends, the replicas with links of their own, the
#: group boundary (the last phone, the first pi) and a few in between.
PIDS = (0, 1, 76, 77, 123_456, 500_000, 999_998, 999_999, 1_000_000, 1_000_002)


@pytest.fixture(scope="module")
def million():  # type: ignore[no-untyped-def]
    exp = parse_spec(MILLION)
    return exp, make_plan(exp)


def test_plan_of_a_million_holds_groups_not_nodes(million) -> None:  # type: ignore[no-untyped-def]
    _, plan = million
    assert len(plan.nodes) == 1_000_004 and plan.num_clients == 1_000_003
    assert plan.groups is not None and len(plan.groups) == 3
    assert plan.server.name == "cloud"
    names = plan.client_names()
    assert isinstance(names, NodeNames) and len(names) == 1_000_003
    assert [names[p] for p in (0, 999_999, 1_000_000)] == ["phone-1", "phone-1000000", "pi-1"]
    assert names.find("phone-1000000") == 999_999 and names.find("phone-1000001") is None
    assert "pi-3" in names and "pi-4" not in names and "phone-01" not in names
    assert len(plan.client_names_json()) < 200  # (groups, not a million names)


def test_lazy_profiles_and_links_equal_an_eager_draw(million) -> None:  # type: ignore[no-untyped-def]
    exp, plan = million
    rule = ProfileRule(exp, exp.fleet.nodes[1], plan.seed)
    eager = rule.draw_all()  # every replica at once, vectorised
    for pid in PIDS[:8]:
        node = plan.clients[pid]
        assert (node.profile_name, node.profile) == eager[pid]
        assert node.name == f"phone-{pid + 1}" and node.partition_id == pid
    assert plan.clients[76].uplink.params().latency_ms == 200  # phone-77's own link
    assert plan.clients[999_998].uplink.params().bandwidth_mbps == 2  # phone-999999
    assert plan.clients[0].uplink.params().latency_ms == 30
    counts = plan.client_counts()
    drawn = {n: sum(1 for p, _ in eager if p == n) for n in rule.names}
    assert {p: counts[("edge", p)] for p in rule.names} == drawn
    assert counts[("fog", "rpi5")] == 3
    # the mix is honoured (binomial sd of a share over 10**6 draws < 0.0005)
    assert drawn["rpi5"] / 1e6 == pytest.approx(0.5, abs=0.005)
    # the same seed gives the same clients; another seed others
    again = make_plan(parse_spec(MILLION))
    assert [again.clients[p] for p in PIDS] == [plan.clients[p] for p in PIDS]
    other = make_plan(parse_spec(MILLION), seed=6)
    assert [other.clients[p].profile_name for p in range(50)] != [
        plan.clients[p].profile_name for p in range(50)
    ]


def test_the_clocks_clients_equal_each_nodes_own_model(million) -> None:  # type: ignore[no-untyped-def]
    exp, plan = million
    pop = ClientPopulation.from_plan(plan, exp.links.mode)
    assert len(pop.models) <= 6 and len(pop.special) == 2  # phone-77, phone-999999
    back = ClientPopulation.from_dict(json.loads(json.dumps(pop.to_dict())))
    clients = PopulationClients(plan.client_names(), back)
    for pid in PIDS:
        node = plan.clients[pid]
        assert back.model(pid) == client_model(node, exp.links.mode), pid
        assert clients[node.name] == client_model(node, exp.links.mode)
    assert "phone-0" not in clients and len(clients) == plan.num_clients


def test_availability_by_partition_on_first_use() -> None:
    traces = read_intervals("0,0,10\n1,5,20\n2,0,100\n")
    groups = NodeNames([("phone", 1000)])
    lazy, eager = Availability(traces, groups, 1.0), Availability(traces, list(groups), 1.0)
    for pid in (0, 1, 2, 3, 500, 999):
        name = groups[pid]
        for t in (0.0, 7.0, 15.0, 50.0):
            assert lazy.down_reason(name, t, t) == eager.down_reason(name, t, t)
        assert lazy.up_at(name, 12.0) == eager.up_at(name, 12.0)
    assert lazy.trace_of("phone-4") is traces["0"]  # (partition 3 mod 3 trace clients)


def test_node_names_travel_as_groups() -> None:
    names = NodeNames([("cloud-x", 1), ("edge", 3), ("fog", 1)])
    listed = ["cloud-x", "edge-1", "edge-2", "edge-3", "fog"]
    assert list(names) == listed and names == listed and names[-1] == "fog"
    assert [names.find(n) for n in listed] == [0, 1, 2, 3, 4]
    assert node_names(names.to_json()) == listed
    assert node_names(json.dumps(listed)) == listed


def test_lazy_silos_equal_the_eager_split() -> None:
    from nodes.fl import task
    from nodes.fl.config import FLSpec

    order = np.random.default_rng(3).permutation(1003)
    eager = [np.sort(p) for p in np.array_split(order, 10)]
    parts = EqualParts(order, 10)
    assert all(np.array_equal(a, b) for a, b in zip(parts, eager, strict=True))
    assert np.array_equal(parts[-1], eager[-1])
    spec = FLSpec.model_validate(
        {"dataset": {"name": "synthetic", "num_samples": 3000}, "model": {"name": "mlp"}}
    )
    splits = task.get_splits(spec, 4, 40)
    data = splits.data
    rng = np.random.default_rng(4)
    perm = rng.permutation(len(data))
    n_test = int(round(len(data) * spec.dataset.test_fraction))
    pool = perm[n_test:]
    for p, idx in enumerate(np.array_split(np.random.default_rng(4).permutation(len(pool)), 40)):
        local = np.random.default_rng([4, p]).permutation(np.sort(idx))
        k = max(1, int(round(len(local) * spec.dataset.local_test_fraction)))
        assert np.array_equal(splits.silo_test[p].x, data.x[pool[local[:k]]])
        assert np.array_equal(splits.silo_train[p].y, data.y[pool[local[k:]]])
    assert np.array_equal(splits.server_test.y, data.y[perm[:n_test]])


def test_a_generated_dataset_is_shared_through_the_cache(tmp_path: Path) -> None:
    code = (
        "import os, sys, numpy as np; os.environ['TESTBED_DATA_CACHE'] = sys.argv[1];"
        "from nodes.data.datasets import load_dataset;"
        "d = load_dataset('synthetic', (('num_samples', 500), ('seed', 2)));"
        "print(type(d.x).__name__, float(np.abs(d.x).sum()), int(d.y.sum()))"
    )
    run = [sys.executable, "-c", code, str(tmp_path)]
    first = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    second = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert first.split()[0] == "ndarray" and second.split()[0] == "memmap"
    assert first.split()[1:] == second.split()[1:]


def test_a_million_on_the_local_backend_is_refused_by_the_capacity_check(million) -> None:  # type: ignore[no-untyped-def]
    _, plan = million
    host = HostCapacity(available_mb=20_000, free_tasks=100_000, free_fds=100_000)
    with pytest.raises(FleetTooLarge, match="1000003 clients"):
        check_fits(plan, "local", host=host)


SMALL = """\
name: grouped
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: phone, tier: edge, profile: rpi5, count: 8}
workload:
  fl: {rounds: 2}
"""


def test_unsampled_clients_of_a_large_fleet_are_counted_per_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from testbed import chaos

    monkeypatch.setattr(chaos, "ROWS_PER_CLIENT_MAX", 4)  # (8 clients: a "large" fleet)
    plan = make_plan(parse_spec(SMALL))
    store = RunStore(tmp_path)
    store.create_run("r", "grouped", seed=0, backend="simulation")
    for r in (1, 2):
        store.add_event("r", "round_end", round=r)
        store.set_status("r", r, "phone-1", "completed", "")
    store.set_status("r", 1, "node-42", "completed", "")
    store.add_event("r", "node_identified", node="phone-2", node_id="42")
    store.add_event("r", "node_down", node="phone-3", round=1, reason="crash")
    finalize_statuses(store, "r", plan, 2)
    rows = {(s.round, s.node): s.status for s in store.round_status("r")}
    assert rows == {
        (1, "phone-1"): "completed",
        (1, "phone-2"): "completed",
        (1, "phone-3"): "excluded",
        (2, "phone-1"): "completed",
        (2, "phone-3"): "excluded",
    }  # observed only: no row for a client that was merely not sampled
    counted = {(m.round, m.node): m.value for m in store.metrics("r", "not_sampled")}
    assert counted == {(1, "edge/rpi5"): 5, (2, "edge/rpi5"): 6}
    assert any(e.kind == "statuses_grouped" for e in store.events("r"))
