"""CIFAR-style ResNet-32 (He et al. 2016, Sec. 4.2), the TT-Edge workload.

3 stages of 5 basic blocks (16, 32, 64 channels), 3x3 convs, option-A shortcuts
(strided identity with zero channel padding, parameter-free): 31 conv kernels + 1 fc,
~0.46 M parameters. Input (N, 3, 32, 32), output logits (N, num_classes).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    """Two 3x3 convs with BN; option-A shortcut when the shape changes."""

    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.stride = stride
        self.pad = out_ch - in_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (N, in_ch, H, W) -> (N, out_ch, H/stride, W/stride)."""
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        short = x
        if self.stride != 1 or self.pad:
            short = x[:, :, :: self.stride, :: self.stride]
            half = self.pad // 2
            short = F.pad(short, (0, 0, 0, 0, half, self.pad - half))
        return F.relu(out + short)


class ResNetCifar(nn.Module):
    """ResNet-(6n+2) for 32x32 inputs.

    Parameters
    ----------
    blocks_per_stage : int
        n; 5 gives ResNet-32.
    num_classes : int
        Output logits.
    """

    def __init__(self, blocks_per_stage: int = 5, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers: list[nn.Module] = []
        in_ch = 16
        for stage, ch in enumerate((16, 32, 64)):
            for b in range(blocks_per_stage):
                stride = 2 if stage > 0 and b == 0 else 1
                layers.append(BasicBlock(in_ch, ch, stride))
                in_ch = ch
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (N, 3, 32, 32) -> logits (N, num_classes)."""
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        logits: torch.Tensor = self.fc(out)
        return logits


def resnet32(num_classes: int = 10) -> ResNetCifar:
    """ResNet-32 for CIFAR-10 (~0.46 M parameters)."""
    return ResNetCifar(5, num_classes)
