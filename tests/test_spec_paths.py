"""Files a spec names are read from the spec's own folder and checked when it loads
(issue 31): ``validate`` refuses what ``run`` would fail on, whatever the directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from testbed.spec.loader import SpecError, expand, load_spec

ROOT = Path(__file__).resolve().parent.parent

FL = """\
name: paths
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, count: 2}}
workload:
  fl:
    rounds: 1
    dataset: {{name: npz, path: {path}}}
"""


def _spec(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "x.yaml").write_text(text)
    return folder / "x.yaml"


def test_relative_dataset_path_is_read_from_the_spec_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(0)
    (tmp_path / "spec" / "data").mkdir(parents=True)
    np.savez(tmp_path / "spec" / "data" / "d.npz", x=rng.random((20, 4)), y=np.arange(20) % 2)
    spec = _spec(tmp_path / "spec", FL.format(path="data/d.npz"))
    monkeypatch.chdir(tmp_path)  # elsewhere: not the spec's folder
    exp = load_spec(spec)
    assert exp.workload.fl is not None
    assert exp.workload.fl.dataset.path == str(tmp_path / "spec" / "data" / "d.npz")
    # a sweep's combinations resolve the same way
    assert expand(spec)[0][1].workload.fl.dataset.path == exp.workload.fl.dataset.path  # type: ignore[union-attr]


def test_a_file_that_is_not_an_npz_is_refused_at_load(tmp_path: Path) -> None:
    (tmp_path / "shadow").write_text("root:*:19000:0:99999:7:::\n")
    spec = _spec(tmp_path, FL.format(path="shadow"))
    with pytest.raises(SpecError) as e:
        load_spec(spec)
    (problem,) = e.value.problems
    assert problem.path == "workload.fl.dataset" and problem.line == 9
    assert "is not a .npz file" in problem.message and str(tmp_path / "shadow") in problem.message


def test_a_missing_trace_names_the_field_and_the_folder(tmp_path: Path) -> None:
    text = (ROOT / "experiments" / "gaia.yaml").read_text()
    spec = _spec(tmp_path, text)  # the same spec, without its traces/ folder beside it
    with pytest.raises(SpecError) as e:
        load_spec(spec)
    msgs = [f"{p.path}: {p.message}" for p in e.value.problems]
    assert any(
        ".arrivals.trace" in m and "no such file: traces/azure_functions_burst.csv" in m
        and str(tmp_path) in m
        for m in msgs
    ), msgs


def test_shipped_experiments_load_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gaia.yaml (a trace) and leo_fl.yaml load with the current directory elsewhere."""
    monkeypatch.chdir(tmp_path)
    exp = load_spec(ROOT / "experiments" / "gaia.yaml")
    assert exp.workload.functions is not None
    traces = [f.arrivals.trace for f in exp.workload.functions.functions if f.arrivals.trace]
    assert traces == [str(ROOT / "experiments" / "traces" / "azure_functions_burst.csv")]
    load_spec(ROOT / "experiments" / "leo_fl.yaml")


def test_edited_text_reads_paths_from_the_experiments_folder(tmp_path: Path) -> None:
    """The dashboard validates and launches edited YAML text saved elsewhere: its
    relative paths point into the experiments folder (``--spec-dir``), as for the file."""
    from testbed.controller.service import Controller

    text = (ROOT / "experiments" / "gaia.yaml").read_text()
    ctl = Controller(tmp_path / "store", ROOT / "experiments")
    assert ctl.validate(text, "gaia-edited.yaml", [])["ok"] is True
    copy = _spec(tmp_path / "elsewhere", text)
    cli = [sys.executable, "-m", "testbed", "validate", str(copy)]
    refused = subprocess.run(cli, capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 2 and "arrivals.trace" in refused.stderr, refused.stderr
    with_dir = [*cli, "--spec-dir", str(ROOT / "experiments")]
    ok = subprocess.run(with_dir, capture_output=True, text=True, cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
