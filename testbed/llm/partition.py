"""Offline partitioning of a model's units over a chain of nodes (Hyperion's BSDP).

A *chain* is an ordered list of nodes a request crosses (e.g. edge -> fog -> cloud).
A *cut* gives every node of the chain a contiguous, possibly empty, range of the
model's units (:mod:`nodes.llm.model`: embedding, blocks, head), in order, covering all.

Cost model of one stage (node ``n`` running units ``[a, b)``) for one request::

    stage_s(n, a, b) = sum(unit_s[n][a:b]) + link_s(n, in_bytes[a])
    link_s(n, B)     = messages * 2 * latency_s[n] + 8 * B / bandwidth_bps[n]

``unit_s`` are per-unit compute times on each node (profiled on this host, scaled by the
node's device profile), ``in_bytes[a]`` the bytes that enter unit ``a`` (token ids for
unit 0, hidden states otherwise; summed over the request's steps), ``messages`` the
steps of one request (prefill + decodes: each is a request and its answer over the
link, one round trip of the one-way ``latency_s``), and the link is the node's own
(what the bytes cross to reach it). A node's ``param_bytes[a:b]`` must fit its memory
cap.

BSDP (binary search + dynamic programme): the smallest bottleneck ``T`` for which a
feasible cut exists with every stage <= ``T`` is found by binary search over the sorted
candidate stage times; among the cuts reaching it, the DP returns the one with the
smallest total (latency of one request). :func:`brute_force` enumerates every cut (for
tests).

The baselines' partitions:

- :func:`balanced_cut` (GPipe, as torchgpipe's ``balance_by_time``): every node of the
  chain gets a non-empty contiguous range, chosen so the stages' *compute* times on their
  devices are balanced (the least largest ``sum(unit_s[i][a:b])``); links are not part
  of GPipe's balance.
- :func:`heft_placement` (HEFT, Topcuoglu et al. 2002): the units of one request are
  the tasks of a chain DAG; tasks are ranked by upward rank (mean compute over the
  nodes + mean communication to the successor + the successor's rank) and each, in
  decreasing rank, goes to the node with the earliest finish time. The placement may
  skip nodes and visit them in any order (a :data:`Placement`, not a :data:`Cut`).
- :func:`even_cut`: the blocks divided evenly by count (the old GPipe stand-in; tests).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Chain",
    "Cut",
    "Placement",
    "balanced_cut",
    "brute_force",
    "bsdp",
    "cut_cost",
    "cut_placement",
    "even_cut",
    "fits_memory",
    "heft_placement",
    "placement_cost",
    "upward_ranks",
]


@dataclass(frozen=True)
class Chain:
    """What partitioning knows of one chain of nodes.

    Attributes
    ----------
    nodes : tuple[str, ...]
        Node names in request order.
    unit_s : tuple[tuple[float, ...], ...]
        ``unit_s[i][u]``: compute time of unit ``u`` on node ``i``, s.
    in_bytes : tuple[int, ...]
        Bytes entering each unit.
    param_bytes : tuple[int, ...]
        Parameter bytes of each unit.
    mem_bytes : tuple[int, ...]
        Memory cap of each node, bytes.
    latency_s, bandwidth_bps : tuple[float, ...]
        Each node's link (``inf`` bandwidth: unlimited).
    messages : int
        Messages per request into each stage (each pays one round trip, 2 x latency).
    """

    nodes: tuple[str, ...]
    unit_s: tuple[tuple[float, ...], ...]
    in_bytes: tuple[int, ...]
    param_bytes: tuple[int, ...]
    mem_bytes: tuple[int, ...]
    latency_s: tuple[float, ...]
    bandwidth_bps: tuple[float, ...]
    messages: int = 1

    @property
    def n_units(self) -> int:
        return len(self.in_bytes)

    def link_s(self, i: int, n_bytes: int) -> float:
        """Time for one request's ``n_bytes`` to cross node ``i``'s link (every step's
        round trip included), s."""
        return 2 * self.messages * self.latency_s[i] + 8.0 * n_bytes / self.bandwidth_bps[i]

    def stage_s(self, i: int, a: int, b: int) -> float:
        """Time of node ``i`` running units ``[a, b)`` (0 for an empty stage)."""
        if b <= a:
            return 0.0
        return sum(self.unit_s[i][a:b]) + self.link_s(i, self.in_bytes[a])

    def fits(self, i: int, a: int, b: int) -> bool:
        return sum(self.param_bytes[a:b]) <= self.mem_bytes[i]


Cut = tuple[tuple[int, int], ...]
"""Each node's unit range ``(start, stop)``, in chain order (``start == stop``: none)."""


Placement = tuple[tuple[int, int, int], ...]
"""Each hop's ``(node index in the chain, start unit, stop unit)``, in request order; a
node may appear more than once and nodes need not be in chain order."""


def cut_placement(cut: Cut) -> Placement:
    """The hops of a cut (its non-empty stages, in chain order)."""
    return tuple((i, a, b) for i, (a, b) in enumerate(cut) if b > a)


def placement_cost(chain: Chain, placement: Placement) -> tuple[float, float]:
    """``(bottleneck, total)`` of a placement, s: the busiest node's summed hop times
    and the sum over hops (one request's modelled latency)."""
    per_node = [0.0] * len(chain.nodes)
    total = 0.0
    for i, a, b in placement:
        t = chain.stage_s(i, a, b)
        per_node[i] += t
        total += t
    return max(per_node), total


def cut_cost(chain: Chain, cut: Cut) -> tuple[float, float]:
    """``(bottleneck, total)`` stage time of a cut, s."""
    times = [chain.stage_s(i, a, b) for i, (a, b) in enumerate(cut)]
    return max(times), sum(times)


def _dp(chain: Chain, limit: float) -> Cut | None:
    """The cut with the smallest total among those with every stage <= ``limit`` and
    within memory (None: there is none). ``best[i][u]``: least total for nodes ``i..``
    covering units ``u..``."""
    n, m = len(chain.nodes), chain.n_units
    inf = math.inf
    best = [[inf] * (m + 1) for _ in range(n + 1)]
    choice = [[m] * (m + 1) for _ in range(n + 1)]
    best[n][m] = 0.0
    for i in range(n - 1, -1, -1):
        for u in range(m, -1, -1):
            for v in range(u, m + 1):
                if best[i + 1][v] == inf or not chain.fits(i, u, v):
                    continue
                t = chain.stage_s(i, u, v)
                if t <= limit and t + best[i + 1][v] < best[i][u]:
                    best[i][u], choice[i][u] = t + best[i + 1][v], v
    if best[0][0] == inf:
        return None
    cut, u = [], 0
    for i in range(n):
        v = choice[i][u]
        cut.append((u, v))
        u = v
    return tuple(cut)


def bsdp(chain: Chain) -> Cut:
    """Hyperion's offline partition of ``chain``: the least bottleneck, then the least
    total; raises ValueError when no cut fits the nodes' memory."""
    n, m = len(chain.nodes), chain.n_units
    cands = sorted(
        {chain.stage_s(i, a, b) for i in range(n) for a in range(m) for b in range(a + 1, m + 1)}
    )
    if _dp(chain, math.inf) is None:
        raise ValueError(
            f"the model ({sum(chain.param_bytes) / 2**20:.1f} MiB) does not fit the memory "
            f"of chain {list(chain.nodes)} under any cut"
        )
    lo, hi = 0, len(cands) - 1
    while lo < hi:  # the smallest candidate T with a feasible cut
        mid = (lo + hi) // 2
        if _dp(chain, cands[mid]) is None:
            lo = mid + 1
        else:
            hi = mid
    cut = _dp(chain, cands[lo])
    assert cut is not None
    return cut


def brute_force(chain: Chain) -> tuple[Cut, float]:
    """Every cut of ``chain`` tried: the best feasible one and its bottleneck (tests)."""
    n, m = len(chain.nodes), chain.n_units
    best: tuple[Cut, float] | None = None
    for bounds in itertools.combinations_with_replacement(range(m + 1), n - 1):
        edges = (0, *bounds, m)
        cut = tuple((edges[i], edges[i + 1]) for i in range(n))
        if not all(chain.fits(i, a, b) for i, (a, b) in enumerate(cut)):
            continue
        bott = cut_cost(chain, cut)[0]
        if best is None or bott < best[1]:
            best = (cut, bott)
    if best is None:
        raise ValueError("no cut fits")
    return best


def balanced_cut(chain: Chain) -> Cut:
    """GPipe's partition: every node a non-empty stage, the largest stage *compute* time
    on its device as small as possible (then the least total compute), within memory.

    Links are ignored, as in GPipe's balance (torchgpipe ``balance_by_time``); the
    stages' times come from ``chain.unit_s`` (profiled on this host, over each node's
    speed). Raises ValueError when the chain has more nodes than units or no such cut
    fits the nodes' memory.
    """
    n, m = len(chain.nodes), chain.n_units
    if n > m:
        raise ValueError(f"{n} stages for {m} units: GPipe gives every stage one unit or more")
    inf = (math.inf, math.inf)
    # best[i][u]: (bottleneck, total) compute of nodes i.. covering units u.., non-empty
    best = [[inf] * (m + 1) for _ in range(n + 1)]
    choice = [[m] * (m + 1) for _ in range(n + 1)]
    best[n][m] = (0.0, 0.0)
    for i in range(n - 1, -1, -1):
        for u in range(m - 1, -1, -1):
            for v in range(u + 1, m + 1):
                rest = best[i + 1][v]
                if rest == inf or not chain.fits(i, u, v):
                    continue
                t = sum(chain.unit_s[i][u:v])
                cand = (max(t, rest[0]), t + rest[1])
                if cand < best[i][u]:
                    best[i][u], choice[i][u] = cand, v
    if best[0][0] == inf:
        raise ValueError(f"no cut of {m} units into {n} non-empty stages fits the memory "
                         f"of chain {list(chain.nodes)}")  # fmt: skip
    cut, u = [], 0
    for i in range(n):
        cut.append((u, choice[i][u]))
        u = choice[i][u]
    return tuple(cut)


def upward_ranks(chain: Chain) -> list[float]:
    """HEFT's upward rank of every unit of one request's chain DAG, s.

    ``rank[u] = mean_w[u] + mean_c[u] + rank[u + 1]`` (the last unit: ``mean_w``), with
    ``mean_w[u]`` the unit's compute time averaged over the chain's nodes and
    ``mean_c[u]`` the transfer of its output (the bytes entering ``u + 1``) into a node,
    averaged over the nodes (:meth:`Chain.link_s`).
    """
    n, m = len(chain.nodes), chain.n_units
    ranks = [0.0] * m
    nxt = 0.0
    for u in range(m - 1, -1, -1):
        w = sum(chain.unit_s[i][u] for i in range(n)) / n
        c = 0.0
        if u + 1 < m:
            c = sum(chain.link_s(i, chain.in_bytes[u + 1]) for i in range(n)) / n
        ranks[u] = nxt = w + c + nxt
    return ranks


def heft_placement(chain: Chain) -> Placement:
    """HEFT's cut and placement of one request's units over the chain's nodes.

    Units are taken in decreasing upward rank (:func:`upward_ranks`); each goes to the
    node with the earliest finish time ``EFT = max(avail[p], ready_p) + unit_s[p][u]``,
    where ``ready_p`` is its predecessor's finish plus the transfer into ``p`` (none when
    the predecessor ran on ``p``; the first unit's input always crosses ``p``'s link,
    from the request's origin) and ``avail[p]`` when ``p`` finished its last unit. A node
    whose memory cannot also hold the unit's parameters is passed over; ties go to the
    earlier node. Consecutive units on one node form one hop. Raises ValueError when a
    unit fits no node.
    """
    n, m = len(chain.nodes), chain.n_units
    ranks = upward_ranks(chain)
    order = sorted(range(m), key=lambda u: (-ranks[u], u))
    avail, used = [0.0] * n, [0] * n
    where: dict[int, int] = {}
    finish: dict[int, float] = {}
    for u in order:
        pred = u - 1  # the chain DAG: unit u's only predecessor
        best: tuple[float, int] | None = None
        for p in range(n):
            if used[p] + chain.param_bytes[u] > chain.mem_bytes[p]:
                continue
            if pred < 0:
                ready = chain.link_s(p, chain.in_bytes[u])
            elif where[pred] == p:
                ready = finish[pred]
            else:
                ready = finish[pred] + chain.link_s(p, chain.in_bytes[u])
            eft = max(avail[p], ready) + chain.unit_s[p][u]
            if best is None or eft < best[0]:
                best = (eft, p)
        if best is None:
            raise ValueError(f"unit {u} fits the memory of no node of {list(chain.nodes)}")
        finish[u], where[u] = best
        avail[best[1]] = best[0]
        used[best[1]] += chain.param_bytes[u]
    hops: list[tuple[int, int, int]] = []
    for u in range(m):
        if hops and hops[-1][0] == where[u]:
            hops[-1] = (where[u], hops[-1][1], u + 1)
        else:
            hops.append((where[u], u, u + 1))
    return tuple(hops)


def even_cut(n_layers: int, n_nodes: int) -> Cut:
    """GPipe's split: the blocks divided as evenly as possible over every node (earlier
    nodes take the remainder), the embedding on the first node, the head on the last."""
    if n_nodes > n_layers:
        raise ValueError(f"{n_nodes} stages for {n_layers} layers: at most one stage per layer")
    base, extra = divmod(n_layers, n_nodes)
    sizes = [base + (i < extra) for i in range(n_nodes)]
    stops = [1 + sum(sizes[: i + 1]) for i in range(n_nodes)]
    stops[-1] = n_layers + 2  # the last stage also runs the head
    return tuple(zip([0, *stops[:-1]], stops, strict=True))


def fits_memory(param_bytes: Sequence[int], mem_bytes: Sequence[int]) -> bool:
    """Whether some cut puts every unit on the chain within the nodes' memory (greedy:
    each node takes as many units as fit, which is optimal for feasibility)."""
    u, m = 0, len(param_bytes)
    for cap in mem_bytes:
        used = 0
        while u < m and used + param_bytes[u] <= cap:
            used += param_bytes[u]
            u += 1
    return u == m
