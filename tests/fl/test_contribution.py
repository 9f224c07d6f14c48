"""Contribution estimates against values known in closed form."""

from __future__ import annotations

import itertools
import math

import pytest

from nodes.fl.contribution import (
    CachedValue,
    leave_one_out,
    shapley_exact,
    shapley_monte_carlo,
)


def additive(weights: list[float]) -> CachedValue:
    """v(S) = sum of the members' weights: every estimate must return the weights."""
    return CachedValue(lambda s: sum(weights[i] for i in s))


def test_additive_game_every_estimate_returns_the_weights() -> None:
    w = [0.1, -0.05, 0.3, 0.0, 0.2]
    assert shapley_exact(5, additive(w)) == pytest.approx(w)
    assert leave_one_out(5, additive(w)) == pytest.approx(w)
    phi, se = shapley_monte_carlo(5, additive(w), permutations=10, seed=1)
    assert phi == pytest.approx(w) and se == pytest.approx([0.0] * 5, abs=1e-12)


def test_glove_game_shapley_differs_from_leave_one_out() -> None:
    """One left glove (0), two right gloves (1, 2); a pair is worth 1. Shapley: 2/3,
    1/6, 1/6 (textbook); leave-one-out gives 1, 0, 0 (the right gloves look useless)."""

    def v(s: frozenset[int]) -> float:
        return float(0 in s and bool(s & {1, 2}))

    phi = shapley_exact(3, v)
    assert phi == pytest.approx([2 / 3, 1 / 6, 1 / 6])
    assert sum(phi) == pytest.approx(v(frozenset({0, 1, 2})) - v(frozenset()))  # efficiency
    assert leave_one_out(3, v) == pytest.approx([1.0, 0.0, 0.0])


def test_exact_shapley_evaluates_each_coalition_once() -> None:
    calls: list[frozenset[int]] = []

    def v(s: frozenset[int]) -> float:
        calls.append(s)
        return len(s) ** 2 / 10

    shapley_exact(6, v)
    assert len(calls) == len(set(calls)) == 2**6


def test_monte_carlo_converges_to_the_exact_value_within_its_error() -> None:
    """A non-additive 10-silo game: the sampled estimate is within 4 standard errors of
    the exact value (computed here over all 1024 coalitions) for every silo."""
    n, w = 10, [0.02 * (i + 1) for i in range(10)]

    def v(s: frozenset[int]) -> float:
        return math.sqrt(sum(w[i] for i in s))  # concave: diminishing returns

    exact = shapley_exact(n, v)
    phi, se = shapley_monte_carlo(n, v, permutations=400, seed=7)
    for i in range(n):
        assert abs(phi[i] - exact[i]) <= 4 * se[i] + 1e-9, (i, phi[i], exact[i], se[i])
    assert shapley_monte_carlo(n, v, 400, seed=7)[0] == phi  # reproducible per seed
    assert sum(exact) == pytest.approx(v(frozenset(range(n))))


def test_permutations_must_be_positive() -> None:
    with pytest.raises(ValueError, match="permutations"):
        shapley_monte_carlo(3, lambda s: 0.0, permutations=0, seed=0)


def test_weights_match_the_formula() -> None:
    """Exact Shapley of a random game equals the permutation average over all n!."""
    n = 4
    vals = {
        frozenset(c): (hash(c) % 97) / 97
        for k in range(n + 1)
        for c in itertools.combinations(range(n), k)
    }
    v = vals.__getitem__
    perms = list(itertools.permutations(range(n)))
    brute = [0.0] * n
    for p in perms:
        s: frozenset[int] = frozenset()
        for i in p:
            brute[i] += (v(s | {i}) - v(s)) / len(perms)
            s = s | {i}
    assert shapley_exact(n, v) == pytest.approx(brute)
