"""Task models registered by name: ``cnn`` and ``mlp`` (torch imported lazily)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kernel.registry import Registry, callable_hook

if TYPE_CHECKING:
    import torch

# factories ``fn(input_shape, num_classes, **params) -> nn.Module``
MODELS: Registry[Callable[..., Any]] = Registry(
    "model", validate=callable_hook("(input_shape, num_classes, **params) -> torch.nn.Module")
)
register_model = MODELS.register


#: Built-in models that need image input ``(C, H, W)``.
IMAGE_MODELS = frozenset({"cnn"})


@register_model("cnn")
def cnn(input_shape: tuple[int, ...], num_classes: int, width: int = 16, **_: object) -> Any:
    """Two 3x3 conv layers (width, 2*width), 2x2 max-pool, adaptive pool to 4x4, two FC.

    ``input_shape`` is ``(C, H, W)``; about 45k parameters at width 16 on 8x8 digits.
    """
    from torch import nn

    c = input_shape[0]
    return nn.Sequential(
        nn.Conv2d(c, width, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(2 * width * 16, 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


@register_model("mlp")
def mlp(input_shape: tuple[int, ...], num_classes: int, width: int = 64, **_: object) -> Any:
    """Flatten, then two hidden layers of ``width`` with ReLU."""
    import math

    from torch import nn

    d = math.prod(input_shape)
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(d, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, num_classes),
    )


def build_model(
    name: str, input_shape: tuple[int, ...], num_classes: int, **params: object
) -> torch.nn.Module:
    """Build registered model ``name``."""
    model: torch.nn.Module = MODELS[name](tuple(input_shape), num_classes, **params)
    return model
