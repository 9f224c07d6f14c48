"""The request side of a pipeline: greedy generation through stage nodes over HTTP.

A request is a prefill step (the whole prompt) and ``new_tokens - 1`` decode steps (one
token each); each step enters the first hop's port (its node's link) and crosses every
hop's link on the way; the last step carries ``final`` so every stage frees the
request's KV cache.

GPipe's micro-batching (:func:`generate_batch`): a mini-batch of requests is split
into ``M`` micro-batches of near-equal size; each micro-batch steps through the hops as
one message per step (the stage runs its requests in one turn of its device), and the
micro-batches run concurrently, so while stage ``k`` serves micro-batch ``j`` stage
``k + 1`` serves micro-batch ``j - 1``. The call returns when every micro-batch is done
(GPipe's synchronous flush).

Times are **emulated** (:mod:`kernel.dilation`): a request's wall time over the run's
time-dilation factor, so a :class:`Generation`'s ``ttft_s`` / ``e2e_s`` are on the same
clock as the stages' device times and the partitioner's model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from kernel.dilation import emulated
from nodes.llm.wire import Client, encode

__all__ = [
    "BatchItem",
    "Generation",
    "HopPorts",
    "StepFailed",
    "generate_batch",
    "generate_micro_batch",
    "generate_remote",
    "split_micro_batches",
]

HopPorts = tuple[tuple[int, int, int], ...]
"""``(port reaching the node, start unit, stop unit)`` per hop."""


class StepFailed(RuntimeError):
    """A step did not come back (a hop down, or an error answer)."""


def first_hop(client: Client, first: tuple[int, int, int], body: bytes) -> dict[str, Any]:
    """POST one step to the pipeline's first hop (``(port, start, stop)``); its answer,
    or :class:`StepFailed` naming the hop's units (unreachable, or an error status)."""
    try:
        status, answer = client.post(first[0], "/step", body)
    except OSError as e:
        raise StepFailed(f"first hop (units {first[1]}-{first[2]}) unreachable: {e}") from e
    if status != 200:
        raise StepFailed(str(answer.get("error", f"HTTP {status}")))
    return answer


@dataclass
class Generation:
    """One served request (emulated times in s, from its start: wall / TDF)."""

    tokens: list[int] = field(default_factory=list)
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    hops: list[dict[str, Any]] = field(default_factory=list)
    bytes_sent: int = 0


def generate_remote(
    client: Client, ports: HopPorts, request: str, prompt: list[int], new_tokens: int
) -> Generation:
    """Generate ``new_tokens`` greedy tokens for ``prompt`` through the hops ``ports``.

    Raises
    ------
    StepFailed
        A step failed (with the failing hop's message when one answered).
    """
    if not ports:
        raise ValueError("an empty route")
    out = Generation()
    t0 = time.perf_counter()
    x = torch.tensor(prompt, dtype=torch.long)
    pos = 0
    first, rest = ports[0], [list(h) for h in ports[1:]]
    for k in range(new_tokens):
        header = {"request": request, "pos": pos, "start": first[1], "stop": first[2],
                  "next": rest, "final": k == new_tokens - 1}  # fmt: skip
        body = encode(header, x)
        out.bytes_sent += len(body)
        answer = first_hop(client, first, body)
        out.tokens.append(int(answer["token"]))
        out.hops.extend({**h, "step": k} for h in answer.get("hops", []))
        if k == 0:
            out.ttft_s = emulated(time.perf_counter() - t0)
        pos += x.shape[0]
        x = torch.tensor([out.tokens[-1]], dtype=torch.long)
    out.e2e_s = emulated(time.perf_counter() - t0)
    return out


@dataclass(frozen=True)
class BatchItem:
    """One request of a mini-batch: its id, prompt token ids and tokens to generate."""

    request: str
    prompt: list[int]
    new_tokens: int


def split_micro_batches(n: int, micro_batches: int) -> list[range]:
    """GPipe's split of ``n`` requests into ``min(n, micro_batches)`` contiguous
    micro-batches whose sizes differ by at most one (earlier ones take the remainder)."""
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be >= 1, not {micro_batches}")
    k = min(n, micro_batches)
    base, extra = divmod(n, k) if k else (0, 0)
    out, start = [], 0
    for j in range(k):
        size = base + (j < extra)
        out.append(range(start, start + size))
        start += size
    return out


def generate_micro_batch(
    client: Client, ports: HopPorts, items: Sequence[BatchItem]
) -> list[Generation]:
    """Generate every item's tokens through ``ports``, the items stepping together as one
    micro-batch (one message per step; an item leaves the batch after its last token).

    Each item's hop records carry the micro-batch's stage times divided by the number of
    requests in that step (``share``), so summing them over requests adds up to the
    stages' time. Raises StepFailed as :func:`generate_remote`.
    """
    if not ports:
        raise ValueError("an empty route")
    outs = [Generation() for _ in items]
    t0 = time.perf_counter()
    xs = [torch.tensor(it.prompt, dtype=torch.long) for it in items]
    pos = [0] * len(items)
    first, rest = ports[0], [list(h) for h in ports[1:]]
    for k in range(max(it.new_tokens for it in items)):
        active = [i for i, it in enumerate(items) if k < it.new_tokens]
        batch = [{"request": items[i].request, "pos": pos[i], "n": int(xs[i].shape[0]),
                  "final": k == items[i].new_tokens - 1} for i in active]  # fmt: skip
        header = {"request": items[active[0]].request, "pos": 0, "start": first[1],
                  "stop": first[2], "next": rest, "batch": batch}  # fmt: skip
        body = encode(header, torch.cat([xs[i] for i in active]))
        answer = first_hop(client, first, body)
        now = emulated(time.perf_counter() - t0)
        share = 1.0 / len(active)
        for i, tok in zip(active, answer["tokens"], strict=True):
            out = outs[i]
            out.tokens.append(int(tok))
            out.bytes_sent += len(body) // len(active)
            out.hops.extend(
                {**h, "step": k, "share": share, "device_ms": h["device_ms"] * share,
                 "queue_ms": h["queue_ms"] * share}
                for h in answer["hops"]
            )  # fmt: skip
            if k == 0:
                out.ttft_s = now
            if k == items[i].new_tokens - 1:
                out.e2e_s = now
            pos[i] += int(xs[i].shape[0])
            xs[i] = torch.tensor([int(tok)], dtype=torch.long)
    return outs


def generate_batch(
    client: Client,
    ports: HopPorts,
    items: Sequence[BatchItem],
    micro_batches: int,
    pool: Executor | None = None,
) -> list[Generation | StepFailed]:
    """Serve a GPipe mini-batch: ``items`` split into micro-batches
    (:func:`split_micro_batches`) that flow through ``ports`` concurrently; returns when
    all are done (the flush), each item's Generation or the StepFailed of its micro-batch.

    ``pool`` runs the micro-batches (at least ``micro_batches`` workers; a pool of
    that size is made for the call when None).
    """
    parts = split_micro_batches(len(items), micro_batches)
    own = pool is None
    ex = pool or ThreadPoolExecutor(max_workers=max(1, len(parts)))
    try:
        futs = [ex.submit(generate_micro_batch, client, ports, [items[i] for i in part])
                for part in parts]  # fmt: skip
        out: list[Generation | StepFailed] = []
        for part, fut in zip(parts, futs, strict=True):
            try:
                out.extend(fut.result())
            except StepFailed as e:
                out.extend([e] * len(part))
        return out
    finally:
        if own:
            ex.shutdown(wait=True)
