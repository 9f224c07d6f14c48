"""The simulation process: the testbed's ServerApp and ClientApp on Flower's Simulation
Engine (Ray), with the virtual clock on the ServerApp's grid.

``python -m testbed.simulation.runner SETTINGS.json`` (written by
:class:`testbed.backends.simulation.SimulationBackend`). Flower's public
``run_simulation`` takes no run config, so this calls the entry that ``flwr run`` on a
simulation federation uses (``flwr.simulation.run_simulation._run_simulation`` with a
``Run`` whose override config is the testbed's run config and the app directory
``nodes/fl/app`` for its defaults). Ray starts local, offline (usage stats off), bounded
to ``num_cpus`` and is shut down before the process exits.

With ``app_dir`` in the settings it runs a user's Flower App instead (the observed copy
:func:`nodes.fl.userapp.observed_fab` wrote): :func:`user_server_app` and
:func:`testbed.simulation.client.user_client_app`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections import ChainMap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flwr.app import Context, RecordDict
from flwr.serverapp import Grid, ServerApp

from nodes.fl.telemetry import Telemetry
from nodes.fl.userapp import TESTBED_PREFIX
from testbed.simulation.clock import VirtualClock
from testbed.simulation.grid import ClockedGrid
from testbed.simulation.polls import PollGrid
from testbed.simulation.population import ClientPopulation, PopulationClients
from testbed.simulation.protocol import ProtocolModel

APP_DIR = Path(__file__).resolve().parents[2] / "nodes" / "fl" / "app"

#: Flower node id -> partition id, captured when the Simulation Engine registers nodes
#: (the registration's own mapping, kept by reference: a range of a million virtual
#: nodes is not copied; :mod:`testbed.simulation.registry`).
PARTITIONS: ChainMap[int, int] = ChainMap()


def capture_partitions() -> None:
    """Wrap Flower's node registration so the clock knows which node id is which client."""
    from flwr.server.superlink.fleet.vce import vce_api

    api: Any = vce_api  # (registration may be the lazy one: a Mapping, not a dict)
    register = api._register_nodes
    if getattr(register, "testbed_capture", False):
        return

    def _register_nodes(num_nodes: int, state_factory: Any) -> Mapping[int, int]:
        mapping: Mapping[int, int] = register(num_nodes=num_nodes, state_factory=state_factory)
        PARTITIONS.maps.insert(0, mapping)  # type: ignore[arg-type]
        return mapping

    _register_nodes.testbed_capture = True  # type: ignore[attr-defined]
    api._register_nodes = _register_nodes


def names_of(settings: dict[str, Any]) -> Sequence[str]:
    """Client names by partition id (the settings' ``names``: the client groups, or a
    list of names; :func:`nodes.fl.identity.node_names_of`)."""
    from nodes.fl.identity import node_names_of

    return node_names_of(settings["names"])


def clock_of(settings: dict[str, Any], tel: Telemetry) -> VirtualClock:
    """The virtual clock described by the settings' ``clock`` section, with its faults
    and availability trace."""
    from testbed.simulation.availability import Availability, load_trace
    from testbed.simulation.vfaults import VirtualFaults
    from testbed.spec.models import FaultSpec

    c, names = settings["clock"], names_of(settings)
    clients = PopulationClients(names, ClientPopulation.from_dict(c["population"]))
    faults = None
    if c.get("faults"):  # (per client name: O(registered) once, with faults only)
        specs = [FaultSpec.model_validate(f) for f in c["faults"]]
        out = str(settings["run_config"].get("artifact-dir", ""))
        tiers = {n: clients[n].tier for n in names}
        out = out or str(settings.get("artifact_dir", ""))
        ctl = Path(out) / "controls" if out else None
        faults = VirtualFaults(specs, tiers, int(c["seed"]), tel, ctl)
    avail = None
    if c.get("availability"):
        a = c["availability"]
        avail = Availability(load_trace(a["path"], a["format"]), names, float(a["time_scale"]))
    period = c.get("poll_period_s")
    return VirtualClock(
        clients,
        float(c["deadline_s"]),
        float(c["protocol_delay_s"]),
        int(c["seed"]),
        faults,
        avail,
        startup_s=float(c.get("startup_s", 0.0)),
        polls=PollGrid(float(period), int(c["seed"])) if period else None,
        protocol=ProtocolModel(**c.get("protocol", {})),
    )


def clocked_server_app(settings: dict[str, Any]) -> ServerApp:
    """The testbed's ServerApp ``main`` with the virtual clock installed on its grid.

    The clock is armed (sampling leaves out down clients) once the ServerApp has waited
    for its fleet: when it picks its starting point (``_starting_point``), right before
    the strategy's first round.
    """
    from nodes.fl import server_app as fl

    app = ServerApp()
    names = names_of(settings)

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        tel = Telemetry(str(context.run_config.get("telemetry-path", "")) or None)
        clock = clock_of(settings, tel)
        clocked = ClockedGrid(grid, clock, names, tel, float(settings["wall_cap_s"]), PARTITIONS)
        starting_point = fl._starting_point

        def armed(*args: Any, **kwargs: Any) -> Any:
            clocked.arm()
            return starting_point(*args, **kwargs)

        fl._starting_point = armed
        try:
            with clocked.sampling_waits():
                fl.main(grid, context)
        finally:
            fl._starting_point = starting_point

    return app


def user_server_app(settings: dict[str, Any]) -> ServerApp:
    """A user's Flower App's ServerApp (``settings["app_dir"]``: the observed copy,
    :func:`nodes.fl.userapp.observed_fab`) with the virtual clock on its grid.

    The clock sits below the observer (:class:`nodes.fl.grid_observer.GridObserver`): the
    observer records what the app sees on virtual time (a reply past the deadline never
    reaches it). The clock is armed once the observer is attached, i.e. after the wait
    for the fleet, right before the user's ServerApp starts.
    """
    from nodes.fl import observe

    inner: ServerApp = _component(settings["app_dir"], "serverapp")
    names = names_of(settings)
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        rc = context.run_config
        tel = Telemetry(str(rc.get(f"{TESTBED_PREFIX}telemetry-path", "")) or None)
        clocked = ClockedGrid(
            grid, clock_of(settings, tel), names, tel, float(settings["wall_cap_s"]), PARTITIONS
        )

        def attached(observer: observe.GridObserver) -> None:
            clocked.arm()
            for node_id in PARTITIONS:  # (every virtual node's name is known here)
                observer.identify(node_id, clocked.name_of(node_id))

        observe.ON_ATTACH.append(attached)
        try:
            with clocked.sampling_waits():
                inner(grid, context)
        finally:
            observe.ON_ATTACH.clear()

    return app


def _component(app_dir: str, component: str) -> Any:
    """The ServerApp or ClientApp a Flower App's pyproject names (its folder is put on
    ``sys.path``, as Flower's loader does; the Ray backend passes ``sys.path`` on to
    its workers)."""
    from kernel.registry import import_dotted
    from nodes.fl.userapp import read_app

    if app_dir not in sys.path:
        sys.path.insert(0, app_dir)
    return import_dotted(read_app(app_dir).components[component])


def _run_config(settings: dict[str, Any]) -> dict[str, Any]:
    """The ServerApp's run config: a user app's declared defaults (as ``flwr run``
    reads them from its pyproject) with the overrides, else the overrides."""
    run_config = dict(settings["run_config"])
    if settings.get("app_dir"):
        from nodes.fl.userapp import read_app

        run_config = {**read_app(settings["app_dir"]).config, **run_config}
    return run_config


def simulation_run(run_id: int, run_config: dict[str, Any]) -> Any:
    """Flower's ``Run`` of a simulation, set up as ``run_simulation`` does, with the
    testbed's run config as its override config."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.constant import NOOP_FEDERATION_ID
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity

    run = Run.create_empty(run_id=run_id)
    run.primary_task_id = run_id
    run.federation_id = NOOP_FEDERATION_ID
    run.override_config = dict(run_config)
    TaskIdentity.task_id = 1
    TaskIdentity.run_id = run_id
    TaskIdentity.node_id = SUPERLINK_NODE_ID
    return run


def run(settings: dict[str, Any]) -> None:
    """Run the Flower app once on the Simulation Engine; Ray is shut down at the end."""
    import ray
    from flwr.simulation.run_simulation import _run_simulation
    from flwr.supercore.telemetry import EventType

    from testbed.simulation.client import app as client_app
    from testbed.simulation.client import user_client_app

    server_app = clocked_server_app(settings)
    app_dir = str(settings.get("app_dir") or APP_DIR)
    if settings.get("app_dir"):  # a user's Flower App, observed
        server_app = user_server_app(settings)
        client_app = user_client_app(_component(app_dir, "clientapp"))
    if settings.get("bare"):  # bench/simulation.py's baseline: the apps, no clock
        from nodes.fl.client_app import app as client_app
        from nodes.fl.server_app import app as server_app

    run_config = _run_config(settings)
    flwr_run = simulation_run(int(settings["run_id"]), settings["run_config"])
    context = Context(
        run_id=flwr_run.run_id,
        node_id=0,
        node_config={},
        state=RecordDict(),
        run_config=dict(run_config),
    )
    init: dict[str, Any] = {"include_dashboard": False}
    if settings.get("ray_address"):
        init["address"] = settings["ray_address"]
    else:
        init["num_cpus"] = int(settings["num_cpus"])
    backend_config: Any = {
        "client_resources": {"num_cpus": float(settings["client_cpus"]), "num_gpus": 0.0},
        "init_args": init,
    }
    if not settings.get("bare"):  # (bare: Flower's own registry and feeder)
        from testbed.simulation import feeder, registry

        registry.install()  # before the capture, which wraps it
        feeder.install()
    capture_partitions()
    cache = data_cache(settings)
    try:
        _run_simulation(
            num_supernodes=len(names_of(settings)),
            exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE,
            client_app=client_app,
            server_app=server_app,
            backend_config=backend_config,
            server_app_context=context,
            app_dir=app_dir,
            run=flwr_run,
            is_app=True,  # clients read their run config from app_dir + overrides
        )
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)


def data_cache(settings: dict[str, Any]) -> Path | None:
    """Share a generated dataset between the ServerApp and the Ray workers: its folder
    (``<artifact dir>/data_cache``, removed when the run ends) in
    :data:`nodes.data.datasets.DATA_CACHE_ENV`, which the workers inherit; None (each
    process generates its own) without an artifact dir or when the variable is set."""
    from nodes.data.datasets import DATA_CACHE_ENV

    rc = settings.get("run_config") or {}
    out = str(rc.get("artifact-dir") or settings.get("artifact_dir") or "")
    if not out or os.environ.get(DATA_CACHE_ENV):
        return None
    folder = Path(out) / "data_cache"
    os.environ[DATA_CACHE_ENV] = str(folder)
    return folder


def main(argv: list[str]) -> int:
    """Entry point: ``runner SETTINGS.json``."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    run(json.loads(Path(argv[0]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
