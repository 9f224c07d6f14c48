"""BSDP against brute force over every cut; GPipe's balanced cut; HEFT's upward-rank
placement on a hand-computed instance; memory feasibility."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from testbed.llm.partition import (
    Chain,
    balanced_cut,
    brute_force,
    bsdp,
    cut_cost,
    even_cut,
    fits_memory,
    heft_placement,
    placement_cost,
    upward_ranks,
)


def random_chain(rng: np.random.Generator, n_nodes: int, n_units: int) -> Chain:
    speed = rng.uniform(0.2, 2.0, n_nodes)
    base = rng.uniform(0.001, 0.02, n_units)
    params = rng.integers(1, 50, n_units)
    total = int(params.sum())
    return Chain(
        nodes=tuple(f"n{i}" for i in range(n_nodes)),
        unit_s=tuple(tuple(float(b / s) for b in base) for s in speed),
        in_bytes=tuple(int(x) for x in rng.integers(100, 100_000, n_units)),
        param_bytes=tuple(int(p) for p in params),
        mem_bytes=tuple(int(x) for x in rng.integers(total // n_nodes, total + 1, n_nodes)),
        latency_s=tuple(float(x) for x in rng.uniform(0, 0.02, n_nodes)),
        bandwidth_bps=tuple(float(x) for x in rng.choice([1e6, 1e7, 1e8, math.inf], n_nodes)),
    )


@pytest.mark.parametrize("seed", range(60))
def test_bsdp_bottleneck_equals_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    chain = random_chain(rng, int(rng.integers(1, 5)), int(rng.integers(2, 9)))
    try:
        _cut, best = brute_force(chain)
    except ValueError:
        with pytest.raises(ValueError, match="does not fit the memory"):
            bsdp(chain)
        return
    cut = bsdp(chain)
    assert all(b - a >= 0 for a, b in cut) and cut[0][0] == 0 and cut[-1][1] == chain.n_units
    assert all(cut[i][1] == cut[i + 1][0] for i in range(len(cut) - 1))
    assert all(chain.fits(i, a, b) for i, (a, b) in enumerate(cut))
    assert cut_cost(chain, cut)[0] == pytest.approx(best, rel=1e-12)


def test_bsdp_moves_work_off_a_slow_node_and_a_slow_link() -> None:
    units = 10
    chain = Chain(
        nodes=("edge", "fog", "cloud"),
        unit_s=((0.04,) * units, (0.01,) * units, (0.005,) * units),
        in_bytes=(64,) + (32_768,) * (units - 1),
        param_bytes=(1,) * units,
        mem_bytes=(units,) * 3,
        latency_s=(0.0, 0.005, 0.05),
        bandwidth_bps=(math.inf, 1e9, 1e7),
    )
    cut = bsdp(chain)
    even = ((0, 4), (4, 7), (7, 10))
    assert cut_cost(chain, cut)[0] < cut_cost(chain, even)[0]
    assert cut[0][1] - cut[0][0] < 4  # the slow edge node runs fewer units than evenly


def test_even_cut_splits_the_blocks_by_count() -> None:
    assert even_cut(8, 3) == ((0, 4), (4, 7), (7, 10))
    assert even_cut(4, 4) == ((0, 2), (2, 3), (3, 4), (4, 6))
    with pytest.raises(ValueError, match="at most one stage per layer"):
        even_cut(2, 3)


def test_fits_memory() -> None:
    assert fits_memory([5, 5, 5], [10, 5])
    assert not fits_memory([5, 5, 5], [7, 7])  # 15 bytes in 14 but no unit splits


def two_nodes(unit_s: tuple[tuple[float, ...], ...], latency_s: tuple[float, float],
              mem: tuple[int, int] = (99, 99)) -> Chain:  # fmt: skip
    m = len(unit_s[0])
    return Chain(nodes=("a", "b"), unit_s=unit_s, in_bytes=(8,) * m, param_bytes=(1,) * m,
                 mem_bytes=mem, latency_s=latency_s,
                 bandwidth_bps=(math.inf, math.inf))  # fmt: skip


def test_balanced_cut_balances_compute_on_heterogeneous_devices() -> None:
    # node a is twice as slow: 2 of 6 equal units there (4 s), 4 on b (4 s); the even
    # count (3 + 3) would leave a's stage at 6 s. b's link is very slow: GPipe's
    # balance ignores links (BSDP would avoid b), and every stage is non-empty.
    chain = two_nodes(((2.0,) * 6, (1.0,) * 6), latency_s=(0.0, 100.0))
    cut = balanced_cut(chain)
    assert cut == ((0, 2), (2, 6))
    compute = [sum(chain.unit_s[i][a:b]) for i, (a, b) in enumerate(cut)]
    assert compute == [4.0, 4.0]
    assert bsdp(chain) == ((0, 6), (6, 6))


@pytest.mark.parametrize("seed", range(20))
def test_balanced_cut_is_the_least_compute_bottleneck(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n, m = int(rng.integers(1, 4)), int(rng.integers(3, 8))
    chain = random_chain(rng, n, m)
    best = math.inf
    for bounds in itertools.combinations(range(1, m), n - 1):  # non-empty stages
        edges = (0, *bounds, m)
        cut = [(edges[i], edges[i + 1]) for i in range(n)]
        if all(chain.fits(i, a, b) for i, (a, b) in enumerate(cut)):
            best = min(best, max(sum(chain.unit_s[i][a:b]) for i, (a, b) in enumerate(cut)))
    if best == math.inf:
        with pytest.raises(ValueError, match="fits the memory"):
            balanced_cut(chain)
        return
    cut = balanced_cut(chain)
    assert all(b > a for a, b in cut) and cut[-1][1] == m
    got = max(sum(chain.unit_s[i][a:b]) for i, (a, b) in enumerate(cut))
    assert got == pytest.approx(best, rel=1e-12)


def test_heft_ranks_and_places_as_by_hand() -> None:
    """Node a: units cost 1, 4, 4 s, its link 0.5 s; node b: 2, 1, 1 s, link 2 s.

    Upward ranks (mean compute + mean link 1.25 s + the successor's rank): 9, 6.25,
    2.5. Unit 0: EFT a = 0.5 + 1 = 1.5, b = 2 + 2 = 4 -> a. Unit 1: a = 1.5 + 4 = 5.5,
    b = 1.5 + 2 + 1 = 4.5 -> b. Unit 2: a = 4.5 + 0.5 + 4 = 9, b = 4.5 + 1 = 5.5 -> b.
    """
    chain = two_nodes(((1.0, 4.0, 4.0), (2.0, 1.0, 1.0)), latency_s=(0.25, 1.0))
    assert upward_ranks(chain) == pytest.approx([9.0, 6.25, 2.5])
    placement = heft_placement(chain)
    assert placement == ((0, 0, 1), (1, 1, 3))
    assert placement_cost(chain, placement) == pytest.approx((4.0, 5.5))
    # b holds one unit only: unit 1 (EFT 4.5 on b) goes there, unit 2 falls back to a
    small = two_nodes(chain.unit_s, latency_s=(0.25, 1.0), mem=(99, 1))
    assert heft_placement(small) == ((0, 0, 1), (1, 1, 2), (0, 2, 3))
