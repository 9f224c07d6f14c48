"""Fixtures of the radio tests: one seeded runtime per test."""

from __future__ import annotations

import pytest


@pytest.fixture
def rt():
    """Radio runtime on CPU with seed 0 (seeds Sionna's single random source)."""
    from radio.runtime import resolve_runtime

    return resolve_runtime(0, "cpu")
