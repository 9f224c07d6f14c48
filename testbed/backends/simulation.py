"""Simulation backend: the same Flower apps on Flower's Simulation Engine (Ray).

No SuperLink, no SuperNodes, no emulated links: ``submit`` starts one process
(:mod:`testbed.simulation.runner`) that runs the testbed's ServerApp and ClientApp
through Flower's Simulation Engine with the virtual clock
(:mod:`testbed.simulation.clock`) on the ServerApp's grid. The ServerApp writes the same
telemetry JSONL as on the local backend, so the FL workload's pump, the store, reports
and dashboard work unchanged. See docs/simulation.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.backends import register_backend
from testbed.backends.base import NodeResources
from testbed.procs import Popen, ProcGroup
from testbed.simulation.clock import PROTOCOL_DELAY_S

if TYPE_CHECKING:
    from testbed.emulation.link import Link
    from testbed.planner import Plan, PlannedNode
    from testbed.spec.models import Experiment

#: Ray CPUs of the simulation (the whole run) and per ClientApp actor.
NUM_CPUS = int(os.environ.get("TESTBED_SIM_CPUS", "2"))
CLIENT_CPUS = 1.0
EXTRA = "continuum-testbed[sim]"


def check_experiment(exp: Experiment) -> None:
    """ValueError naming the key for what the simulation cannot do."""
    if exp.links.mode not in ("proxy", "none"):
        raise ValueError(
            f"links.mode: {exp.links.mode!r} needs real links; --backend simulation models "
            "links on its virtual clock (allowed: proxy, none)"
        )
    for i, fault in enumerate(exp.faults):
        raise ValueError(
            f"faults[{i}].kind: {fault.kind!r} cannot be simulated by --backend simulation "
            "(no fault kind is simulated yet; run it on --backend local)"
        )
    if exp.workload.fl is None:
        raise ValueError("workload: --backend simulation runs workload.fl only")


def client_model(node: PlannedNode) -> dict[str, Any]:
    """The virtual clock's view of one client: stretch and link parameters."""
    speed = node.profile.cpu_speed_factor
    return {
        "stretch": max(1.0, 1.0 / speed),
        "bandwidth_mbps": node.uplink.bandwidth_mbps,
        "latency_ms": node.uplink.latency_ms,
    }


@register_backend("simulation")
class SimulationBackend:
    """Run the plan's FL workload on Flower's Simulation Engine with a virtual clock.

    Parameters
    ----------
    plan : Plan
        The resolved run.
    run_dir : pathlib.Path
        Artifact folder of the run (settings, log).
    """

    name = "simulation"

    def __init__(self, plan: Plan, run_dir: Path, **_options: Any) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.procs = ProcGroup()
        self.superlink_port: int | None = None
        self.superlink_restarts = 0

    @staticmethod
    def preflight(experiments: list[Experiment]) -> None:
        """Before anything is recorded: Ray installed, nothing the simulation cannot do."""
        if importlib.util.find_spec("ray") is None:
            raise ValueError(f"--backend simulation: Ray is not installed; pip install '{EXTRA}'")
        for exp in experiments:
            check_experiment(exp)

    # -- fleet lifecycle: nothing runs before submit ------------------------------------
    def start(self, timeout_s: float = 60.0) -> None:
        """Nothing to start: Ray starts with the simulation process."""
        check_experiment(self.plan.experiment)

    def start_schedules(self) -> None:
        """Link schedules are not simulated (links are static on the virtual clock)."""

    def stop(self) -> None:
        """Stop the simulation process tree (Ray included) if it still runs."""
        self.procs.stop_all()

    # -- the Flower run ----------------------------------------------------------------
    def settings(self, run_config: dict[str, object]) -> dict[str, Any]:
        """What the simulation process needs (written to ``simulation.json``)."""
        spec = self.plan.experiment.workload.fl
        assert spec is not None
        deadline = float(spec.round_timeout_s)
        return {
            "run_id": secrets.randbits(63),
            "run_config": run_config,
            "names": self.plan.client_names(),
            "num_cpus": NUM_CPUS,
            "client_cpus": CLIENT_CPUS,
            "wall_cap_s": max(600.0, 10 * deadline),
            "clock": {
                "deadline_s": deadline,
                "protocol_delay_s": PROTOCOL_DELAY_S,
                "clients": {n.name: client_model(n) for n in self.plan.clients},
            },
        }

    def submit(self, run_config: dict[str, object]) -> Popen:
        """Start the simulation process; it ends with the Flower run."""
        path = self.run_dir / "simulation.json"
        path.write_text(json.dumps(self.settings(run_config), indent=1))
        env = dict(os.environ)
        env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "testbed.simulation.runner", str(path)]
        return self.procs.start("simulation", cmd, self.run_dir / "logs" / "simulation.log", env)

    def attach(self, flwr_run_id: int) -> Popen:
        """A simulation cannot be re-attached (it has no SuperLink)."""
        raise ValueError("--backend simulation: a simulation run cannot be re-attached")

    def flwr_run_id(self) -> int | None:
        """None: no SuperLink holds the run."""
        return None

    def restart_superlink(self) -> None:
        """No SuperLink to restart (refused in :func:`check_experiment`)."""
        raise ValueError("--backend simulation: there is no SuperLink to restart")

    def node(self, name: str) -> Any:
        """No node handles: faults are refused before the run (check_experiment)."""
        raise ValueError(f"--backend simulation: node {name!r} is virtual (no handle)")

    # -- observations ------------------------------------------------------------------
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
