"""Noise generator using a name imported from torch: randn is torch.randn."""

from torch import randn


def handler(request: dict) -> dict:
    noise = randn(40, 40)
    scale = float(request.get("scale", 1.0))
    return {"status": 200, "energy": float((scale * noise).pow(2).sum())}
