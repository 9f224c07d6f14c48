"""Profiles above the host on the docker backend: refused, capped and said, or
oversubscribed on request (testbed/backends/host_limits.py). No engine needed: the
checks run before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed import cli
from testbed.backends import host_limits, preflight
from testbed.backends.base import NotSupported
from testbed.backends.docker_node import container_limits
from testbed.backends.host_limits import Host, capped, check_limits, grouped
from testbed.planner import make_plan
from testbed.spec.loader import parse_spec

HOST = Host(cpus=2, memory_mb=8000)

BIG = """
name: too-big
fleet:
  nodes:
    - {id: cloud, tier: cloud, profile: rpi5}
    - {id: e, tier: edge, profile: {cpu_speed_factor: 1.0, cpu_cores: 64, memory_mb: 1048576}}
workload:
  fl: {rounds: 1}
"""

MODELLED = """
name: modelled
profiles:
  board: {cpu_cores: 4, memory_mb: 4096}
fleet:
  nodes:
    - {id: cloud, tier: cloud, profile: cloud-gpu}
    - {id: edge, tier: edge, profile: jetson-orin-nano, count: 3}
    - {id: b, tier: edge, profile: board}
workload:
  fl: {rounds: 1}
"""


@pytest.fixture(autouse=True)
def small_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_limits.Host, "measure", classmethod(lambda cls: HOST))


def test_spec_defined_memory_above_the_host_is_refused_naming_node_and_figures() -> None:
    exp = parse_spec(BIG)
    with pytest.raises(NotSupported) as e:
        check_limits(exp, HOST)
    msg = str(e.value)
    assert msg.startswith("fleet.nodes.1.profile: node 'e'"), msg
    assert "1048576 MB > 8000 MB" in msg and "64 cores > 2" in msg and "--oversubscribe" in msg
    check_limits(exp, HOST, oversubscribe=True)  # on request: passes


def test_built_in_models_and_cores_are_capped_and_said_not_refused() -> None:
    exp = parse_spec(MODELLED)
    check_limits(exp, HOST)  # cloud-gpu's 256 GB is a model; board's 4 cores are CPU time
    out = capped(make_plan(exp), HOST)
    assert (
        out["cloud"]
        == "cloud-gpu (32 cores > 2, 262144 MB > 8000 MB): 2 cores, 8000 MB (modelled device)"
    )
    assert out["b"] == "board (4 cores > 2): 2 cores, 4096 MB (capped)"
    assert set(out) == {"cloud", "edge-1", "edge-2", "edge-3", "b"}
    lines = grouped(out, shown=2)
    assert "edge-1, edge-2, ... (3 nodes): jetson-orin-nano (6 cores > 2," in "\n".join(lines)


def test_container_limits_never_pass_memory_above_the_host_unless_oversubscribed() -> None:
    node = make_plan(parse_spec(BIG)).clients[0]
    limits = container_limits(node, 0, [0, 1], HOST.memory_mb)
    assert limits["mem_limit"] == "8000m" and limits["cpu_quota"] == 2 * limits["cpu_period"]
    over = container_limits(node, 0, [0, 1], HOST.memory_mb, oversubscribe=True)
    assert over["mem_limit"] == "1048576m"


def test_validate_and_run_answer_alike_and_oversubscribe_passes(tmp_path: Path) -> None:
    spec = tmp_path / "big.yaml"
    spec.write_text(BIG)
    runner = CliRunner()
    v = runner.invoke(cli.app, ["validate", str(spec), "--backend", "docker"])
    r = runner.invoke(
        cli.app, ["run", str(spec), "--backend", "docker", "--out", str(tmp_path / "r")]
    )
    assert v.exit_code == r.exit_code == 2
    assert "fleet.nodes.1.profile: node 'e'" in v.output and "fleet.nodes.1.profile" in r.output
    assert not (tmp_path / "r").exists(), "refused before anything is recorded"
    ok = runner.invoke(cli.app, ["validate", str(spec), "--backend", "docker", "--oversubscribe"])
    assert ok.exit_code == 0 and "(oversubscribed)" in ok.output, ok.output
    with pytest.raises(NotSupported, match="--oversubscribe: .* --backend simulation"):
        preflight("simulation", [parse_spec(BIG)], {"oversubscribe": True}, host=False)


def test_in_process_workloads_say_where_they_run_off_the_local_backend() -> None:
    from testbed.backends.docker import DockerBackend
    from testbed.console import fleet_lines

    text = Path("experiments/tt_edge.yaml").read_text()
    notes = DockerBackend.notes([parse_spec(text, folder=Path("experiments").resolve())])
    assert any(n.startswith("workload.compress runs in the runner's own process") for n in notes)
    assert not any("workload.fl" in n for n in DockerBackend.notes([parse_spec(BIG)]))
    lines = fleet_lines({"in_process": "workload.compress ran in the runner's own process"})
    assert lines == ["where: workload.compress ran in the runner's own process"]
