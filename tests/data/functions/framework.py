"""Sum a vector with torch: the framework is imported, but no tensor is GPU-sized."""

import torch


def handler(request: dict) -> dict:
    values = torch.as_tensor(request["values"], dtype=torch.float32)
    return {"status": 200, "sum": float(values.sum())}
