"""Small training utilities: a digits CNN, time-capped training, fine-tuning, accuracy."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from nodes.compression.data import Split


class DigitsCNN(nn.Module):
    """CNN for (N, 1, 8, 8) digits: 3 convs (16, 32, 64) + 2 fc, ~57 k parameters."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.conv3 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 2 * 2, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (N, 1, 8, 8) -> logits (N, num_classes)."""
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.max_pool2d(F.relu(self.conv3(x)), 2)
        logits: torch.Tensor = self.fc2(F.relu(self.fc1(x.flatten(1))))
        return logits


def train_steps(
    model: nn.Module,
    data: Split,
    steps: int,
    lr: float,
    batch_size: int,
    seed: int,
    max_seconds: float | None = None,
) -> dict[str, float]:
    """Adam on cross-entropy for ``steps`` mini-batches (or until ``max_seconds``).

    Parameters
    ----------
    model : nn.Module
        Trained in place.
    data : Split
        Training data.
    steps : int
        Mini-batch steps.
    lr : float
        Adam learning rate.
    batch_size : int
        Samples per step.
    seed : int
        Seed of the sampling order.
    max_seconds : float, optional
        Wall-clock cap (s).

    Returns
    -------
    dict
        ``steps`` done, ``seconds`` (measured), ``final_loss``.
    """
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    n = len(data.y)
    t0 = time.perf_counter()
    loss_v = float("nan")
    done = 0
    perm = torch.randperm(n, generator=gen)
    pos = 0
    for _ in range(steps):
        if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
            break
        if pos + batch_size > n:
            perm = torch.randperm(n, generator=gen)
            pos = 0
        idx = perm[pos : pos + batch_size]
        pos += batch_size
        loss = F.cross_entropy(model(data.x[idx]), data.y[idx])
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves backward unannotated
        opt.step()
        loss_v = float(loss.detach())
        done += 1
    return {"steps": done, "seconds": time.perf_counter() - t0, "final_loss": loss_v}


@torch.no_grad()
def accuracy(model: nn.Module, data: Split, batch_size: int = 512) -> float:
    """Top-1 accuracy in [0, 1] (eval mode)."""
    model.eval()
    correct = 0
    for i in range(0, len(data.y), batch_size):
        pred = model(data.x[i : i + batch_size]).argmax(1)
        correct += int((pred == data.y[i : i + batch_size]).sum())
    return correct / max(len(data.y), 1)
