"""The backend contract: every backend is a complete :class:`Backend`, and ``testbed
validate --backend B`` and ``testbed run --backend B`` answer a spec the same, through
the one preflight (:func:`testbed.backends.preflight`), before anything is recorded."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import testbed.backends as backends
import testbed.cli as cli
from testbed.backends import BACKENDS, get_backend, register_backend
from testbed.backends.base import Backend, NotSupported
from testbed.planner import make_plan
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from testbed.workloads.together import SharedFleet

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.yaml"))
QUICKSTART = (ROOT / "experiments" / "quickstart.yaml").read_text()
GAIA = (ROOT / "experiments" / "gaia.yaml").read_text().replace(
    "trace: traces/", f"trace: {ROOT / 'experiments' / 'traces'}/"  # (written elsewhere)
)
get_backend("local")  # (imports the built-ins, which register themselves)
NAMES = BACKENDS.names()

#: Specs some backend refuses: (backend, spec text, the field the refusal names).
REFUSED = [
    (
        "simulation",
        QUICKSTART + "faults:\n  - {kind: superlink-restart, at_round: 2}\n",
        "faults[0].kind",
    ),
    (
        "simulation",
        QUICKSTART.replace("links:\n", "links:\n  nodes:\n    edge-1: {kind: mmwave}\n"),
        "links.nodes.edge-1.kind",
    ),
    ("simulation", GAIA, "workload.functions"),
    (  # a netem link without the run's namespaces never connected (fuzz_runs found it)
        "local",
        QUICKSTART.replace("links:\n", "links:\n  nodes:\n    edge-1: {kind: netem}\n"),
        "links.nodes.edge-1.kind",
    ),
    ("compose", GAIA.replace("links:\n", "links:\n  mode: none\n"), "workload.functions"),
    ("compose", QUICKSTART, "links.mode"),
    (
        "compose",
        QUICKSTART.replace("links:\n", "links:\n  mode: none\n")
        + "faults:\n  - {kind: crash, node: edge-1, at_round: 2}\n",
        "faults[0].kind",
    ),
]


def _text(result: Any) -> str:
    """What the CLI printed (stdout and stderr), its line wrapping undone."""
    return re.sub(r"\s+", " ", result.output + (result.stderr or "")).strip()


def _validate(spec: Path, backend: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, ["validate", str(spec), "--backend", backend])
    return result.exit_code, _text(result)


def _run(spec: Path, backend: str, out: Path) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli.app, ["run", str(spec), "--backend", backend, "--out", str(out)]
    )
    return result.exit_code, _text(result)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Record every preflight call and every run the CLI would start (an accepted run
    is not run: what matters here is that its entry path passed the preflight)."""
    seen: list[tuple[str, Any]] = []
    real = backends.preflight

    def spy(name: str, experiments: Any, options: Any = None, host: bool = True) -> Any:
        seen.append(("preflight", name))
        return real(name, experiments, options, host)

    monkeypatch.setattr(backends, "preflight", spy)
    monkeypatch.setattr(cli, "_run_items", lambda *a, **k: seen.append(("run", a[4])))
    return seen


# -- every backend is a complete Backend --------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_every_backend_is_a_complete_backend(name: str) -> None:
    cls = get_backend(name)
    assert issubclass(cls, Backend), f"{name}: {cls} is not a Backend"
    assert not inspect.isabstract(cls), f"{name}: abstract members left {cls.__abstractmethods__}"
    assert cls.name == name
    for decl in (cls.workloads, cls.link_kinds, cls.fault_kinds):
        assert decl is None or isinstance(decl, frozenset)


def test_the_shared_fleet_declares_every_member() -> None:
    assert issubclass(SharedFleet, Backend) and not inspect.isabstract(SharedFleet)
    assert "__getattr__" not in vars(SharedFleet), "members are declared, not looked up"


def test_a_class_that_is_not_a_backend_is_not_registered() -> None:
    class Loose:
        name = "loose"

    with pytest.raises(TypeError, match="must subclass testbed.backends.base.Backend"):
        register_backend("loose")(Loose)  # type: ignore[type-var]
    assert "loose" not in BACKENDS.names()


def test_what_a_backend_lacks_is_a_clear_user_error(tmp_path: Path) -> None:
    """A member a backend does not support raises NotSupported (a ValueError: exit 2)
    naming the member and the backend."""
    plan = make_plan(parse_spec(QUICKSTART), 1)
    sim = get_backend("simulation")(plan, tmp_path)
    with pytest.raises(NotSupported, match="start_services is not supported on --backend simula"):
        sim.start_services({}, {})
    with pytest.raises(ValueError, match="restart_superlink is not supported on --backend simula"):
        sim.restart_superlink()
    assert sim.exit_reasons() == {} and sim.mean_cpu_pct() == {}


def test_fleet_info_says_which_links_are_in_force(tmp_path: Path) -> None:
    """Every backend says the links in force (mode and kinds, a link's own kind
    counted) and a ``simulation:`` section it ignores; the simulation adds that its
    links are modelled and its clock is virtual."""
    text = QUICKSTART.replace("links:\n", "links:\n  nodes:\n    edge-1: {kind: netem}\n")
    plan = make_plan(parse_spec(text), 1)
    local = get_backend("local")(plan, tmp_path).fleet_info()
    assert local == {"links_mode": "proxy", "link_kinds": {"proxy": 3, "netem": 1}}
    sim = get_backend("simulation")(plan, tmp_path).fleet_info()
    assert sim["clock"] == "virtual" and sim["link_kinds"] == local["link_kinds"]
    assert "no traffic is shaped" in sim["links_modelled"]
    sim_section = make_plan(parse_spec(QUICKSTART + "simulation: {num_cpus: 4}\n"), 1)
    ignored = "simulation: (read by --backend simulation only)"
    assert get_backend("local")(sim_section, tmp_path).fleet_info()["ignored"] == ignored
    sim_info = get_backend("simulation")(sim_section, tmp_path).fleet_info()
    assert "ignored" not in sim_info and sim_info["ray"] == "local, 4 CPUs"
    cluster = get_backend("simulation")(sim_section, tmp_path, ray_address="h:6379")
    assert cluster.fleet_info()["ignored"] == "simulation.num_cpus: 4 (sizes a local Ray only)"
    assert cluster.fleet_info()["ray"] == "cluster at h:6379"
    none = make_plan(parse_spec(QUICKSTART.replace("links:\n", "links:\n  mode: none\n")), 1)
    assert get_backend("local")(none, tmp_path).fleet_info() == {
        "links_mode": "none",
        "link_kinds": {},
    }


@pytest.mark.parametrize("backend", ["simulation", "compose"])
def test_cold_is_refused_where_a_backend_has_no_cold_start(
    backend: str, tmp_path: Path, calls: list[tuple[str, Any]]
) -> None:
    """``--cold`` on a backend that takes no ``warm`` option is refused (exit 2, naming
    ``--cold``) before anything is recorded, not ignored; on local it is taken."""
    spec = ROOT / "experiments" / "quickstart.yaml"
    out = tmp_path / "runs"
    args = ["run", str(spec), "--backend", backend, "--out", str(out), "--cold"]
    result = CliRunner().invoke(cli.app, args)
    text = _text(result)
    assert result.exit_code == 2, text
    assert text.startswith(
        f"error: --cold: Flower's cold per-message ClientApp processes are not supported "
        f"on --backend {backend}"
    ), text
    assert not out.exists() and ("run", backend) not in calls
    ok = CliRunner().invoke(cli.app, ["run", str(spec), "--out", str(out), "--cold"])
    assert ok.exit_code == 0 and calls[-1] == ("run", "local"), _text(ok)


def test_a_sweeps_children_get_cold_too() -> None:
    """``--parallel`` runs each configuration as a child ``testbed run``: ``--cold`` (and
    every ``--set``, ``--spec-dir``) is passed on, not dropped."""
    from testbed.sweep import child_flags

    assert child_flags(["seed=3"], Path("d"), True) == [
        *("--set", "seed=3", "--spec-dir", "d", "--cold")
    ]
    assert "--cold" not in child_flags([], None, False)


def test_run_experiment_refuses_an_option_its_backend_does_not_take(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    with pytest.raises(NotSupported, match="--cold: .* --backend simulation"):
        run_experiment(
            parse_spec(QUICKSTART), store, backend="simulation", backend_options={"warm": False}
        )
    assert store.runs() == []


# -- validate and run answer the same ---------------------------------------------------
def test_an_unknown_backend_is_refused_at_validate() -> None:
    code, text = _validate(ROOT / "experiments" / "quickstart.yaml", "nonsense")
    assert code == 2, text
    assert "--backend" in text and "nonsense" in text
    for name in ("local", "docker", "compose", "simulation"):
        assert repr(name) in text, text


@pytest.mark.parametrize(("backend", "text", "field"), REFUSED)
def test_refused_specs_are_refused_alike(
    backend: str, text: str, field: str, tmp_path: Path, calls: list[tuple[str, Any]]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    out = tmp_path / "runs"
    v_code, v_text = _validate(spec, backend)
    r_code, r_text = _run(spec, backend, out)
    assert v_code == r_code == 2, (v_text, r_text)
    assert v_text.startswith(f"error: {field}:"), v_text
    assert r_text == v_text
    assert calls == [("preflight", backend)] * 2, "both answer through the preflight"
    assert not out.exists(), "run refused before recording anything"


@pytest.mark.parametrize(("backend", "text", "field"), REFUSED[:2])
def test_run_experiment_refuses_before_recording(
    backend: str, text: str, field: str, tmp_path: Path
) -> None:
    """A Python driver (and the controller's runs) gets the same answer."""
    store = RunStore(tmp_path / "runs")
    with pytest.raises(ValueError, match=re.escape(f"{field}:")):
        run_experiment(parse_spec(text), store, backend=backend)
    assert store.runs() == []


def test_netem_without_root_is_refused_alike(
    tmp_path: Path, calls: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local backend's own check (netem needs root), in validate as in run."""
    from testbed.backends import local

    monkeypatch.setattr(local.os, "geteuid", lambda: 1000)
    spec = tmp_path / "spec.yaml"
    spec.write_text(QUICKSTART.replace("links:\n", "links:\n  mode: netem\n"))
    v_code, v_text = _validate(spec, "local")
    r_code, r_text = _run(spec, "local", tmp_path / "runs")
    assert v_code == r_code == 2 and r_text == v_text
    assert v_text.startswith("error: links.mode: netem links on --backend local need root")


@pytest.mark.parametrize("backend", ["local", "simulation", "compose", "docker"])
@pytest.mark.parametrize("spec", EXPERIMENTS, ids=lambda p: p.stem)
def test_every_experiment_gets_one_answer(
    spec: Path, backend: str, tmp_path: Path, calls: list[tuple[str, Any]]
) -> None:
    """``validate`` and ``run`` accept or refuse every shipped experiment alike; an
    accepted run reaches the point where it would start (after its preflight)."""
    v_code, v_text = _validate(spec, backend)
    r_code, r_text = _run(spec, backend, tmp_path / "runs")
    assert calls[0] == calls[1] == ("preflight", backend)
    if v_code == 0 and "not ready here now:" in v_text:
        # the spec is valid for the backend; this machine is not ready (docker: no
        # engine here): validate says so, run refuses with the same reason
        why = " ".join(v_text.split("not ready here now:", 1)[1].split())
        assert r_code == 2 and f"error: {why}" in " ".join(r_text.split()), (v_text, r_text)
        assert len(calls) == 2, "a run refused for its host starts nothing"
    elif v_code == 0:
        assert r_code == 0, r_text
        assert calls[2:] == [("run", backend)], "an accepted run starts after the preflight"
    else:
        assert (v_code, v_text) == (r_code, r_text) and v_code == 2
        assert len(calls) == 2, "a refused run starts nothing"
