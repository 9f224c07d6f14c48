"""Matrix multiplication (Gaia's matrix-multiplication workload).

Request: ``{"n": 512, "seed": i}``; two n x n float32 matrices are generated on the
function's device from the seed and multiplied; returns the trace of the product.
"""

from __future__ import annotations

from typing import Any

import torch

DEVICE = "cpu"


def load(device: str) -> None:
    global DEVICE
    DEVICE = device


def make_request(params: dict[str, Any], i: int) -> dict[str, Any]:
    return {"n": int(params.get("n", 512)), "seed": i}


def handler(request: dict[str, Any]) -> dict[str, Any]:
    n = int(request.get("n", 512))
    g = torch.Generator().manual_seed(int(request.get("seed", 0)))
    a = torch.randn(n, n, generator=g).to(DEVICE)
    b = torch.randn(n, n, generator=g).to(DEVICE)
    c = a @ b
    return {"n": n, "trace": float(c.trace())}
