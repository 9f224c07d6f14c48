"""Two-layer perceptron with fixed weights (mode ``gpu_preferred``).

Request: ``{"batch": 256, "seed": i}``: a batch of 1024-dimensional inputs through two
1024 x 1024 layers with a ReLU between (about 1.1 GFLOP at batch 256). The weights are
large literal tensors (``torch.randn(1024, 1024)``: over a million elements), so Gaia's
identifier classifies the function ``gpu_preferred``: it starts on a GPU and the runtime
may demote it (e.g. when its request rate falls below Gaia's low-rate bound).
"""

from __future__ import annotations

from typing import Any

import torch

DEVICE = "cpu"
W1: torch.Tensor | None = None
W2: torch.Tensor | None = None


def load(device: str) -> None:
    """Create the weights on the backend's device (the cold start)."""
    global DEVICE, W1, W2
    DEVICE = device
    g = torch.Generator().manual_seed(0)
    W1 = (torch.randn(1024, 1024, generator=g) / 32.0).to(device)
    W2 = (torch.randn(1024, 1024, generator=g) / 32.0).to(device)


def make_request(params: dict[str, Any], i: int) -> dict[str, Any]:
    return {"batch": int(params.get("batch", 256)), "seed": i}


def handler(request: dict[str, Any]) -> dict[str, Any]:
    if W1 is None or W2 is None:
        load(DEVICE)
    assert W1 is not None and W2 is not None
    g = torch.Generator().manual_seed(int(request.get("seed", 0)))
    x = torch.randn(int(request.get("batch", 256)), 1024, generator=g).to(DEVICE)
    y = torch.relu(x @ W1) @ W2
    return {"batch": int(x.shape[0]), "mean": float(y.mean())}
