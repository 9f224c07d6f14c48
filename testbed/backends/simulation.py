"""Simulation backend: the same Flower apps on Flower's Simulation Engine (Ray).

No SuperLink, no SuperNodes, no emulated links: ``submit`` starts one process
(:mod:`testbed.simulation.runner`) that runs the testbed's ServerApp and ClientApp
through Flower's Simulation Engine with the virtual clock
(:mod:`testbed.simulation.clock`) on the ServerApp's grid. The ServerApp writes the same
telemetry JSONL as on the local backend, so the FL workload's pump, the store, reports
and dashboard work unchanged. See docs/simulation.md.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import secrets
import shutil
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from testbed.backends import register_backend
from testbed.backends.base import Backend, NodeResources, NotSupported, links_in_force
from testbed.procs import Popen, ProcGroup
from testbed.simulation.clock import protocol_delay_s, startup_s
from testbed.simulation.config import SimulationSpec
from testbed.simulation.links import check_links
from testbed.simulation.polls import poll_period_s
from testbed.simulation.population import ClientPopulation

if TYPE_CHECKING:
    from testbed.emulation.link import Link, LinkSchedule
    from testbed.planner import Plan
    from testbed.spec.models import Experiment

#: Ray CPUs of a local simulation (the whole run; `simulation.num_cpus` overrides).
NUM_CPUS = int(os.environ.get("TESTBED_SIM_CPUS", "2"))
EXTRA = "continuum-testbed[sim]"


def check_experiment(exp: Experiment) -> None:
    """ValueError naming the key for what the simulation's own checks refuse: fault
    kinds it cannot decide on virtual time (``faults[i].kind``,
    :func:`testbed.simulation.vfaults.check_faults`) and an availability trace it cannot
    read (``simulation.availability.path``). Workloads and link kinds are declared on
    :class:`SimulationBackend` and checked by :meth:`SimulationBackend.preflight`."""
    from testbed.simulation.vfaults import check_faults

    check_faults(exp.faults)
    avail = exp.simulation.availability if exp.simulation else None
    if avail is not None:
        from testbed.simulation.availability import load_trace

        try:
            load_trace(avail.path, avail.format)
        except ValueError as e:
            raise ValueError(f"simulation.availability.path: {e}") from None


def protocol_terms(timing: str, sim: SimulationSpec, fleet_size: int = 1) -> dict[str, Any]:
    """The clock's protocol terms for ``workload.fl.protocol_timing`` ``timing`` and
    ``fleet_size`` clients (the poll period grows with the fleet as the real one's):
    ``protocol_delay_s``, ``startup_s``, ``poll_period_s`` (None: no poll grid) and
    ``protocol``, the protocol-on-the-link terms (``ProtocolModel``'s fields).

    With ``simulation.poll_grid`` the grid plays the two polls' waits, so the default
    delay is the measured one less their expected sum (half a period each: a pull
    phase and a reply poll, uniform over a period); an explicit delay is kept as is.
    """
    period = poll_period_s(timing, fleet_size) if sim.poll_grid else None
    delay = protocol_delay_s(timing, sim.protocol_delay_s)
    if period is not None and sim.protocol_delay_s is None:
        delay = max(0.0, delay - period)
    return {
        "protocol_delay_s": delay,
        "startup_s": startup_s(timing, sim.startup_s),
        "poll_period_s": period,
        "protocol": dataclasses.asdict(sim.protocol_model()),
    }


@register_backend("simulation")
class SimulationBackend(Backend):
    """Run the plan's FL workload on Flower's Simulation Engine with a virtual clock.

    It runs ``workload.fl`` only; links are modelled on the virtual clock (``links.mode``
    proxy or none, every link of kind proxy); the fault kinds it takes are those it can
    decide on virtual time (:func:`testbed.simulation.vfaults.check_faults`, called by
    :meth:`preflight`). It has no node handles, no SuperLink to restart or re-attach to
    and no service nodes (those members raise
    :class:`~testbed.backends.base.NotSupported`).

    Parameters
    ----------
    plan : Plan
        The resolved run.
    run_dir : pathlib.Path
        Artifact folder of the run (settings, log).
    ray_address : str, optional
        Attach to this Ray cluster (default: ``simulation.ray_address``, else a local Ray).
    """

    name = "simulation"
    workloads: ClassVar[frozenset[str] | None] = frozenset({"fl"})
    #: Every link kind that prices itself on the virtual clock (``LinkKind.price``; one
    #: that cannot, e.g. mmwave, says why: :func:`testbed.simulation.links.check_links`).
    link_kinds: ClassVar[frozenset[str] | None] = None
    #: The fault schedule is decided on the virtual clock (testbed.simulation.vfaults),
    #: not by the control plane's chaos engine.
    decides_faults = True
    #: A user's Flower App runs on the Simulation Engine, observed as on local
    #: (:func:`testbed.simulation.runner.user_server_app`).
    user_apps = True
    dilates_time = False  # virtual time: every device priced at its own speed
    #: No ``warm`` (``--cold``): the Simulation Engine runs every ClientApp in a Ray
    #: actor, there is no per-message ClientApp process to start cold or warm.
    options: ClassVar[frozenset[str]] = frozenset({"ray_address"})

    def __init__(
        self, plan: Plan, run_dir: Path, ray_address: str | None = None
    ) -> None:
        super().__init__(plan, run_dir)
        self.ray_address = ray_address
        self.procs = ProcGroup()

    @classmethod
    def unavailable(cls) -> str | None:
        """Why not here: Ray is not installed (looked up, not imported)."""
        if importlib.util.find_spec("ray") is None:
            return f"Ray is not installed; pip install '{EXTRA}'"
        return None

    @classmethod
    def preflight(
        cls, experiments: Sequence[Experiment], options: Mapping[str, Any] | None = None
    ) -> None:
        """The declarations, then: Ray installed, the faults decidable on virtual time
        and the availability trace readable (:func:`check_experiment`)."""
        super().preflight(experiments, options)
        if (why := cls.unavailable()) is not None:
            raise NotSupported(f"--backend simulation: {why}")
        for exp in experiments:
            check_experiment(exp)
            check_links(exp)  # every link's kind prices it on the virtual clock, or says why

    # -- fleet lifecycle: nothing runs before submit ------------------------------------
    def start(self, timeout_s: float = 60.0) -> None:
        """Nothing to start: Ray starts with the simulation process."""
        check_experiment(self.plan.experiment)

    def start_schedules(
        self, only: Collection[str] | None = None, t0: float | None = None
    ) -> None:
        """Nothing to play: link schedules and satellite passes are on the virtual clock."""

    def stop(self) -> None:
        """Stop the simulation process tree (Ray included) if it still runs, and remove
        the generated dataset it shared with its workers (``data_cache``: not a record,
        :func:`testbed.simulation.runner.data_cache`)."""
        self.procs.stop_all()
        shutil.rmtree(self.run_dir / "data_cache", ignore_errors=True)

    # -- the Flower run ----------------------------------------------------------------
    def settings(self, run_config: dict[str, object]) -> dict[str, Any]:
        """What the simulation process needs (written to ``simulation.json``)."""
        exp = self.plan.experiment
        spec = exp.workload.fl
        assert spec is not None
        sim = exp.simulation or SimulationSpec()
        deadline = float(spec.round_timeout_s)
        population = ClientPopulation.from_plan(
            self.plan, exp.links.mode, self._space_schedules()
        )
        avail = sim.availability
        return {
            "run_id": secrets.randbits(63),
            "run_config": run_config,
            "names": json.loads(self.plan.client_names_json()),
            "num_cpus": sim.num_cpus or NUM_CPUS,
            "client_cpus": sim.client_cpus,
            "ray_address": self.ray_address or sim.ray_address,
            "wall_cap_s": max(600.0, 10 * deadline),
            "clock": {
                "deadline_s": deadline,
                **protocol_terms(spec.protocol_timing, sim, self.plan.num_clients),
                "seed": self.plan.seed,
                "population": population.to_dict(),
                "faults": [json.loads(f.model_dump_json(exclude_none=True)) for f in exp.faults],
                "availability": avail.model_dump() if avail is not None else None,
            },
        }

    def _space_schedules(self) -> dict[str, LinkSchedule]:
        """Satellite passes of the space-tier clients (run seconds)."""
        exp = self.plan.experiment
        if exp.space is None or exp.fleet is None:
            return {}
        space_ids = {n.id for n in exp.fleet.nodes if n.tier == "space"}
        space = [n.name for n in self.plan.clients if n.tier == "space"] if space_ids else []
        if not space:
            return {}
        from testbed.space.schedule import SpaceModel

        fl = exp.workload.fl
        horizon = fl.round_timeout_s * (fl.rounds + 2) + 120 if fl else None
        if exp.space.horizon_s is not None and horizon is not None:
            horizon = max(horizon, exp.space.horizon_s)
        model = SpaceModel(exp.space, space, horizon_s=horizon)
        return {name: model.link_schedule(name) for name in space}

    def submit(self, run_config: dict[str, object], app_dir: Path | None = None) -> Popen:
        """Start the simulation process; it ends with the Flower run. ``app_dir``: a
        user's Flower App (its observed copy); the process then runs in the server
        node's folder (``nodes/<server>``), where the app's ServerApp writes its files
        as on the local backend."""
        path = self.run_dir / "simulation.json"
        settings = self.settings(run_config)
        cwd = None
        if app_dir is not None:
            settings["app_dir"] = str(Path(app_dir).resolve())
            settings["artifact_dir"] = str(self.run_dir.resolve())
            folder = self.run_dir / "nodes" / self.plan.server.name
            folder.mkdir(parents=True, exist_ok=True)
            cwd = str(folder)
        path.write_text(json.dumps(settings, indent=1))
        env = dict(os.environ)
        env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "testbed.simulation.runner", str(path.resolve())]
        log = self.run_dir.resolve() / "logs" / "simulation.log"
        return self.procs.start("simulation", cmd, log, env, cwd=cwd)

    def flwr_run_id(self) -> int | None:
        """None: no SuperLink holds the run."""
        return None

    # (attach, restart_superlink, node: NotSupported, the base's defaults: a simulation
    # has no SuperLink, and its nodes are virtual; faults are decided on its clock)

    # -- observations ------------------------------------------------------------------
    def fleet_info(self) -> dict[str, Any]:
        """The links in force, and that they are modelled: each client's link is priced
        on the virtual clock by its kind; no traffic is shaped. ``clock``: ``virtual``
        (round times are the clock's, modelled: docs/simulation.md); ``ray``: the local
        Ray's CPUs or the cluster attached to; ``ignored``: ``simulation.num_cpus`` when
        a cluster is attached (it sizes a local Ray only)."""
        sim = self.plan.experiment.simulation or SimulationSpec()
        address, cpus = self.ray_address or sim.ray_address, sim.num_cpus or NUM_CPUS
        info: dict[str, Any] = {
            "clock": "virtual",
            **links_in_force(self.plan, self.plan.experiment.links.mode),
            "links_modelled": "priced on the virtual clock by each link's kind; "
            "no traffic is shaped",
            "ray": f"cluster at {address}" if address else f"local, {cpus} CPUs",
        }
        ignored = self.ignored(self.plan.experiment)
        if address and sim.num_cpus is not None:
            ignored.append(f"simulation.num_cpus: {sim.num_cpus} (sizes a local Ray only)")
        if ignored:
            info["ignored"] = "; ".join(ignored)
        return info

    @property
    def links(self) -> Mapping[str, Link]:
        return {}

    def link_counters(self) -> dict[str, dict[str, Any]]:
        return {}

    def node_ids(self) -> dict[str, str]:
        return {}

    def node_limits(self) -> dict[str, dict[str, Any]]:
        return {}

    def space_model(self) -> None:
        return None

    def rss_mb(self) -> dict[str, float]:
        """Resident memory of the whole simulation (process tree, Ray workers included)."""
        return {"simulation": self.procs.rss_mb("simulation")} if self.procs.procs else {}

    def resources(self) -> dict[str, NodeResources]:
        return {k: NodeResources(rss_mb=v) for k, v in self.rss_mb().items()}
