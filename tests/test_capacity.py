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
    # a node the zygote forks is counted at least at what it adds; one started plainly
    # (netem: its own namespace) at least at a whole process's resident memory
    assert warm >= m["forked_pss_mb"], (warm, m)
    assert cold >= m["plain_rss_mb"], (cold, m)
    assert warm < m["plain_rss_mb"]  # the sharing is what makes a forked node cheaper


def test_a_fleet_over_the_memory_is_refused_with_its_path() -> None:
    host = HostCapacity(available_mb=4096, free_tasks=10**6, free_fds=10**6)
    assert check_fits(plan(8), host=host) is not None  # 8 x 250 MB + the server fit
    with pytest.raises(FleetTooLarge) as e:
        check_fits(plan(8, "netem"), host=host)  # 8 x 705 MB do not
    assert str(e.value).startswith("fleet.nodes.1.count: 9 nodes (8 clients) need about")
    assert "at most 3 client nodes fit" in str(e.value)
