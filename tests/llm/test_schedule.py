"""ARTS, round-robin and HEFT pick what they should in constructed situations."""

from __future__ import annotations

import math

import pytest

from testbed.llm.partition import Chain
from testbed.llm.schedule import Arts, Heft, Replica, RoundRobin


def chain(names: tuple[str, ...], unit_s: float, units: int = 4) -> Chain:
    return Chain(
        nodes=names,
        unit_s=tuple((unit_s,) * units for _ in names),
        in_bytes=(8,) * units,
        param_bytes=(1,) * units,
        mem_bytes=(units,) * len(names),
        latency_s=(0.0,) * len(names),
        bandwidth_bps=(math.inf,) * len(names),
    )


CUT = ((0, 2), (2, 4))


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_arts_picks_the_lowest_estimate_and_counts_queues() -> None:
    fast = Replica(chain(("a1", "a2"), 0.01), CUT)  # latency 0.04 s, bottleneck 0.02 s
    slow = Replica(chain(("b1", "b2"), 0.02), CUT)  # latency 0.08 s, bottleneck 0.04 s
    arts = Arts([slow, fast], clock=Clock())
    assert arts.pick()[0] == 1  # 0.04 < 0.08
    assert arts.pick()[0] == 1  # 0.04 + 1 x 0.02 = 0.06 < 0.08
    assert arts.pick()[0] == 0  # 0.04 + 2 x 0.02 = 0.08 ties 0.08: fewer queued wins
    assert arts.estimate(1) == 0.08 and arts.estimate(0) == 0.08 + 0.04


def test_arts_learns_a_slowed_replica_and_skips_a_failed_one() -> None:
    clock = Clock()
    a = Replica(chain(("a1", "a2"), 0.01), CUT)
    b = Replica(chain(("b1", "b2"), 0.01), CUT)
    arts = Arts([a, b], clock=clock, alpha=0.5)
    r, route = arts.pick()
    assert r == 0 and route == (("a1", 0, 2), ("a2", 2, 4))
    arts.done(0, route, 0.4)  # observed 10x its model: capacity drops to 0.55
    assert arts.pick()[0] == 1
    arts.done(1, (), 0.04)
    assert arts.pick()[0] == 1  # still the better estimate
    arts.done(1, (), None)  # failed: skipped during the cool-down
    assert arts.pick()[0] == 0
    clock.t = 10.0
    arts.done(0, (), 0.04)
    arts.state[0].queue = 5
    assert arts.pick()[0] == 1  # back after the cool-down


def test_round_robin_cycles() -> None:
    reps = [Replica(chain((f"n{i}a", f"n{i}b"), 0.01), CUT) for i in range(3)]
    rr = RoundRobin(reps, clock=Clock())
    assert [rr.pick()[0] for _ in range(5)] == [0, 1, 2, 0, 1]


def test_heft_routes_to_the_replica_that_finishes_first() -> None:
    # two replicas edge -> shared cloud: edges 0.06 s a request, the cloud 0.01 s
    def rep(edge: str) -> Replica:
        ch = Chain(nodes=(edge, "cloud"), unit_s=((0.03,) * 4, (0.005,) * 4),
                   in_bytes=(8,) * 4, param_bytes=(1,) * 4, mem_bytes=(4, 4),
                   latency_s=(0.0, 0.0), bandwidth_bps=(math.inf, math.inf))  # fmt: skip
        return Replica(ch, CUT)

    clock = Clock()
    heft = Heft([rep("e1"), rep("e2")], clock=clock)
    assert heft.finish(0, 0.0) == pytest.approx([0.06, 0.07])
    assert heft.pick()[0] == 0  # 0.07 ties 0.07: the earlier replica
    # e1 is busy until 0.06: on e1 it would end at 0.13, on e2 at 0.08 (the cloud,
    # free at 0.07, is free again when e2 is done)
    assert heft.finish(0, 0.0)[-1] == pytest.approx(0.13)
    assert heft.finish(1, 0.0) == pytest.approx([0.06, 0.08])
    r, route = heft.pick()
    assert r == 1 and route == (("e2", 0, 2), ("cloud", 2, 4))
    assert heft.free_at == pytest.approx({"e1": 0.06, "e2": 0.06, "cloud": 0.08})
    clock.t = 1.0  # everything idle again
    assert heft.pick()[0] == 0
