"""--backend simulation refuses what it cannot simulate: exit 2, the key named, no store."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.backends import simulation
from testbed.cli import app

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = (ROOT / "experiments" / "quickstart.yaml").read_text()


def _run(tmp_path: Path, text: str) -> tuple[int, str]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    out = tmp_path / "runs"
    result = CliRunner().invoke(
        app, ["run", str(spec), "--backend", "simulation", "--out", str(out)]
    )
    assert not out.exists(), "nothing may be recorded"
    return result.exit_code, result.output + (result.stderr or "")


def test_a_link_the_clock_cannot_price_is_refused(tmp_path: Path) -> None:
    """A per-link ``kind: mmwave`` (its rate from a live radio simulation) is refused
    before anything is recorded, never run as an unlimited link."""
    radio = "  nodes:\n    edge-2: {kind: mmwave, latency_ms: 2}\n"
    code, text = _run(tmp_path, QUICKSTART.replace("links:\n", "links:\n" + radio))
    assert code == 2, text
    assert "links.nodes.edge-2.kind: kind: mmwave cannot be priced" in text


def test_fault_that_cannot_be_simulated_is_refused(tmp_path: Path) -> None:
    fault = (
        "faults:\n  - {kind: crash, node: edge-1, at_round: 2}\n"
        "  - {kind: superlink-restart, at_round: 2}\n"
    )
    code, text = _run(tmp_path, QUICKSTART + fault)
    assert code == 2, text
    assert "faults[1].kind" in text and "superlink-restart" in text


def test_missing_availability_trace_is_refused(tmp_path: Path) -> None:
    extra = "simulation:\n  availability: {path: /nonexistent/trace.csv}\n"
    code, text = _run(tmp_path, QUICKSTART + extra)
    assert code == 2, text
    assert "simulation.availability.path" in text and "no such file" in text


def test_ray_address_needs_the_simulation_backend(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(QUICKSTART)
    out = tmp_path / "runs"
    args = ["run", str(spec), "--ray-address", "127.0.0.1:1", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "--ray-address" in result.output + (result.stderr or "")


def test_missing_ray_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = simulation.importlib.util.find_spec
    monkeypatch.setattr(
        simulation.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "ray" else real(name, *a),
    )
    code, text = _run(tmp_path, QUICKSTART)
    assert code == 2, text
    assert "continuum-testbed[sim]" in text
