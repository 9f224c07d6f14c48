"""Shared fixtures: repo paths and a helper that finds processes a run left behind."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from testbed.reaper import processes_in

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def root() -> Path:
    return ROOT


def processes_under(folder: Path) -> list[psutil.Process]:
    """Live processes whose FLWR_HOME or command line points inside ``folder``."""
    return processes_in(folder)  # what the run's watchdog looks for, too
