"""bench/docker_fleet.py: the ``continuum`` mode reads a run's headline figures from its
store as the runner writes them, and the ``ready`` mode alternates which backend starts
first (no fleet or engine is used here)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from testbed.store import RunStore

ROOT = Path(__file__).resolve().parent.parent

#: A continuum run's summary as the runner writes it (trimmed from a docker run's).
SUMMARY = {
    "wall_s": 91.89,
    "workloads": {
        "fl": {
            "round_duration_s": {"1": 15.38, "2": 7.25, "3": 15.2},
            "final_global_acc": 0.2368,
            "node_status": {"edge-1": {"1": "completed", "2": "failed"}, "fog": {"1": "late"}},
        },
        "functions": {
            "functions": {
                "matmul": {
                    "node": "cloud",
                    "start_backend": "cpu",
                    "end_backend": "gpu-emulated",
                    "requests": 155,
                    "errors": 0,
                    "p95_ms": 83.6,
                    "slo_ms": 12.0,
                    "slo_violation_pct": 29.0,
                    "timing": ["cpu: modelled", "gpu-emulated: modelled"],
                }
            },
            "requests_ok": 155,
            "requests_failed": 0,
            "requests_unanswered": 0,
        },
        "semantic_offload": {
            "status": "completed",
            "kinds": {"accuracy": "measured on the fleet"},
            "schemes": {
                "semantic_mux": {
                    "answers": 120,
                    "accuracy": {"digit": 0.25, "parity": 0.75},
                    "e2e_s": 0.0117,
                }
            },
        },
    },
}


def _load() -> ModuleType:
    path = ROOT / "bench" / "docker_fleet.py"
    spec = importlib.util.spec_from_file_location("bench_docker_fleet", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_docker_fleet"] = mod
    spec.loader.exec_module(mod)
    return mod


bench = _load()


def _store(tmp_path: Path, backend: str, summary: dict[str, object], status: str) -> RunStore:
    store = RunStore(tmp_path / backend)
    store.create_run(f"continuum-{backend}", "continuum", seed=17, backend=backend)
    store.add_event(f"continuum-{backend}", "fleet_starting", ts=100.0, nodes=["cloud"])
    store.add_event(f"continuum-{backend}", "fleet_ready", ts=110.5)
    store.finish_run(f"continuum-{backend}", status, summary)
    return store


def test_continuum_figures_read_from_the_store_side_by_side(tmp_path: Path) -> None:
    _store(tmp_path, "local", SUMMARY, "completed")
    _store(tmp_path, "docker", {"reason": "RuntimeError: x | y", "wall_s": 20.0}, "failed")
    local = bench.run_figures(*bench.pick_run(str(tmp_path / "local")))
    assert local["fleet start -> ready (s)"] == ("measured", 10.5)
    assert local["fl: median round time (s)"] == ("measured", 15.2)
    assert local["fl: (round, node) completed"][1] == "1/3"
    how, met = local["functions matmul: SLO 12.0 ms attained (%)"]
    assert met == 71.0 and "cpu: modelled" in how
    assert local["semantic_offload semantic_mux: accuracy, mean of tasks"] == (
        "measured on the fleet",
        0.5,
    )
    assert local["semantic_offload semantic_mux: e2e (ms)"][1] == pytest.approx(11.7)
    docker = bench.run_figures(*bench.pick_run(f"{tmp_path / 'docker'}:continuum-d"))
    table = bench.side_by_side(local, docker).splitlines()
    assert table[0] == "| figure | how | local | docker | docker/local |"
    wall = next(r for r in table if r.startswith("| wall, the run's own (s)"))
    assert wall == "| wall, the run's own (s) | measured | 91.89 | 20 | 0.22 |"
    status = next(r for r in table if r.startswith("| status "))
    assert "failed: RuntimeError: x \\| y" in status  # (a cell keeps the table's columns)
    assert all(len(re.split(r"(?<!\\)\|", r)) == 7 for r in table)  # 5 columns each


def test_ready_alternates_which_backend_starts_first() -> None:
    both = ["local", "docker"]
    assert [bench.ready_order(t, both)[0] for t in range(4)] == [
        "local",
        "docker",
        "local",
        "docker",
    ]
    assert bench.ready_order(1, ["local"]) == ["local"]


def test_functions_mode_runs_gaia_yaml_under_the_gaia_policy_alone() -> None:
    """``functions``: gaia.yaml's functions, its sweep over policies dropped, the gaia
    policy, the seeds and load asked for; the spec validates with gaia.yaml's folder."""
    import yaml

    from testbed.spec.loader import parse_spec

    text = bench.gaia_spec(3, 40.0)
    raw = yaml.safe_load(text)
    assert "sweep" not in raw and raw["repetitions"] == 3
    exp = parse_spec(text, folder=ROOT / "experiments")
    fns = exp.workload.functions
    assert fns is not None and fns.policy == "gaia" and fns.duration_s == 40.0
    gaia = parse_spec((ROOT / "experiments" / "gaia.yaml").read_text(), folder=ROOT / "experiments")
    assert gaia.workload.functions is not None
    assert [f.name for f in fns.functions] == [f.name for f in gaia.workload.functions.functions]
