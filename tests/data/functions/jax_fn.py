"""Accumulate into a 128x128 grid with jax.numpy imported as jnp."""

import jax.numpy as jnp


def handler(request: dict) -> dict:
    grid = jnp.ones((128, 128))
    grid = grid * float(request.get("weight", 1.0))
    return {"status": 200, "total": float(grid.sum())}
