"""A fleet that cannot fit is refused before anything starts, with the YAML path to
change; nodes the zygote cannot fork (netem links) are counted at their full size."""

from __future__ import annotations

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


def test_netem_nodes_are_counted_without_the_zygotes_sharing() -> None:
    warm, cold = estimate(plan(10)), estimate(plan(10, "netem"))
    assert warm is not None and cold is not None
    assert cold.memory_mb - warm.memory_mb == pytest.approx(10 * (705 - 250))


def test_a_fleet_over_the_memory_is_refused_with_its_path() -> None:
    host = HostCapacity(available_mb=4096, free_tasks=10**6, free_fds=10**6)
    assert check_fits(plan(8), host=host) is not None  # 8 x 250 MB + the server fit
    with pytest.raises(FleetTooLarge) as e:
        check_fits(plan(8, "netem"), host=host)  # 8 x 705 MB do not
    assert str(e.value).startswith("fleet.nodes.1.count: 9 nodes (8 clients) need about")
    assert "at most 3 client nodes fit" in str(e.value)
