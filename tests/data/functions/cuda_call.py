"""Run a linear layer after moving it to the GPU with .cuda()."""

import torch


def handler(request: dict) -> dict:
    layer = torch.nn.Linear(4, 2)
    layer = layer.cuda()
    x = torch.as_tensor(request["features"], dtype=torch.float32)
    return {"status": 200, "output": layer(x).tolist()}
