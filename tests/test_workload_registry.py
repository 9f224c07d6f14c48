"""A workload added from this module (one class) runs through the runner on a real local
fleet: its section validates in the YAML, its nodes start on the backend behind their
shaping links, its records land in the store, and every dispatcher finds it."""

from __future__ import annotations

import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import Field

from kernel.frozen import Frozen
from testbed.procs import free_port
from testbed.report import write_report
from testbed.runner import run_experiment
from testbed.spec.loader import SpecError, parse_spec
from testbed.store import RunStore
from testbed.workloads import (
    WORKLOADS,
    LibraryWorkload,
    RunContext,
    register_workload,
    section_of_spec,
    workload,
)
from testbed.workloads.base import record_link_counters
from tests.conftest import processes_under

LATENCY_MS = 20.0  # one way, edge <-> cloud
BANDWIDTH_MBPS = 8.0
PAYLOAD_KB = 64


class ProbeSpec(Frozen):
    """``workload.probe``: every client node serves a file; the origin fetches it."""

    file_kb: int = Field(16, ge=1, le=1024)


@register_workload("probe")
class Probe(LibraryWorkload):
    """Fetch a file from a tiny HTTP server on every client node, through its link."""

    spec_model = ProbeSpec

    def run(self, ctx: RunContext) -> dict[str, Any]:
        spec = ctx.experiment.workload.section_spec()
        assert isinstance(spec, ProbeSpec)
        nodes = [n.name for n in ctx.plan.clients]
        commands, ports = {}, {}
        for name in nodes:
            folder = ctx.run_dir / "nodes" / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "blob").write_bytes(os.urandom(spec.file_kb * 1024))
            ports[name] = free_port()
            commands[name] = [sys.executable, "-m", "http.server", str(ports[name]),
                              "--bind", "127.0.0.1", "--directory", str(folder)]  # fmt: skip
        backend = ctx.make_backend()
        try:
            reach = backend.start_services(commands, ports)
            backend.start_schedules()
            for name in nodes:
                t = time.monotonic()
                url = f"http://127.0.0.1:{reach[name]}/blob"
                with urllib.request.urlopen(url, timeout=30) as resp:
                    size = len(resp.read())
                ms = (time.monotonic() - t) * 1e3
                ctx.metric({"name": "probe_ms", "value": ms, "node": name, "tags": {"bytes": size}})
        finally:
            counters = backend.link_counters()
            backend.stop()
            record_link_counters(ctx.store, ctx.run_id, counters)
        return {"probe_ms": {m.node: m.value for m in ctx.store.metrics(ctx.run_id, "probe_ms")}}


def spec_yaml(file_kb: int) -> str:
    return f"""\
name: probe-ext
seed: 1
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, count: 2}}
links:
  defaults:
    edge-cloud: {{latency_ms: {LATENCY_MS}, bandwidth_mbps: {BANDWIDTH_MBPS}}}
workload:
  probe: {{file_kb: {file_kb}}}
"""


def test_a_registered_section_is_validated_by_its_own_model() -> None:
    assert "probe" in WORKLOADS
    exp = parse_spec(spec_yaml(PAYLOAD_KB))
    assert exp.workload.section == "probe"
    assert exp.workload.section_spec() == ProbeSpec(file_kb=PAYLOAD_KB)
    with pytest.raises(SpecError, match=r"workload\.probe\.file_kb"):
        parse_spec(spec_yaml(0))
    with pytest.raises(SpecError, match=r"workload\.nosuch: unknown workload.*'probe'"):
        parse_spec(spec_yaml(1).replace("probe:", "nosuch:"))


def test_a_workload_from_a_test_module_runs_on_a_local_fleet(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    res = run_experiment(parse_spec(spec_yaml(PAYLOAD_KB)), store, sweep_id="probe-sweep")
    assert res.status == "completed", res.summary
    # through each node's link: at least one round trip, and the payload at 8 Mbit/s
    transfer_ms = PAYLOAD_KB * 1024 * 8 / (BANDWIDTH_MBPS * 1e6) * 1e3
    assert set(res.summary["probe_ms"]) == {"edge-1", "edge-2"}
    for ms in res.summary["probe_ms"].values():
        assert ms >= 2 * LATENCY_MS + 0.8 * transfer_ms
    down = {m.node: m.value for m in store.metrics(res.run_id, "link_bytes_down")}
    assert set(down) == {"edge-1", "edge-2"}
    assert all((v or 0) >= PAYLOAD_KB * 1024 for v in down.values()), down
    # the run's workload is found from its record by the registry, as the controller does
    run = store.run(res.run_id)
    spec = yaml.safe_load((Path(run.artifact_dir or "") / "spec.resolved.yaml").read_text())
    assert section_of_spec(spec) == "probe"
    assert workload("probe").rounds(spec["workload"]["probe"]) is None
    with pytest.raises(ValueError, match="'probe' has no sweep report"):
        write_report(store, "probe-sweep", tmp_path / "report")
    assert processes_under(tmp_path) == []
