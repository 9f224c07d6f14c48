"""Multiply a random 64x64 matrix with itself: 4096 elements, a large tensor."""

import torch


def handler(request: dict) -> dict:
    torch.manual_seed(int(request.get("seed", 0)))
    a = torch.randn(64, 64)
    return {"status": 200, "trace": float((a @ a).trace())}
