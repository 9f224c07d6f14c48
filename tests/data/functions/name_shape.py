"""Random matrix whose shape comes from the request: the size is unknown statically."""

import torch


def handler(request: dict) -> dict:
    n = int(request.get("n", 8))
    a = torch.randn(n, n)
    return {"status": 200, "trace": float(a.trace())}
