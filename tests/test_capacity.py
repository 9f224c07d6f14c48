"""A fleet that cannot fit is refused before anything starts, with the YAML path to
change; nodes the zygote cannot fork (netem links) are counted at their full size, and
both per-node figures cover a node's memory measured here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.capacity import FleetTooLarge, HostCapacity, check_fits, estimate
from testbed.planner import make_plan
from testbed.spec.loader import parse_spec

SPEC = """\
name: cap
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, count: {count}}}
links: {{mode: {mode}}}
workload:
  fl: {{rounds: 1}}
"""


def plan(count: int, mode: str = "proxy"):  # type: ignore[no-untyped-def]
    return make_plan(parse_spec(SPEC.format(count=count, mode=mode)))


#: One client node's memory, measured in a fresh interpreter: the zygote's stack imported
#: and warmed up (``testbed.backends.zygote.warm_up``) is what a node started plainly
#: holds (its resident memory now, VmRSS, not the import's transient peak); a child
#: forked from it that trains a step again adds its PSS (it shares the rest with the
#: zygote; with only 2 sharers, PSS over-counts a fleet's share).
MEASURE = textwrap.dedent("""
    import gc, json, os
    from testbed.backends.zygote import warm_up
    warm_up()
    plain = next(int(x.split()[1]) for x in open("/proc/self/status")
                 if x.startswith("VmRSS:")) / 1024
    gc.freeze()
    r, w = os.pipe()
    if os.fork() == 0:
        from nodes.agent import _prewarm
        gc.enable()
        _prewarm(None)
        pss = next(int(x.split()[1]) for x in open("/proc/self/smaps_rollup")
                   if x.startswith("Pss:")) / 1024
        os.write(w, json.dumps(pss).encode())
        os._exit(0)
    os.wait()
    print(json.dumps({"plain_rss_mb": plain, "forked_pss_mb": json.loads(os.read(r, 64))}))
""")


def _per_client_mb(mode: str) -> float:
    """What one more client node adds to the fleet's estimate, MB."""
    small, big = estimate(plan(10, mode)), estimate(plan(20, mode))
    assert small is not None and big is not None
    return (big.memory_mb - small.memory_mb) / 10


def test_each_node_is_estimated_at_least_at_its_measured_memory() -> None:
    # a clean environment: what other tests of the session set cannot change the figure
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}  # fmt: skip
    out = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True,
                         timeout=300, check=True, env=env).stdout  # fmt: skip
    m = json.loads(out.strip().splitlines()[-1])
    warm, cold = _per_client_mb("proxy"), _per_client_mb("netem")
    # a node started plainly (netem: its own namespace) is counted at least at a whole
    # process's resident memory; a forked one below it (the sharing makes it cheaper)
    assert cold >= m["plain_rss_mb"], (cold, m)
    assert warm < m["plain_rss_mb"]


def scale_rows() -> list[tuple[int, float]]:
    """(N, machine memory used MB) of each fleet in docs/benchmarks.md's "Scale and node
    memory" table (bench/scale.py: the drop of MemAvailable while N nodes ran)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md").read_text()
    table = text.split("## Scale and node memory", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[0].isdigit():
            rows.append((int(cells[0]), float(cells[7].replace(",", ""))))
    return rows


def test_the_estimate_covers_what_each_measured_fleet_used() -> None:
    """A fleet of N forked nodes is estimated at no less than the machine memory the
    measured fleet of N used (all of it: server, zygote, shared pages, nodes)."""
    rows = scale_rows()
    assert len(rows) >= 3, rows  # the doc's 10, 30 and 60 nodes
    for n, used_mb in rows:
        est = estimate(plan(n))
        assert est is not None and est.memory_mb >= used_mb, (n, used_mb, est)
    # ... and not wildly above it: the check refuses only what does not fit
    n, used_mb = max(rows)
    est = estimate(plan(n))
    assert est is not None and est.memory_mb < 2 * used_mb, (n, used_mb, est)
    # 200 nodes fit this machine (23 GB available, measured: testbed/capacity.py); 300 not
    host = HostCapacity(available_mb=23.0 * 1024, free_tasks=10**6, free_fds=10**6)
    assert check_fits(plan(200), host=host) is not None
    with pytest.raises(FleetTooLarge):
        check_fits(plan(300), host=host)


def test_a_fleet_over_the_memory_is_refused_with_its_path() -> None:
    host = HostCapacity(available_mb=4096, free_tasks=10**6, free_fds=10**6)
    assert check_fits(plan(8), host=host) is not None  # 8 x 80 MB + the server fit
    with pytest.raises(FleetTooLarge) as e:
        check_fits(plan(8, "netem"), host=host)  # 8 x 705 MB do not
    assert str(e.value).startswith("fleet.nodes.1.count: 9 nodes (8 clients) need about")
    assert "at most 3 client nodes fit" in str(e.value)


def test_cli_refuses_a_fleet_that_does_not_fit_unless_oversubscribed(tmp_path: Path) -> None:
    """validate and run refuse 5,000 client nodes (exit 2, the count's YAML line and
    what was assumed) before anything is recorded; --oversubscribe says so and goes on."""
    from typer.testing import CliRunner

    from testbed import cli

    spec = tmp_path / "big.yaml"
    spec.write_text(SPEC.format(count=5000, mode="proxy"))
    runner = CliRunner()
    v = runner.invoke(cli.app, ["validate", str(spec)])
    r = runner.invoke(cli.app, ["run", str(spec), "--out", str(tmp_path / "r")])
    assert v.exit_code == r.exit_code == 2, (v.output, r.output)
    for out in (" ".join(v.output.split()), " ".join(r.output.split())):
        assert "big.yaml:5: fleet.nodes.1.count: 5001 nodes" in out, out
        assert "assumed: ~80 MB per client node" in out
    assert not (tmp_path / "r").exists(), "refused before anything is recorded"
    ok = runner.invoke(cli.app, ["validate", str(spec), "--oversubscribe"])
    assert ok.exit_code == 0 and "--oversubscribe:" in ok.output, ok.output
