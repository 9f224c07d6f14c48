"""Fault kinds are registered classes: a kind defined here (``throttle``, a live CPU
cap through ``NodeHandle.update_limits``) validates in a spec and fires on a real node
process of a :class:`LocalBackend`, as does the built-in ``pause``; statuses are only
what was observed (``finalize_statuses`` on a real SQLite store)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Literal

import psutil
import pytest
from pydantic import Field

from testbed.backends.local import LocalBackend
from testbed.backends.local_node import cgroup_v2, cpu_cgroup_v1
from testbed.chaos import ChaosEngine, finalize_statuses
from testbed.faults import FAULT_KINDS, FaultContext, FaultKind, FaultParams, register_fault
from testbed.planner import make_plan
from testbed.procs import free_port
from testbed.spec.loader import SpecError, parse_spec
from testbed.store import RunStore


class ThrottleParams(FaultParams):
    cpus: float = Field(gt=0, description="CPU cores the node may use")
    duration_s: float = Field(gt=0, description="seconds before the cap is lifted")


@register_fault("throttle")
class Throttle(FaultKind):
    """Cap a node's CPU live, lift the cap later (to every core of the host)."""

    Params = ThrottleParams
    label = "throttle (CPU capped for a while)"
    marker = "arrow"
    effects = ("node_throttled",)

    def apply(self, ctx: FaultContext, name: str | None) -> None:
        assert name is not None
        applied = ctx.backend.node(name).update_limits(cpus=self.params.cpus)
        ctx.event("node_throttled", name, **applied)

    def undo_after_s(self) -> float:
        return float(self.params.duration_s)

    def undo(self, ctx: FaultContext, name: str | None, state: Any) -> None:
        assert name is not None
        ctx.backend.node(name).update_limits(cpus=float(os.cpu_count() or 1))
        ctx.event("node_throttled", name, lifted=True)


def spec(faults: str) -> str:
    return f"""\
name: registry
seed: 3
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, count: 1}}
links: {{mode: none}}
workload:
  fl: {{rounds: 2}}
faults:
{faults}"""


def test_a_kind_registered_here_validates_with_its_own_parameters() -> None:
    assert "throttle" in FAULT_KINDS and "pause" in FAULT_KINDS
    ok = parse_spec(
        spec("  - {kind: throttle, node: edge, at_time_s: 0, cpus: 0.5, duration_s: 1}")
    )
    assert ok.faults[0].params == ThrottleParams(cpus=0.5, duration_s=1)
    with pytest.raises(SpecError) as e:
        parse_spec(spec("  - {kind: throttle, node: edge, at_time_s: 0, cpus: -1}"))
    msgs = [(p.path, p.message) for p in e.value.problems]
    assert ("faults.0.cpus", "Input should be greater than 0 (got -1)") in msgs
    assert any(p == "faults.0.duration_s" and "throttle fault needs" in m for p, m in msgs)
    with pytest.raises(SpecError) as e:  # another kind's parameter is not this one's
        parse_spec(spec("  - {kind: crash, node: edge, at_round: 1, cpus: 2}"))
    assert [p.path for p in e.value.problems] == ["faults.0.cpus"]
    with pytest.raises(SpecError) as e:
        parse_spec(spec("  - {kind: thrash, node: edge, at_round: 1}"))
    assert "'throttle'" in e.value.problems[0].message  # the error lists registered kinds


class JamParams(FaultParams):
    mode: Literal["burst", "steady"] = Field(description="burst or steady loss")
    duration_s: float = Field(gt=0, description="seconds jammed")


@register_fault("jam")
class Jam(FaultKind):
    """A kind whose ``mode`` is not misconfig's: the spec has no ``mode`` of its own."""

    Params = JamParams
    target = "link"


def test_a_fault_s_parameters_are_its_kind_s_only() -> None:
    """FaultSpec holds the trigger and the target; every other key is validated by the
    kind's Params (a kind may reuse another kind's key with its own type), and a dump
    shows the validated parameters beside the trigger, as in the YAML."""
    from testbed.spec.models import FaultSpec

    assert set(FaultSpec.model_fields) == {
        "kind", "node", "tier", "at_round", "at_time_s", "probability", "phase", "delay_s"
    }  # fmt: skip
    jam = parse_spec(spec("  - {kind: jam, node: edge, at_round: 1, mode: burst, duration_s: 2}"))
    assert jam.faults[0].params == JamParams(mode="burst", duration_s=2.0)
    with pytest.raises(SpecError) as e:  # misconfig's mode is not jam's
        parse_spec(spec("  - {kind: jam, node: edge, at_round: 1, mode: lr, duration_s: 2}"))
    assert [p.path for p in e.value.problems] == ["faults.0.mode"]
    flap = "  - {kind: flapping, node: edge, at_round: 1, duration_s: '2'}"
    f = parse_spec(spec(flap)).faults[0]
    dumped = f.model_dump(exclude_none=True)
    assert dumped["duration_s"] == 2.0 and dumped["repeat"] == 3  # validated, defaults too
    assert FaultSpec.model_validate(dumped) == f
    # another kind's key at that kind's default means nothing (reference.yaml shows all)
    idle = "  - {kind: crash, node: edge, at_round: 1, repeat: 3, mode: null, factor: null}"
    assert parse_spec(spec(idle)).faults[0].model_dump(exclude_none=True) == {
        "kind": "crash", "node": "edge", "at_round": 1, "phase": "before", "delay_s": 1.0
    }  # fmt: skip
    bad = "  - kind: outage\n    node: edge\n    at_round: 1\n    duration_s: -5\n    repeat: 4"
    with pytest.raises(SpecError) as e:  # every parameter error at once, each at its line
        parse_spec(spec(bad))
    got = [(p.path, p.line, p.message) for p in e.value.problems]
    assert got == [
        ("faults.0.duration_s", 14, "Input should be greater than 0 (got -5)"),
        ("faults.0.repeat", 15, "not a parameter of fault kind 'outage' (its own: ['duration_s'])"),
    ]


def _fleet(tmp_path: Path, faults: str) -> tuple[LocalBackend, ChaosEngine, RunStore, str]:
    """One real node process (agent + flower-supernode, cold, no SuperLink listening)."""
    plan = make_plan(parse_spec(spec(faults)))
    store = RunStore(tmp_path / "store")
    store.create_run("r1", "registry", seed=3, backend="local")
    backend = LocalBackend(plan, tmp_path / "run", warm=False)
    backend.superlink_port = free_port()  # nothing listens: the node keeps retrying
    backend.start_node("edge")
    deadline = time.monotonic() + 30
    while len(backend.procs.tree("edge")) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(backend.procs.tree("edge")) >= 2, "the node did not start its SuperNode"
    return backend, ChaosEngine(plan, backend, store, "r1", plan.seed), store, "r1"


def _tick_for(engine: ChaosEngine, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        engine.tick()
        time.sleep(0.05)


def _events(store: RunStore, run_id: str) -> list[tuple[str, str]]:
    return [(e[2], e[4]) for e in store.events(run_id)]


@pytest.mark.slow
def test_pause_and_a_new_kind_fire_on_a_real_node(tmp_path: Path) -> None:
    faults = (
        "  - {kind: pause, node: edge, at_time_s: 0, duration_s: 1}\n"
        "  - {kind: throttle, node: edge, at_time_s: 1.5, cpus: 0.5, duration_s: 1}"
    )
    backend, engine, store, run_id = _fleet(tmp_path, faults)
    pids = [p.pid for p in backend.procs.tree("edge")]
    try:
        engine.start()
        _tick_for(engine, 0.3)
        states = {psutil.Process(p).status() for p in pids}
        assert states == {psutil.STATUS_STOPPED}  # every process of the node frozen
        _tick_for(engine, 1.0)
        assert psutil.STATUS_STOPPED not in {psutil.Process(p).status() for p in pids}
        assert backend.node("edge").alive()
        _tick_for(engine, 0.7)  # the throttle fired at 1.5 s
        ev = _events(store, run_id)
        if os.geteuid() != 0 or cgroup_v2():
            assert ("fault_rejected", "edge") in ev or ("node_throttled", "edge") in ev
        else:
            quota = cpu_cgroup_v1(pids[0])
            assert (quota / "cpu.cfs_quota_us").read_text().strip() == "50000"
            inside = set((quota / "cgroup.procs").read_text().split())
            assert {str(p) for p in pids} <= inside
            _tick_for(engine, 1.2)
            lifted = int((quota / "cpu.cfs_quota_us").read_text())
            assert lifted == (os.cpu_count() or 1) * 100_000
    finally:
        backend.stop()
    ev = _events(store, run_id)
    assert ev[:3] == [
        ("fault_injected", "edge"),
        ("node_paused", "edge"),
        ("node_resumed", "edge"),
    ]
    assert not any(psutil.pid_exists(p) for p in pids)
    assert not cpu_cgroup_v1(pids[0]).exists()


def test_node_handle_errors_name_the_nodes(tmp_path: Path) -> None:
    plan = make_plan(parse_spec(spec("  []").replace("faults:\n  []", "faults: []")))
    backend = LocalBackend(plan, tmp_path, warm=False)
    with pytest.raises(KeyError, match="edge-1"):
        backend.node("edge-1")  # not started yet
    with pytest.raises(ValueError, match="cpus"):
        from testbed.backends.local_node import LocalNode

        LocalNode(backend, "edge-1").update_limits(cpus=0)


def test_statuses_of_a_run_that_ended_after_round_2_of_5(tmp_path: Path) -> None:
    """Only observed statuses: rounds 3-5 never ran and get no row; a row of an
    unidentified Flower id is not attributed to a node by elimination."""
    plan = make_plan(
        parse_spec(
            spec("  []").replace("count: 1", "count: 3").replace("faults:\n  []", "faults: []")
        )
    )
    store = RunStore(tmp_path)
    store.create_run("r", "x", seed=0, backend="local")
    for r in (1, 2):
        store.add_event("r", "round_start", round=r)
        store.set_status("r", r, "edge-1", "completed")
        store.add_event("r", "round_end", round=r)
    store.add_event("r", "round_start", round=3)  # started, never ended (run killed)
    store.set_status("r", 3, "edge-1", "failed", "no reply")
    store.set_status("r", 1, "node-77", "completed")  # edge-2 under its Flower id
    store.set_status("r", 1, "edge-3", "completed")
    store.add_event("r", "node_down", round=1, node="edge-3", reason="crash (never returns)")
    store.set_status("r", 2, "node-99", "late")  # never identified
    store.add_event("r", "node_identified", node="edge-2", node_id="77")
    store.add_metric("r", "bytes_lost", 5.0, round=1, node="node-77")
    store.add_metric("r", "bytes_lost", 7.0, round=2, node="node-99")
    finalize_statuses(store, "r", plan, rounds=5)
    lost = {(m.round, m.node, m.value) for m in store.metrics("r", "bytes_lost")}
    assert lost == {(1, "edge-2", 5.0), (2, "node-99", 7.0)}  # metrics follow the name
    got = {(r, n): (s, why) for r, n, s, why in store.round_status("r")}
    assert got == {
        (1, "edge-1"): ("completed", ""),
        (1, "edge-2"): ("completed", ""),
        (1, "edge-3"): ("completed", ""),
        (2, "edge-1"): ("completed", ""),
        (2, "edge-2"): ("excluded", "not sampled this round"),
        (2, "edge-3"): ("excluded", "not sampled: crash (never returns)"),
        (2, "node-99"): ("late", ""),
        (3, "edge-1"): ("failed", "no reply"),
    }


def test_a_degrade_takes_every_link_field_with_the_spec_links_bounds() -> None:
    """The link's fields are declared once: a degrade's parameters are every field of
    ``LinkParams`` (but the partition, a fault of its own) with the spec link's bounds."""
    from testbed.emulation.link import LinkParams
    from testbed.faults.link import DegradeParams

    assert set(DegradeParams.model_fields) - {"duration_s"} == (
        set(LinkParams.field_names()) - {"partitioned"}
    )
    for bad in ({"bandwidth_mbps": 0}, {"latency_ms": -1}, {"loss_pct": 100}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            DegradeParams.model_validate(bad)
    ok = DegradeParams.model_validate({"loss_pct": 2.5, "duration_s": 3})
    assert ok.changes() == {"loss_pct": 2.5}  # type: ignore[attr-defined]
