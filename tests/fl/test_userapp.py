"""A user's own Flower App (``workload.fl.app``, issue 28) on real Flower, no mocks.

The apps are not written for the testbed: Flower's official ``quickstart-numpy``
(``tests/data/apps/``, unmodified) and small apps written here that break on purpose.
The fleet tests run a real SuperLink and SuperNodes on loopback (``--backend local``)
and check that nothing outlives the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nodes.fl.timing import check_flower_version
from nodes.fl.userapp import read_app
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore
from tests.conftest import processes_under

DATA = Path(__file__).resolve().parents[1] / "data"
QUICKSTART = DATA / "apps" / "quickstart-numpy"

PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
[project]
name = "{name}"
version = "1.0.0"
[tool.hatch.build.targets.wheel]
packages = ["."]
[tool.flwr.app]
publisher = "tests"
[tool.flwr.app.components]
serverapp = "{pkg}.server:app"
clientapp = "{pkg}.client:app"
[tool.flwr.app.config]
num-server-rounds = 2
"""
SERVER = """\
import numpy as np
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
app = ServerApp()
@app.main()
def main(grid: Grid, context: Context) -> None:
    FedAvg(fraction_evaluate=0.0).start(
        grid=grid, initial_arrays=ArrayRecord([np.zeros(4, dtype=np.float32)]),
        num_rounds=int(context.run_config["num-server-rounds"]))
"""
CLIENT = """\
import time
import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
{top}
app = ClientApp()
@app.train()
def train(msg: Message, context: Context) -> Message:
    {body}
    w = msg.content["arrays"].to_numpy_ndarrays()[0] + 1.0
    metrics = MetricRecord({{"num-examples": 1, "w-mean": float(w.mean())}})
    content = RecordDict({{"arrays": ArrayRecord([w]), "metrics": metrics}})
    return Message(content=content, reply_to=msg)
"""


def write_app(root: Path, name: str, top: str = "", body: str = "pass") -> Path:
    """A small Flower App ``name`` at ``root/name``; ``top`` runs at import of its client
    module, ``body`` at the start of every train message."""
    app, pkg = root / name, name.replace("-", "_")
    (app / pkg).mkdir(parents=True)
    (app / "pyproject.toml").write_text(PYPROJECT.format(name=name, pkg=pkg))
    (app / pkg / "__init__.py").write_text("")
    (app / pkg / "server.py").write_text(SERVER)
    (app / pkg / "client.py").write_text(CLIENT.format(top=top, body=body))
    return app


def spec_yaml(app: str, extra: str = "", fl: str = "", clients: int = 3) -> str:
    return textwrap.dedent(f"""\
        name: userapp
        seed: 3
        fleet:
          nodes:
            - {{id: cloud, tier: cloud}}
            - {{id: e, tier: edge, count: {clients}}}
        links:
          defaults:
            edge-cloud: {{bandwidth_mbps: 50, latency_ms: 5}}
        workload:
          fl:
            app: {app}
            protocol_timing: fast
        """) + textwrap.indent(fl, "    ") + extra


def validate(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "testbed", "validate", str(spec)],
        capture_output=True, text=True, timeout=120, env=os.environ,
    )  # fmt: skip


# -- validation -------------------------------------------------------------------------
def test_quickstart_numpy_is_read_and_its_relative_path_resolves() -> None:
    info = read_app(QUICKSTART)
    assert info.components == {
        "serverapp": "quickstart_numpy.server_app:app",
        "clientapp": "quickstart_numpy.client_app:app",
    }
    assert info.config == {"num-server-rounds": 3}
    exp = parse_spec(spec_yaml("apps/quickstart-numpy", fl="app_config: {num-server-rounds: 2}\n"),
                     folder=DATA)  # fmt: skip
    assert exp.workload.fl is not None and exp.workload.fl.app == str(QUICKSTART)


@pytest.mark.parametrize(
    ("make", "expect"),
    [
        (lambda d: d, "has no pyproject.toml"),
        (lambda d: (d / "pyproject.toml").write_text("[project]\nname='x'\n") and d,
         "no [tool.flwr.app.components]"),  # fmt: skip
        (lambda d: write_app(d, "importerr", top="import no_such_module_xyz"),
         "clientapp 'importerr.client:app' does not import: ModuleNotFoundError"),  # fmt: skip
    ],
    ids=["no-pyproject", "no-components", "import-error"],
)
def test_what_is_not_a_flower_app_is_refused_at_validate(
    tmp_path: Path, make: object, expect: str
) -> None:
    folder = tmp_path / "thing"
    folder.mkdir()
    app = make(folder)  # type: ignore[operator]
    res = validate(tmp_path, spec_yaml(str(app)))
    assert res.returncode == 2, res.stdout + res.stderr
    out = res.stdout + res.stderr
    assert expect in out and "Traceback" not in out, out


def with_dependency(app: Path, requirement: str) -> Path:
    """The app at ``app`` declaring ``requirement`` in ``[project].dependencies``."""
    pyproject = app / "pyproject.toml"
    text = pyproject.read_text()
    deps = f'dependencies = ["{requirement}"]\n'
    pyproject.write_text(text.replace('version = "1.0.0"\n', f'version = "1.0.0"\n{deps}'))
    return app


def test_a_declared_dependency_missing_here_is_left_to_the_backend(tmp_path: Path) -> None:
    """The client imports ``tinydep_xyz``, which this host lacks: declared, local and
    simulation refuse (they run the app here) naming it; docker takes it (it installs
    the app's dependencies in a derived image). Undeclared: refused everywhere."""
    app = with_dependency(write_app(tmp_path, "depapp", top="import tinydep_xyz"),
                          "tinydep-xyz>=1.0")  # fmt: skip
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_yaml(str(app)))
    for backend in ("local", "simulation"):
        res = subprocess.run(
            [sys.executable, "-m", "testbed", "validate", str(spec), "--backend", backend],
            capture_output=True, text=True, timeout=120, env=os.environ,
        )  # fmt: skip
        out = " ".join(res.stderr.split())
        assert res.returncode == 2 and "imports tinydep_xyz" in out, out
        assert f"--backend {backend} runs the app here" in out and "--backend docker" in out
    res = subprocess.run(
        [sys.executable, "-m", "testbed", "validate", str(spec), "--backend", "docker"],
        capture_output=True, text=True, timeout=120, env=os.environ,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    undeclared = write_app(tmp_path / "u", "undeclared", top="import tinydep_xyz")
    assert validate(tmp_path, spec_yaml(str(undeclared))).returncode == 2


def test_an_undeclared_app_config_key_is_refused_naming_the_apps_keys(tmp_path: Path) -> None:
    res = validate(tmp_path, spec_yaml(str(QUICKSTART), fl="app_config: {rounds: 2}\n"))
    out = res.stdout + res.stderr
    assert res.returncode == 2 and "Traceback" not in out, out
    assert "'rounds' not declared by app 'quickstart-numpy'" in out
    assert "keys: num-server-rounds" in out


@pytest.mark.parametrize(
    ("app", "fl", "expect"),
    [
        (False, "node_config: {db-url: x}\n", "node_config: needs 'app'"),
        (True, "node_config: {node-name: x, db-url: y}\n",
         "node_config: 'node-name' set by the testbed on every node"),  # fmt: skip
    ],
    ids=["without-app", "testbed-key"],
)
def test_node_config_needs_an_app_and_leaves_the_testbeds_keys(
    tmp_path: Path, app: bool, fl: str, expect: str
) -> None:
    text = spec_yaml(str(QUICKSTART), fl=fl)
    if not app:
        text = text.replace(f"    app: {QUICKSTART}\n", "")
    res = validate(tmp_path, text)
    out = res.stdout + res.stderr
    assert res.returncode == 2 and "Traceback" not in out, out
    assert expect in out, out


def test_the_apps_clientapp_sees_node_config_with_its_node_name() -> None:
    """What observed_client_app hands the user's ClientApp on node e-2: the spec's
    node_config (``{node}``: e-2) over the SuperNode's, no ``testbed-*`` run config key;
    and node_config cannot set a key the testbed gives every node."""
    from flwr.app import Context, RecordDict

    from nodes.fl.observe import user_context
    from nodes.fl.userapp import TESTBED_NODE_KEYS
    from testbed.planner import make_plan

    rc = {"num-server-rounds": 2, "testbed-node-config": json.dumps(
        {"db-url": "sqlite:////d/{node}.db", "n": 3})}  # fmt: skip
    ctx = Context(run_id=1, node_id=7, node_config={"node-name": "e-2", "partition-id": 1},
                  state=RecordDict(), run_config=rc)  # fmt: skip
    seen = user_context(ctx, "e-2")
    assert seen.run_config == {"num-server-rounds": 2}
    assert seen.node_config == {"node-name": "e-2", "partition-id": 1,
                                "db-url": "sqlite:////d/e-2.db", "n": 3}  # fmt: skip
    assert user_context(ctx).node_config == ctx.node_config  # (the ServerApp's)
    client = make_plan(parse_spec(spec_yaml("apps/quickstart-numpy"), folder=DATA)).clients[0]
    assert {*client.node_config(3), "control-path"} == set(TESTBED_NODE_KEYS)


def test_flower_version_outside_the_supported_range_is_named() -> None:
    assert check_flower_version("1.42.0") == "1.42.0"
    with pytest.raises(RuntimeError, match=r"Flower 1\.43\.1 .*\(supported: 1\.41 to 1\.42\)"):
        check_flower_version("1.43.1")


# -- fleets ---------------------------------------------------------------------------
def statuses(store: RunStore, run_id: str) -> dict[tuple[int, str], str]:
    return {(r, n): s for r, n, s, _why in store.round_status(run_id)}


def check_faults_recorded(store: RunStore, run_id: str, run_dir: Path) -> None:
    """What quickstart-numpy's run with e-2 crashed and e-1 cut off from round 2 must
    record (on any backend that runs it: tests/docker/test_docker_userapp.py too)."""
    st = statuses(store, run_id)
    assert {st[(1, n)] for n in ("e-1", "e-2", "e-3")} == {"completed"}  # before the faults
    assert all(st[(r, "e-3")] == "completed" for r in (1, 2, 3))  # untouched
    assert all(st.get((r, "e-2")) not in (None, "completed") for r in (2, 3))  # crashed
    assert st[(2, "e-1")] in ("failed", "late")  # cut off for the round's deadline
    # the app's own MetricRecord keys, per (round, node): train's scalar, evaluate's list
    train = {(r, n) for r, n, *_ in store.metrics(run_id, "random_metric")}
    assert {(r, "e-3") for r in (1, 2, 3)} <= train and (2, "e-2") not in train
    assert {n for _r, n, *_ in store.metrics(run_id, "random_metric[2]")} >= {"e-3"}
    sent = {(r, n) for r, n, *_ in store.metrics(run_id, "bytes_sent")}
    assert {(1, "e-1"), (2, "e-1"), (3, "e-3")} <= sent
    # e-2 in round 2: sent and lost (a SuperLink still listing it), or not sampled
    assert (2, "e-2") in sent or st[(2, "e-2")] == "excluded"
    assert (Path(run_dir) / "nodes" / "cloud" / "final_model.npz").exists()  # app's own


def quickstart_with_faults(timeout_s: float) -> str:
    """quickstart-numpy, 3 rounds: e-2 crashes before round 2 and e-1's link is cut
    before round 2 for longer than the round deadline (``timeout_s``)."""
    return spec_yaml(
        str(QUICKSTART),
        fl=f"app_config: {{num-server-rounds: 3}}\nround_timeout_s: {timeout_s}\n",
        extra=textwrap.dedent(f"""\
            faults:
              - {{kind: crash, node: e-2, at_round: 2}}
              - {{kind: partition, node: e-1, at_round: 2, duration_s: {timeout_s + 2}}}
            """),
    )


@pytest.mark.slow
def test_quickstart_numpy_with_a_crash_and_a_partition(tmp_path: Path) -> None:
    """Flower's quickstart-numpy, unmodified, on 3 edge nodes: e-2 crashes before round 2,
    e-1's link is cut before round 2 for longer than the round deadline."""
    store = RunStore(tmp_path)
    text = quickstart_with_faults(timeout_s=6)
    res = run_experiment(parse_spec(text), store, spec_path="inline")
    assert res.status == "completed", res.summary
    check_faults_recorded(store, res.run_id, res.artifact_dir)
    assert processes_under(tmp_path) == []


@pytest.mark.slow
def test_quickstart_numpy_on_the_simulation_backend(tmp_path: Path) -> None:
    """The same app and faults on Flower's Simulation Engine, on the virtual clock: e-1's
    round-2 reply comes past the deadline and never reaches the app, e-2 is not sampled
    once crashed, and the app's final model lands in the server node's folder."""
    store = RunStore(tmp_path)
    text = quickstart_with_faults(timeout_s=6)
    res = run_experiment(parse_spec(text), store, spec_path="inline", backend="simulation")
    assert res.status == "completed", res.summary
    check_faults_recorded(store, res.run_id, res.artifact_dir)
    assert statuses(store, res.run_id)[(2, "e-2")] == "excluded"  # down when sampled
    virtual = [row[3] for row in store.metrics(res.run_id, "virtual_round_s")]
    assert len(virtual) == 3 and virtual[1] == pytest.approx(6.0)  # round 2: its deadline
    assert processes_under(tmp_path) == []


def _run_cli(
    tmp_path: Path, text: str, backend: str = "local"
) -> tuple[subprocess.CompletedProcess[str], RunStore]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    res = subprocess.run(
        [sys.executable, "-m", "testbed", "run", str(spec), "--out", str(tmp_path / "runs"),
         "--backend", backend],
        capture_output=True, text=True, timeout=300, env=os.environ,
    )  # fmt: skip
    return res, RunStore(tmp_path / "runs")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "simulation"])
def test_an_exception_in_train_fails_the_run_naming_app_and_node(
    tmp_path: Path, backend: str
) -> None:
    app = write_app(tmp_path, "boomapp", body="raise ValueError('boom in train')")
    res, store = _run_cli(tmp_path, spec_yaml(str(app), clients=2), backend)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "Traceback" not in out, out
    [run] = store.runs()
    assert run.status == "failed"
    reason = str(run.summary_dict.get("reason"))
    assert "app 'boomapp'" in reason and "ClientApp on node e-" in reason, reason
    assert "ValueError: boom in train" in reason
    assert {s for (_r, _n), s in statuses(store, run.run_id).items()} == {"failed"}
    assert {n for (_r, n) in statuses(store, run.run_id)} == {"e-1", "e-2"}
    assert processes_under(tmp_path) == []


@pytest.mark.slow
def test_a_clientapp_that_never_replies_fails_at_the_round_deadline(tmp_path: Path) -> None:
    app = write_app(tmp_path, "hangapp", body="time.sleep(3600)")
    res, store = _run_cli(
        tmp_path, spec_yaml(str(app), clients=2, fl="round_timeout_s: 4\napp_config: "
                                                   "{num-server-rounds: 1}\n")  # fmt: skip
    )
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "Traceback" not in out, out
    [run] = store.runs()
    assert run.status == "failed"
    rows = store.round_status(run.run_id)
    assert {(r, n, s) for r, n, s, _ in rows} == {(1, "e-1", "failed"), (1, "e-2", "failed")}
    assert all("no reply within the app's timeout (4.0 s)" in why for *_x, why in rows)
    assert processes_under(tmp_path) == []
