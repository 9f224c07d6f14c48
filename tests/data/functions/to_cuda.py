"""Normalise a batch after moving it to the first GPU with .to("cuda:0")."""

import torch


def handler(request: dict) -> dict:
    batch = torch.as_tensor(request["batch"], dtype=torch.float32)
    batch = batch.to("cuda:0")
    normed = (batch - batch.mean()) / (batch.std() + 1e-6)
    return {"status": 200, "normed": normed.cpu().tolist()}
