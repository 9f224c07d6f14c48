"""Placement policies on a synthetic continuum (modelled estimates, no processes)."""

from __future__ import annotations

import pytest

from testbed.functions.placement import POLICIES, Cost, Job, Site, place
from testbed.spec.catalog import CATALOG

GFLOPS = 100.0  # host single-thread throughput assumed by these unit tests


def sites() -> list[Site]:
    def site(name: str, tier: str, prof: str, lat: float, bw: float | None) -> Site:
        p = CATALOG[prof]
        return Site(name, tier, p, lat, bw, p.usable_gpu_slots)

    return [
        site("edge", "edge", "jetson-orin-nano", 1.0, 1000),
        site("fog", "fog", "fog-gpu", 5.0, 500),
        site("cloud", "cloud", "cloud-gpu", 30.0, 200),
        site("sat", "space", "leo-sat", 15.0, 50),
    ]


HEAVY = Cost(wall_s=0.090, cpu_s=0.090, request_bytes=200, response_bytes=100)
LIGHT = Cost(wall_s=0.002, cpu_s=0.002, request_bytes=200, response_bytes=100)
IDLE = Cost(wall_s=0.020, cpu_s=0.0, request_bytes=50, response_bytes=30)


def test_registry_has_the_four_policies_and_rejects_unknown_names() -> None:
    assert {"static-cpu", "static-gpu", "gaia", "link-aware", "gaia-link"} <= set(POLICIES)
    with pytest.raises(ValueError, match="workload.functions.policy: unknown policy 'nope'"):
        place("nope", [], sites(), GFLOPS)


def test_static_cpu_puts_everything_on_cpu_weighing_link_and_cpu() -> None:
    jobs = [Job("heavy", "cpu_preferred", 100, HEAVY, 3.0), Job("light", "cpu", 50, LIGHT, 1)]
    out = place("static-cpu", jobs, sites(), GFLOPS)
    assert {p.backend for p in out.values()} == {"cpu"}
    assert not any(p.dynamic for p in out.values())
    # heavy: fog (10 ms RTT + 75 ms CPU) beats edge (2 + 164) and cloud (60 + 69)
    assert out["heavy"].node == "fog"
    # light: the 2 ms RTT of the edge wins over faster CPUs further away
    assert out["light"].node == "edge"


def test_static_gpu_gives_even_the_idle_function_a_gpu_and_counts_slots() -> None:
    jobs = [Job(f"f{i}", "cpu", 100, IDLE, 1.0) for i in range(7)]
    out = place("static-gpu", jobs, sites(), GFLOPS)
    on_gpu = [p for p in out.values() if p.backend == "gpu"]
    assert len(on_gpu) == 6  # 1 (Orin) + 1 (T4) + 4 (H100) slots
    assert [p.node for p in out.values()].count("cloud") >= 4
    assert out["f6"].backend == "cpu" and "no GPU slot" in out["f6"].reason


def test_gaia_follows_the_mode_and_leaves_the_node_to_the_scheduler_model() -> None:
    jobs = [
        Job("pref", "cpu_preferred", 100, HEAVY, 3.0),
        Job("gpu", "gpu_preferred", 100, HEAVY, 3.0),
        Job("idle", "cpu", 100, IDLE, 3.0),
    ]
    out = place("gaia", jobs, sites(), GFLOPS)
    # least allocated after a 1-core request: cloud 31/32 beats fog 15/16 and edge 5/6
    assert out["pref"].node == "cloud" and out["pref"].backend == "cpu" and out["pref"].dynamic
    # cloud 30/32 ties fog 15/16: the first in fleet order (fog) wins; it starts on the GPU
    assert out["gpu"].node == "fog" and out["gpu"].backend == "gpu" and out["gpu"].dynamic
    # cloud 30/32 = 0.94 > fog 14/16, sat 3/4, edge 5/6: links and CPU speed not weighed
    assert out["idle"].node == "cloud" and out["idle"].backend == "cpu"
    assert not out["idle"].dynamic  # cpu mode never moves
    assert out["pref"].observe == "server"
    assert "Kubernetes scheduler model" in out["idle"].reason


def test_gaia_puts_cpu_preferred_only_where_a_promotion_can_happen() -> None:
    only_sat = [s for s in sites() if s.name in ("sat", "edge")]
    only_sat[0].cores_requested = 5  # the edge is full: the satellite scores higher
    out = place("gaia", [Job("p", "cpu_preferred", 100, LIGHT), Job("c", "cpu", 100, LIGHT)],
                only_sat, GFLOPS)  # fmt: skip
    assert out["p"].node == "edge"  # no GPU on the satellite: its promotion could not happen
    assert out["c"].node == "sat"


def test_gaia_falls_back_to_cpu_when_no_gpu_slot_fits() -> None:
    jobs = [Job(f"g{i}", "gpu", 100, LIGHT, 1.0) for i in range(7)]
    out = place("gaia", jobs, sites(), GFLOPS)
    assert sum(p.backend == "gpu" for p in out.values()) == 6
    assert out["g6"].backend == "cpu" and "Pending in Kubernetes" in out["g6"].reason


def test_link_aware_is_ours_and_gaia_link_is_its_old_name() -> None:
    jobs = [Job("heavy", "cpu_preferred", 100, HEAVY, 3.0), Job("idle", "cpu", 100, IDLE, 3.0)]
    assert place("gaia-link", jobs, sites(), GFLOPS) == place("link-aware", jobs, sites(), GFLOPS)


def test_link_aware_weighs_the_link_and_keeps_idle_off_gpus() -> None:
    jobs = [
        Job("heavy", "cpu_preferred", 100, HEAVY, 3.0),
        Job("idle", "cpu", 100, IDLE, 3.0),
        Job("g", "gpu", 100, LIGHT, 3.0),
    ]
    out = place("link-aware", jobs, sites(), GFLOPS)
    # heavy: its CPU p95 estimate misses 100 ms everywhere; the fog T4 is nearest with a GPU
    assert out["heavy"].node == "fog" and out["heavy"].backend == "cpu"
    assert out["idle"].node == "edge" and out["idle"].backend == "cpu"
    assert out["g"].backend == "gpu" and out["g"].node == "edge"  # 2 ms RTT, Orin slot
    assert out["heavy"].observe == "e2e"


def test_link_aware_keeps_a_function_on_a_near_cpu_when_it_meets_the_slo() -> None:
    out = place("link-aware", [Job("light", "cpu_preferred", 50, LIGHT, 2.0)], sites(), GFLOPS)
    assert out["light"].node == "edge" and out["light"].backend == "cpu"


def test_estimates_include_queueing_and_saturation() -> None:
    s = sites()[0]
    idle_load = s.estimate_ms(HEAVY, "cpu", GFLOPS, 0.0)
    loaded = s.estimate_ms(HEAVY, "cpu", GFLOPS, 5.0)
    assert loaded > idle_load
    assert s.estimate_ms(HEAVY, "cpu", GFLOPS, 10.0) == float("inf")  # 164 ms x 10/s > 1
    assert sites()[3].estimate_ms(HEAVY, "gpu", GFLOPS) is None  # no GPU on the satellite


def test_a_pinned_function_stays_on_its_node() -> None:
    out = place("link-aware", [Job("p", "gpu", 100, HEAVY, 1.0, pinned="cloud")], sites(), GFLOPS)
    assert out["p"].node == "cloud" and out["p"].backend == "gpu"


def test_link_aware_does_not_place_two_functions_for_the_same_gpu_slot() -> None:
    jobs = [Job(f"h{i}", "cpu_preferred", 30, LIGHT, 200.0) for i in range(3)]
    out = place("link-aware", jobs, sites(), GFLOPS)
    # 3.6 ms x 200/s on the Orin's CPU misses 30 ms at p95: h0 is placed for the Orin's
    # only GPU slot; the others must not count on it (the fog CPU meets the SLO)
    assert [out[f"h{i}"].node for i in range(3)] == ["edge", "fog", "fog"]
    assert "nearest free GPU" in out["h0"].reason
    assert "meets the SLO" in out["h1"].reason and "meets the SLO" in out["h2"].reason
    assert all(p.backend == "cpu" and p.dynamic for p in out.values())
