"""Property-based fuzzing (hypothesis) of the spec loader, ``testbed validate`` and
``testbed run --set``: generated and mutated inputs end in a valid experiment or in
errors that each name a YAML path (and a line when they come from the file); never a
traceback, and a rejected input exits 2. ``make test`` runs a sample; ``make test-e2e``
the full count (tests/fuzz.py splits 10,000 inputs between the targets, the controller's
HTTP API included)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from typer.testing import CliRunner

from testbed.cli import app
from testbed.spec.loader import SpecError, parse_set, parse_spec
from tests.fuzz import (
    SIZES,
    SPECS,
    fuzz_settings,
    set_items,
    spec_bytes,
    spec_texts,
    structural,
)

SIZE_PARAMS = [pytest.param(s, marks=[pytest.mark.slow] if s == "full" else []) for s in SIZES]


def _check_problems(err: SpecError, from_yaml: bool) -> None:
    assert err.problems, "a SpecError lists its problems"
    for p in err.problems:
        assert isinstance(p.path, str) and p.message
        assert p.line >= (1 if from_yaml else 0), p
    assert str(err)  # renders


@pytest.mark.parametrize("size", SIZE_PARAMS)
def test_loader_takes_any_text(size: str) -> None:
    @fuzz_settings(0.25, size)
    @given(spec_texts())
    def check(text: str) -> None:
        try:
            parse_spec(text, "fuzz.yaml")
        except SpecError as e:
            _check_problems(e, from_yaml=False)

    check()


@pytest.mark.parametrize("size", SIZE_PARAMS)
def test_loader_mutated_real_specs_name_path_and_line(size: str) -> None:
    """Structural edits of real files: every problem has its path AND its line."""

    @fuzz_settings(0.15, size)
    @given(structural())
    def check(text: str) -> None:
        try:
            parse_spec(text, "fuzz.yaml")
        except SpecError as e:
            _check_problems(e, from_yaml=True)

    check()


def _invoke(args: list[str]):  # noqa: ANN202
    result = CliRunner().invoke(app, args, catch_exceptions=True)
    exc = result.exception
    assert exc is None or isinstance(exc, SystemExit), (
        f"traceback for {args}: {type(exc).__name__}: {exc}\n{result.output[-2000:]}"
    )
    assert "Traceback" not in result.output
    return result


@pytest.mark.parametrize("size", SIZE_PARAMS)
def test_cli_validate_exits_0_or_2(size: str) -> None:
    @fuzz_settings(0.2, size)
    @given(spec_bytes())
    def check(data: bytes) -> None:
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "spec.yaml"
            f.write_bytes(data)
            result = _invoke(["validate", str(f)])
            assert result.exit_code in (0, 2), result.output
            if result.exit_code == 2:
                assert "error" in result.stderr and "spec.yaml" in result.stderr

    check()


@pytest.mark.parametrize("size", SIZE_PARAMS)
def test_cli_run_set_rejects_before_anything_starts(size: str) -> None:
    """A spec that never validates (an unknown top-level key no override can remove),
    with generated overrides: exit 2 with the problems, and no run store is created."""

    @fuzz_settings(0.15, size)
    @given(set_items())
    def check(items: list[str]) -> None:
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "spec.yaml"
            f.write_text(SPECS["quickstart.yaml"] + "\nzz_not_a_key: 1\n")
            args = ["run", str(f), "--out", str(Path(d) / "runs")]
            for item in items:
                args += ["--set", item]
            result = _invoke(args)
            assert result.exit_code == 2, result.output
            assert "--set" in result.stderr or "zz_not_a_key" in result.stderr
            assert not (Path(d) / "runs").exists()

    check()


def test_known_bad_inputs_are_reported_once_with_their_line(tmp_path: Path) -> None:
    """The cases issue 14 lists, each by hand."""
    quick = SPECS["quickstart.yaml"]
    f = tmp_path / "random.yaml"
    f.write_bytes(bytes(range(256)) * 2)
    result = _invoke(["validate", str(f)])
    assert result.exit_code == 2 and "not UTF-8" in result.stderr
    with pytest.raises(SpecError) as e:
        parse_spec(quick.replace("bandwidth_mbps: 100,", "bandwidth_mbps: 1e309,"))
    [(path, line)] = [(p.path, p.line) for p in e.value.problems]
    assert (path, line) == ("links.defaults.edge-cloud.bandwidth_mbps", 12)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(quick + "\nsweep:\n  grid:\n    workload.fl.nope: [1, 2, 3]\n")
    result = _invoke(["validate", str(sweep)])
    assert result.exit_code == 2
    assert result.stderr.count("workload.fl.nope: unknown key") == 1
    with pytest.raises(SpecError) as e:
        parse_set(["seed=[", "noequals"])
    assert [p.path for p in e.value.problems] == ["seed", "noequals"]
