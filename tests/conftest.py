"""Shared fixtures: repo paths and a helper that finds processes a run left behind."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def root() -> Path:
    return ROOT


def processes_under(folder: Path) -> list[psutil.Process]:
    """Live processes whose FLWR_HOME or command line points inside ``folder``."""
    folder = str(folder)
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.pid == os.getpid():
            continue
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            env = p.environ().get("FLWR_HOME", "")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if folder in env or folder in cmd:
            found.append(p)
    return found
