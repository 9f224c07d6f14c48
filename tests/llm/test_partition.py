"""BSDP against brute force over every cut; the GPipe split; memory feasibility."""

from __future__ import annotations

import math

import numpy as np
import pytest

from testbed.llm.partition import Chain, brute_force, bsdp, cut_cost, even_cut, fits_memory


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


def test_even_cut_is_gpipe_split() -> None:
    assert even_cut(8, 3) == ((0, 4), (4, 7), (7, 10))
    assert even_cut(4, 4) == ((0, 2), (2, 3), (3, 4), (4, 6))
    with pytest.raises(ValueError, match="at most one stage per layer"):
        even_cut(2, 3)


def test_fits_memory() -> None:
    assert fits_memory([5, 5, 5], [10, 5])
    assert not fits_memory([5, 5, 5], [7, 7])  # 15 bytes in 14 but no unit splits
