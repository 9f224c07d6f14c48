"""Spec loading: good files load; each kind of bad file names the right path and line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.spec.loader import SpecError, expand, load_spec, parse_set, parse_spec

GOOD = """\
name: ok
seed: 3
fleet:
  nodes:
    - {id: cloud, tier: cloud}
    - {id: edge, tier: edge, profile: rpi5, count: 2}
links:
  defaults:
    edge-cloud: {bandwidth_mbps: 10, latency_ms: 20}
  nodes:
    edge-2: {bandwidth_mbps: 1}
workload:
  fl: {rounds: 2}
"""


def problems(text: str) -> list[tuple[int, str, str]]:
    with pytest.raises(SpecError) as e:
        parse_spec(text, "x.yaml")
    return [(p.line, p.path, p.message) for p in e.value.problems]


def test_good_files_load(root: Path) -> None:
    exp = parse_spec(GOOD)
    assert exp.seed == 3 and exp.workload.fl.rounds == 2
    assert exp.fleet.nodes[1].names() == ["edge-1", "edge-2"]
    for f in ("quickstart.yaml", "reference.yaml"):
        load_spec(root / "experiments" / f)


def test_unknown_key_names_path_and_line() -> None:
    text = GOOD.replace(
        "    - {id: cloud, tier: cloud}", "    - {id: cloud, tier: cloud, colour: red}"
    )
    assert problems(text) == [(5, "fleet.nodes.0.colour", "unknown key")]


def test_wrong_type() -> None:
    [(line, path, msg)] = problems(GOOD.replace("seed: 3", "seed: three"))
    assert (line, path) == (2, "seed") and "integer" in msg


def test_negative_bandwidth() -> None:
    [(line, path, msg)] = problems(GOOD.replace("bandwidth_mbps: 10", "bandwidth_mbps: -10"))
    assert (line, path) == (9, "links.defaults.edge-cloud.bandwidth_mbps")
    assert "greater than 0" in msg


def test_node_referenced_but_not_defined() -> None:
    [(line, path, msg)] = problems(GOOD.replace("    edge-2:", "    edge-9:"))
    assert (line, path) == (11, "links.nodes.edge-9") and "not defined" in msg


def test_empty_fleet() -> None:
    text = GOOD.replace(
        "    - {id: cloud, tier: cloud}\n    - {id: edge, tier: edge, profile: rpi5, count: 2}\n",
        "    []\n",
    )
    text = text.replace("  nodes:\n    []", "  nodes: []")
    found = problems(text)
    assert (4, "fleet.nodes") in [(line, path) for line, path, _ in found]


def test_every_error_at_once() -> None:
    text = GOOD.replace("seed: 3", "seed: x").replace("tier: edge,", "tier: mist,")
    text = text.replace("    edge-2:", "    fog-1:")
    paths = [p for _l, p, _m in problems(text)]
    assert paths == ["seed", "fleet.nodes.1.tier", "links.nodes.fog-1"]


def test_unknown_registered_names_list_choices() -> None:
    [(line, path, msg)] = problems(
        GOOD.replace("fl: {rounds: 2}", "fl: {rounds: 2, model: {name: vit}}")
    )
    assert path == "workload.fl.model.name" and "cnn" in msg and line == 13


def test_set_overrides_and_sweep(tmp_path: Path) -> None:
    exp = parse_spec(GOOD, overrides=parse_set(["workload.fl.rounds=7", "seed=9"]))
    assert exp.workload.fl.rounds == 7 and exp.seed == 9
    f = tmp_path / "s.yaml"
    f.write_text(
        GOOD + "sweep:\n  grid:\n    workload.fl.partitioner.alpha: [0.1, 1.0]\n"
        "    workload.fl.partitioner.name: [dirichlet]\n"
    )
    runs = expand(f)
    assert [a["workload.fl.partitioner.alpha"] for a, _ in runs] == [0.1, 1.0]
    assert runs[0][1].workload.fl.partitioner.alpha == 0.1


def test_cli_validate_exit_code_2(tmp_path: Path) -> None:
    folder = tmp_path / ("a-folder-whose-name-is-long-" * 4)  # a path past 80 columns
    folder.mkdir()
    bad = folder / "bad.yaml"
    bad.write_text(GOOD.replace("seed: 3", "seed: x"))
    out = subprocess.run(
        [sys.executable, "-m", "testbed", "validate", str(bad)], capture_output=True, text=True
    )
    assert out.returncode == 2
    # an error is never wrapped by the console: the file and line stay on one line,
    # whole, to be copied or grepped (they were cut mid-path at 80 columns)
    assert f"{bad}:2: seed:" in out.stderr.splitlines()[-1], out.stderr
    assert "Traceback" not in out.stderr
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    assert subprocess.run([sys.executable, "-m", "testbed", "validate", str(good)]).returncode == 0


def _field_names(model: type, skip: set[type], seen: set[type] | None = None) -> set[str]:
    """Every field name of a pydantic model and of the models nested in it."""
    import typing

    from pydantic import BaseModel

    seen = seen or set()
    if model in seen or model in skip:
        return set()
    seen.add(model)
    names = set()
    for name, field in model.model_fields.items():
        names.add(name)
        stack = [field.annotation]
        while stack:
            t = stack.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                names |= _field_names(t, skip, seen)
            else:
                stack.extend(typing.get_args(t))
    return names


def test_reference_yaml_shows_every_key(root: Path) -> None:
    from nodes.compression.config import CompressSpec
    from radio.config import SemanticMuxSpec
    from testbed.faults import FAULT_KINDS
    from testbed.functions.config import FunctionsSpec
    from testbed.spec.models import Experiment

    text = (root / "experiments" / "reference.yaml").read_text()
    own_files = {CompressSpec, SemanticMuxSpec, FunctionsSpec}  # shown in their own yaml
    names = _field_names(Experiment, own_files)
    for kind in FAULT_KINDS:  # a fault's parameters are its kind's (built-in kinds here)
        if FAULT_KINDS[kind].__module__.startswith("testbed.faults."):
            names |= _field_names(FAULT_KINDS[kind].Params, set())
            assert kind in text, f"fault kind {kind!r} not named in reference.yaml"
    missing = sorted(n for n in names if f"{n}:" not in text)
    assert missing == [], f"keys not shown in reference.yaml: {missing}"


def test_what_would_fail_inside_flower_is_refused_at_load() -> None:
    """Two mistakes bench/fuzz_runs.py found failing only in the ServerApp, after the
    fleet started: a conv model on feature vectors, a strategy whose paper needs more
    clients than the fleet has."""
    cnn = GOOD.replace("  fl: {rounds: 2}", "  fl: {rounds: 2, dataset: {name: synthetic}}")
    ((_, path, msg),) = problems(cnn)  # (the model's default is cnn)
    assert path == "workload.fl" and "'cnn' needs images" in msg and "'synthetic'" in msg
    parse_spec(cnn.replace("{rounds: 2,", "{rounds: 2, model: {name: mlp},"))
    bulyan = GOOD.replace("  fl: {rounds: 2}", "  fl: {rounds: 2, strategy: {name: bulyan}}")
    ((line, path, msg),) = problems(bulyan)
    assert path == "workload.fl.strategy" and "needs at least 4*f+3 = 3" in msg
    assert "the fleet has 2" in msg and line == 13
