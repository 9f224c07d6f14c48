"""A real simulation run's terminal summary and ``testbed show`` say what is true: the
round times are the virtual clock's (beside the wall's), per-node memory is not
measured ("-", not 0), the links are modelled; the summary dict records all of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.store import RunStore

pytestmark = pytest.mark.slow  # one simulation run: ~30 s idle, longer on a busy host

ROOT = Path(__file__).resolve().parents[2]


def _testbed(*args: str) -> tuple[int, list[str]]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-m", "testbed", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    text = res.stdout + res.stderr
    return res.returncode, [" ".join(ln.replace("│", " ").split()) for ln in text.splitlines()]


def test_simulation_summary_is_virtual_in_run_and_show(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    spec = str(ROOT / "experiments" / "quickstart.yaml")
    code, run_lines = _testbed(
        "run", spec, "--backend", "simulation", "--set", "workload.fl.rounds=1", "--out", str(out)
    )
    assert code == 0, "\n".join(run_lines[-40:])
    run = RunStore(out).runs()[0]
    s = run.summary_dict
    virtual_s = s["virtual_round_s"]["1"]
    assert virtual_s > 0 and s["virtual_time_s"] == pytest.approx(virtual_s)
    assert s["clock"] == "virtual" and s["links_mode"] == "proxy"
    assert s["link_kinds"] == {"proxy": 4} and "no traffic is shaped" in s["links_modelled"]
    assert set(s["peak_rss_mb"]) == {"simulation"}  # one process tree, not per node
    wall_s = s["round_duration_s"]["1"]
    _, show_lines = _testbed("show", run.run_id, "--out", str(out))
    for lines in (run_lines, show_lines):
        assert "accuracy per round (simulation: virtual clock)" in lines, lines
        assert not any("(measured)" in ln for ln in lines)
        row = next(ln for ln in lines if ln.startswith("1 "))  # round 1
        assert row.endswith(f"{virtual_s:.3f} {wall_s:.3f}"), row  # virtual, then wall
        for node in ("edge-1", "edge-2", "edge-3", "fog"):
            assert f"{node} 1 0 0 -" in lines, lines  # not measured: "-", never 0
        assert "peak RSS -: not measured for the node" in lines
        assert any(ln.startswith("peak RSS MB, not client nodes: simulation ") for ln in lines)
        assert any(ln.startswith("clock: virtual (modelled") for ln in lines)
        assert any(ln.startswith("links: proxy (proxy x4); priced on the virtual") for ln in lines)
