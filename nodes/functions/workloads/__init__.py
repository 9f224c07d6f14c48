"""Built-in serverless functions (Gaia's evaluation workloads): one module each.

A function module defines ``handler(request: dict) -> dict``; optionally
``load(device: str) -> None`` (the cold start: build or load the model once per backend)
and ``make_request(params: dict, i: int) -> dict`` (the client side: request ``i``).
"""

from __future__ import annotations

from pathlib import Path

BUILTIN = ("matmul", "cnn", "textgen", "idle", "conv", "mlp")


def module_path(name: str) -> Path:
    """Path of a built-in function module, or ``name`` itself when it is a file path."""
    if name in BUILTIN:
        return Path(__file__).with_name(f"{name}.py")
    return Path(name)
