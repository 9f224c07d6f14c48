"""CNN image classification (Gaia's ResNet-18 workload, scaled to this testbed).

A residual CNN (ResNet-style basic blocks, widths 32-64-128) on 3 x 64 x 64 images,
10 classes, weights initialised from a fixed seed (no download; the point is the compute
and the cold start, not the accuracy). ``load`` builds the model on the device: that is
the function's cold start. The client sends the image as base64 uint8 (12 KiB), so the
payload crosses the emulated link.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import torch
from torch import nn

SIDE = 64
MODEL: nn.Module | None = None
DEVICE = "cpu"


class Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.skip = (
            nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
            if stride != 1 or c_in != c_out
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))


def build() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, 1, 1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        Block(32, 32, 1),
        Block(32, 64, 2),
        Block(64, 128, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    ).eval()


def load(device: str) -> None:
    global MODEL, DEVICE
    DEVICE = device
    MODEL = build().to(device)


def _model() -> nn.Module:
    """The model, built on ``DEVICE`` when ``load`` was not called."""
    global MODEL
    if MODEL is None:
        MODEL = build().to(DEVICE)
    return MODEL


def make_request(params: dict[str, Any], i: int) -> dict[str, Any]:
    rng = np.random.default_rng(i)
    img = rng.integers(0, 256, size=(3, SIDE, SIDE), dtype=np.uint8)
    return {"image_b64": base64.b64encode(img.tobytes()).decode(), "i": i}


def handler(request: dict[str, Any]) -> dict[str, Any]:
    model = _model()
    raw = np.frombuffer(base64.b64decode(request["image_b64"]), dtype=np.uint8)
    x = torch.from_numpy(raw.reshape(1, 3, SIDE, SIDE).astype(np.float32) / 255.0).to(DEVICE)
    with torch.no_grad():
        logits = model(x)
    return {"class": int(logits.argmax(1)), "score": float(logits.max())}
