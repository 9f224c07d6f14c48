"""Partitioners: split sample indices into silos, registered by name.

All take labels ``y`` (shape ``(n,)``), the number of partitions and a numpy
``Generator`` and return a list of index arrays, one per silo.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from kernel.registry import Registry, callable_hook

Partitioner = Callable[..., Sequence[np.ndarray]]
PARTITIONERS: Registry[Partitioner] = Registry(
    "partitioner",
    validate=callable_hook("(y, num_partitions, rng, **params) -> sequence of index arrays"),
)
register_partitioner = PARTITIONERS.register


class EqualParts(Sequence[np.ndarray]):
    """``np.array_split(order, k)`` with each part sorted, made on first use: part ``p``
    is the same array the eager split gives, without a million arrays up front.

    Parameters
    ----------
    order : numpy.ndarray
        Sample indices in the order they are dealt, shape ``(n,)``.
    k : int
        Number of parts (the first ``n % k`` parts hold one more index).
    """

    def __init__(self, order: np.ndarray, k: int) -> None:
        if k < 1:
            raise ValueError(f"num_partitions: {k} (at least 1)")
        self.order, self.k = order, k
        self._q, self._r = divmod(len(order), k)

    def __len__(self) -> int:
        return self.k

    def bounds(self, p: int) -> tuple[int, int]:
        """Start and end of part ``p`` in ``order``."""
        q, r = self._q, self._r
        start = p * q + min(p, r)
        return start, start + q + (p < r)

    def __getitem__(self, p: int) -> np.ndarray:  # type: ignore[override]
        if not isinstance(p, int | np.integer):
            raise TypeError("EqualParts takes one integer index")
        if p < 0:
            p += self.k
        if not 0 <= p < self.k:
            raise IndexError(p)
        a, b = self.bounds(int(p))
        return np.sort(self.order[a:b])

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[p] for p in range(self.k))


@register_partitioner("iid")
def iid(
    y: np.ndarray, num_partitions: int, rng: np.random.Generator, **_: object
) -> Sequence[np.ndarray]:
    """Uniformly random, equal-sized silos (each made on first use: :class:`EqualParts`)."""
    return EqualParts(rng.permutation(len(y)), num_partitions)


@register_partitioner("dirichlet")
def dirichlet(
    y: np.ndarray,
    num_partitions: int,
    rng: np.random.Generator,
    alpha: float = 0.5,
    min_partition_size: int = 10,
    **_: object,
) -> list[np.ndarray]:
    """Label skew: each class's samples spread over silos by Dirichlet(alpha) proportions.

    Small alpha gives few classes per silo; alpha -> infinity approaches IID. Re-draws
    (up to 100 times) until every silo has ``min_partition_size`` samples.
    """
    classes = np.unique(y)
    for _attempt in range(100):
        parts: list[list[int]] = [[] for _ in range(num_partitions)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(y == c))
            props = rng.dirichlet(np.full(num_partitions, alpha))
            cuts = (np.cumsum(props) * len(idx)).astype(int)[:-1]
            for p, chunk in enumerate(np.split(idx, cuts)):
                parts[p].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_partition_size:
            break
    return [np.sort(np.array(p, dtype=np.int64)) for p in parts]


@register_partitioner("k-classes")
def k_classes(
    y: np.ndarray,
    num_partitions: int,
    rng: np.random.Generator,
    classes_per_silo: int = 2,
    **_: object,
) -> list[np.ndarray]:
    """Pathological skew: each silo holds ``classes_per_silo`` classes (McMahan et al.).

    Classes are dealt round-robin so every class is owned by at least one silo when
    ``num_partitions * classes_per_silo >= num_classes``; a class's samples are split
    evenly among its owners.
    """
    classes = rng.permutation(np.unique(y))
    owners: dict[int, list[int]] = {int(c): [] for c in classes}
    for p in range(num_partitions):
        for j in range(classes_per_silo):
            c = int(classes[(p * classes_per_silo + j) % len(classes)])
            owners[c].append(p)
    parts: list[list[int]] = [[] for _ in range(num_partitions)]
    for c, ps in owners.items():
        if not ps:
            continue
        idx = rng.permutation(np.flatnonzero(y == c))
        for p, chunk in zip(ps, np.array_split(idx, len(ps)), strict=True):
            parts[p].extend(chunk.tolist())
    return [np.sort(np.array(p, dtype=np.int64)) for p in parts]


@register_partitioner("quantity-skew")
def quantity_skew(
    y: np.ndarray,
    num_partitions: int,
    rng: np.random.Generator,
    alpha: float = 0.5,
    min_partition_size: int = 10,
    **_: object,
) -> list[np.ndarray]:
    """Quantity skew: silo sizes drawn from Dirichlet(alpha), labels IID within a silo."""
    n = len(y)
    props = rng.dirichlet(np.full(num_partitions, alpha))
    sizes = np.maximum((props * n).astype(int), min_partition_size)
    sizes = np.floor(sizes / sizes.sum() * n).astype(int)
    perm = rng.permutation(n)
    cuts = np.cumsum(sizes)[:-1]
    return [np.sort(p) for p in np.split(perm, cuts)]


def partition(
    name: str, y: np.ndarray, num_partitions: int, seed: int, **params: object
) -> Sequence[np.ndarray]:
    """Run partitioner ``name`` with a generator seeded by ``seed``."""
    return PARTITIONERS[name](y, num_partitions, np.random.default_rng(seed), **params)
