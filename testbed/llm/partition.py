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
tests), :func:`even_cut` is the GPipe baseline (layers split evenly over all nodes).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Chain", "Cut", "bsdp", "brute_force", "cut_cost", "even_cut", "fits_memory"]


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

    def stage_s(self, i: int, a: int, b: int) -> float:
        """Time of node ``i`` running units ``[a, b)`` (0 for an empty stage)."""
        if b <= a:
            return 0.0
        rtt = 2 * self.messages * self.latency_s[i]
        link = rtt + 8.0 * self.in_bytes[a] / self.bandwidth_bps[i]
        return sum(self.unit_s[i][a:b]) + link

    def fits(self, i: int, a: int, b: int) -> bool:
        return sum(self.param_bytes[a:b]) <= self.mem_bytes[i]


Cut = tuple[tuple[int, int], ...]
"""Each node's unit range ``(start, stop)``, in chain order (``start == stop``: none)."""


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
