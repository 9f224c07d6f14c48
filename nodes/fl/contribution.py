"""How much each silo's update contributed to a round's aggregate.

The value of a coalition ``S`` of the round's answering silos is the accuracy, on the
server's held-out test set, of the FedAvg of their updates (examples-weighted); the
empty coalition's value is the accuracy of the global model the round started from
(nobody contributed). Three estimates of each silo's share, all evaluated on real
aggregates:

- :func:`leave_one_out`: ``v(N) - v(N \\ {i})`` (n + 1 evaluations);
- :func:`shapley_exact`: the Shapley value, over every coalition (2^n evaluations;
  the round's recorder uses it up to :data:`EXACT_MAX` silos);
- :func:`shapley_monte_carlo`: the mean marginal contribution over random
  permutations of the silos (Castro, Gomez and Tejada 2009), with its standard error;
  evaluations of a coalition already seen are reused.

Contribution estimates in FL (e.g. Wang et al., "A principled approach to data
valuation for federated learning", 2020) use the same value function; Stricker et al.
(arXiv 2511.14456) estimate contributions with Shapley values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import combinations

import numpy as np

EXACT_MAX = 8  #: the most silos whose Shapley values are computed exactly (2^8 aggregates)

Value = Callable[[frozenset[int]], float]


class CachedValue:
    """``value`` memoised per coalition (a coalition's aggregate is evaluated once).

    Parameters
    ----------
    value : callable
        Coalition (frozenset of silo indices) -> accuracy.
    """

    def __init__(self, value: Value) -> None:
        self.value = value
        self.cache: dict[frozenset[int], float] = {}

    def __call__(self, coalition: frozenset[int]) -> float:
        if coalition not in self.cache:
            self.cache[coalition] = self.value(coalition)
        return self.cache[coalition]

    @property
    def evaluations(self) -> int:
        """Coalitions evaluated so far."""
        return len(self.cache)


def _cached(value: Value) -> CachedValue:
    """``value`` memoised (as it is when it already is: one cache per round's game)."""
    return value if isinstance(value, CachedValue) else CachedValue(value)


def leave_one_out(n: int, value: Value) -> list[float]:
    """``v(all) - v(all but i)`` for each of the ``n`` silos."""
    v = _cached(value)
    full = frozenset(range(n))
    return [v(full) - v(full - {i}) for i in range(n)]


def shapley_exact(n: int, value: Value) -> list[float]:
    """The Shapley value of each of ``n`` silos: the weighted mean of its marginal
    contribution ``v(S + i) - v(S)`` over every coalition ``S`` without it, with weight
    ``|S|! (n - |S| - 1)! / n!``. Efficiency holds: the values sum to ``v(all) - v({})``.
    """
    v = _cached(value)
    phi = [0.0] * n
    for i in range(n):
        others = [j for j in range(n) if j != i]
        for k in range(n):
            weight = math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n)
            for s in combinations(others, k):
                coalition = frozenset(s)
                phi[i] += weight * (v(coalition | {i}) - v(coalition))
    return phi


def shapley_monte_carlo(
    n: int, value: Value, permutations: int, seed: int
) -> tuple[list[float], list[float]]:
    """Permutation-sampling estimate of the Shapley values of ``n`` silos.

    Parameters
    ----------
    n : int
        Number of silos.
    value : callable
        Coalition -> accuracy.
    permutations : int
        Random orders of the silos to walk (each walk adds the silos one by one).
    seed : int
        Seed of the permutations (the estimate is reproducible).

    Returns
    -------
    tuple of list of float
        The estimates and their standard errors (std of the marginals / sqrt(samples)).
    """
    if permutations < 1:
        raise ValueError("permutations must be >= 1")
    v = _cached(value)
    rng = np.random.default_rng(seed)
    marginals = np.zeros((permutations, n))
    for p in range(permutations):
        coalition: frozenset[int] = frozenset()
        before = v(coalition)
        for i in rng.permutation(n):
            coalition = coalition | {int(i)}
            after = v(coalition)
            marginals[p, int(i)] = after - before
            before = after
    se = marginals.std(axis=0, ddof=1) / math.sqrt(permutations) if permutations > 1 else None
    return marginals.mean(axis=0).tolist(), (se.tolist() if se is not None else [math.nan] * n)
