"""Fill a 10x100 buffer: exactly 1000 elements, which is not large."""

import torch


def handler(request: dict) -> dict:
    buffer = torch.zeros(10, 100)
    buffer += float(request.get("offset", 0.0))
    return {"status": 200, "mean": float(buffer.mean())}
