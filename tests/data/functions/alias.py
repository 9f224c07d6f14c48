"""Random projection with torch imported under an alias: T.randn is torch.randn."""

import torch as T


def handler(request: dict) -> dict:
    projection = T.randn(64, 64)
    x = T.as_tensor(request["x"], dtype=T.float32)
    return {"status": 200, "projected": (projection @ x).tolist()}
