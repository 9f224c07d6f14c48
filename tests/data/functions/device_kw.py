"""Allocate the accumulator directly on the GPU with a device="cuda" keyword."""

import torch


def handler(request: dict) -> dict:
    acc = torch.ones(8)
    acc = torch.zeros(8, device="cuda")
    acc += float(request.get("step", 1.0))
    return {"status": 200, "total": float(acc.sum())}
