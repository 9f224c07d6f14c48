"""The request side of a pipeline: greedy generation through stage nodes over HTTP.

A request is a prefill step (the whole prompt) and ``new_tokens - 1`` decode steps (one
token each); each step enters the first hop's port (its node's link) and crosses every
hop's link on the way; the last step carries ``final`` so every stage frees the
request's KV cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from nodes.llm.wire import Client, encode

__all__ = ["Generation", "HopPorts", "StepFailed", "generate_remote"]

HopPorts = tuple[tuple[int, int, int], ...]
"""``(port reaching the node, start unit, stop unit)`` per hop."""


class StepFailed(RuntimeError):
    """A step did not come back (a hop down, or an error answer)."""


@dataclass
class Generation:
    """One served request (times in s, from its start)."""

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
        try:
            status, answer = client.post(first[0], "/step", body)
        except OSError as e:
            raise StepFailed(f"first hop (units {first[1]}-{first[2]}) unreachable: {e}") from e
        if status != 200:
            raise StepFailed(str(answer.get("error", f"HTTP {status}")))
        out.tokens.append(int(answer["token"]))
        out.hops.extend({**h, "step": k} for h in answer.get("hops", []))
        if k == 0:
            out.ttft_s = time.perf_counter() - t0
        pos += x.shape[0]
        x = torch.tensor([out.tokens[-1]], dtype=torch.long)
    out.e2e_s = time.perf_counter() - t0
    return out
