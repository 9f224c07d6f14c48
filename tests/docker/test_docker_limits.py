"""The docker backend's parts that need no engine: profile -> container limits, the
stats arithmetic, the CLI's refusal (exit 2, nothing recorded) when no engine answers,
netem's fallback to the proxy where containers cannot be shaped, and the start-up
budget that grows with the fleet."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from testbed.backends.docker_net import (
    START_BASE_S,
    START_PER_NODE_S,
    choose_link_mode,
    start_timeout_s,
)
from testbed.backends.docker_node import PERIOD_US, container_limits, memory_mb_of
from testbed.planner import make_plan
from testbed.spec.loader import parse_spec

SPEC = """\
name: limits
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: tiny, tier: edge, profile: {cpu_cores: 1, memory_mb: 512}, count: 2}
    - {id: big, tier: fog, profile: fog-server}
workload:
  fl: {rounds: 1}
"""


def test_profile_cores_and_memory_become_quota_cpuset_and_memory_limit() -> None:
    plan = make_plan(parse_spec(SPEC))
    nodes = {n.name: n for n in plan.clients}
    host = [0, 1]
    first = container_limits(nodes["tiny-1"], 0, host)
    second = container_limits(nodes["tiny-2"], 1, host)
    assert first["cpu_quota"] == PERIOD_US and first["cpu_period"] == PERIOD_US
    assert first["mem_limit"] == first["memswap_limit"] == "512m"
    # one core each, round-robin over the host's CPUs, as the local backend pins
    assert (first["cpuset_cpus"], second["cpuset_cpus"]) == ("0", "1")
    # a profile above the host (fog-server: 16 cores, 64 GB): the host's CPUs and memory,
    # said by validate and the run (tests/test_host_limits.py), or its memory on request
    big = container_limits(nodes["big"], 2, host, host_memory_mb=8000)
    assert big["cpu_quota"] == 2 * PERIOD_US and "cpuset_cpus" not in big
    assert big["mem_limit"] == big["memswap_limit"] == "8000m"
    over = container_limits(nodes["big"], 2, host, host_memory_mb=8000, oversubscribe=True)
    assert over["mem_limit"] == "65536m"


def test_memory_as_docker_stats_shows_it() -> None:
    assert memory_mb_of(300 * 2**20, 100 * 2**20) == 200.0
    assert memory_mb_of(10, 20) == 0.0


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "testbed", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def test_no_engine_is_one_clear_error_and_nothing_recorded(tmp_path: Path, root: Path) -> None:
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock", COLUMNS="300")
    out = tmp_path / "runs"
    r = _cli(
        [
            "run",
            str(root / "experiments/quickstart.yaml"),
            "--backend",
            "docker",
            "--out",
            str(out),
        ],
        env,
        root,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "DOCKER_HOST=unix://" in r.stderr and "dockerd" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()  # no store, no run folder


def test_netem_falls_back_to_the_proxy_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.9.9.9:2375")  # an engine on another host
    mode, why = choose_link_mode("netem")
    assert mode == "proxy" and why is not None
    assert "links.mode: netem" in why and "DOCKER_HOST=tcp://10.9.9.9:2375" in why
    assert choose_link_mode("proxy") == ("proxy", None)
    assert choose_link_mode("none") == ("none", None)


def test_start_timeout_grows_with_the_fleet() -> None:
    # 32 warm node containers took > 120 s to start on 2 CPUs (docs/benchmarks.md)
    assert start_timeout_s(4, cpus=2) == START_BASE_S + 4 * START_PER_NODE_S
    assert start_timeout_s(32, cpus=2) > 240
    assert start_timeout_s(32, cpus=8) < start_timeout_s(32, cpus=2)
    assert start_timeout_s(32, cpus=64) == START_BASE_S + 32 * START_PER_NODE_S / 4


def test_an_ended_container_is_oom_or_its_exit_code() -> None:
    from testbed.backends.docker import _ended

    assert _ended({"Status": "running", "OOMKilled": False}) is None
    assert _ended({"Status": "exited", "OOMKilled": True, "ExitCode": 137}) == "oom"
    assert _ended({"Status": "exited", "OOMKilled": False, "ExitCode": 1}) == "exited 1"


def _charts(root: Path) -> ModuleType:
    """The dashboard's ``ui/charts.py`` by its path (under pytest the folder tests/ui
    shadows the ``ui`` package of the checkout)."""
    spec = importlib.util.spec_from_file_location("ui_charts", root / "ui" / "charts.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_fleet_view_shows_engine_cpu_and_memory_per_node(root: Path) -> None:
    """The Fleet page's node table: peak memory and, where the engine measured it,
    mean CPU per container; no CPU column for a run without engine stats."""
    from testbed.controller.fleet import fleet_state
    from testbed.rows import MetricRow

    node_table = _charts(root).node_table
    plan = make_plan(parse_spec(SPEC))
    metrics = [
        MetricRow(None, "tiny-1", "peak_rss_mb", 478.4, 1.0),
        MetricRow(None, "tiny-1", "mean_cpu_pct", 12.34, 1.0),
        MetricRow(None, "cloud", "mean_cpu_pct", 18.0, 1.0),
    ]
    fleet = fleet_state(plan, [], metrics, "completed")
    table = node_table(fleet).set_index("node")
    assert table.loc["tiny-1", "peak RSS MB"] == 478
    assert table.loc["tiny-1", "mean CPU % (docker stats)"] == 12.3
    assert table.loc["cloud", "mean CPU % (docker stats)"] == 18.0
    assert table["mean CPU % (docker stats)"].isna()["big"]
    local = node_table(fleet_state(plan, [], metrics[:1], "completed"))
    assert "mean CPU % (docker stats)" not in local.columns
