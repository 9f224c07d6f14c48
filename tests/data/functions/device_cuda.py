"""Score inputs on a device chosen as torch.device("cuda")."""

import torch

DEVICE = torch.device("cuda")


def handler(request: dict) -> dict:
    x = torch.as_tensor(request["x"], dtype=torch.float32, device=DEVICE)
    return {"status": 200, "score": float(torch.sigmoid(x).sum())}
