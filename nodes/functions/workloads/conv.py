"""Convolution stack written for CUDA (mode ``gpu``): the developer pins it to the GPU.

Request: ``{"side": 96, "seed": i}``: a batch of 4 RGB images of ``side`` x ``side``
pixels through 4 3x3 convolutions (widths 32-64-64-64). The code asks for
``torch.device("cuda")`` explicitly, so Gaia's identifier classifies it ``gpu``: it
starts on a GPU and the runtime never moves it. On a CPU backend (no CUDA here: the
emulated GPU runs it on this host's CPU) the same layers run on the CPU.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

MODEL: nn.Module | None = None
DEVICE = torch.device("cpu")


def _build() -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for c_in, c_out in ((3, 32), (32, 64), (64, 64), (64, 64)):
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()


def load(device: str) -> None:
    """Build the model on the GPU when the backend has CUDA (the cold start)."""
    global MODEL, DEVICE
    DEVICE = torch.device("cuda") if device == "cuda" else torch.device(device)
    MODEL = _build().to(DEVICE)


def make_request(params: dict[str, Any], i: int) -> dict[str, Any]:
    return {"side": int(params.get("side", 96)), "seed": i}


def handler(request: dict[str, Any]) -> dict[str, Any]:
    global MODEL
    if MODEL is None:
        MODEL = _build().to(DEVICE)
    side = int(request.get("side", 96))
    g = torch.Generator().manual_seed(int(request.get("seed", 0)))
    x = torch.rand(4, 3, side, side, generator=g).to(DEVICE)
    with torch.no_grad():
        feats = MODEL(x)
    return {"side": side, "norm": float(feats.norm())}
