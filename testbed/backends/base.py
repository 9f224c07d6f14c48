"""The contract every backend implements (``local`` now; ``docker`` and ``simulation``
later): start and stop a fleet, node handles for faults, the links, resource metrics.

The runner, the chaos engine (fault kinds), the controller and the workloads talk to a
backend only through :class:`Backend`, :class:`NodeHandle` and
:class:`testbed.emulation.link.Link`. A backend is one registered class in one file
(``@register_backend("name")`` in :mod:`testbed.backends`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    from nodes.device_control import NodeControl
    from testbed.emulation.link import Link
    from testbed.planner import Plan


@dataclass(frozen=True)
class NodeResources:
    """One sample of a node's resource use.

    Attributes
    ----------
    rss_mb : float
        Resident memory of the node's processes (or container), MB.
    cpu_pct : float or None
        CPU use since the previous sample, percent of one core (None when unknown).
    source : str
        Where the figure comes from (``procfs``, ``docker-stats`` ...).
    """

    rss_mb: float
    cpu_pct: float | None = None
    source: str = "procfs"


@runtime_checkable
class Process(Protocol):
    """What ``submit``/``attach`` return: something that ends with the Flower run."""

    def poll(self) -> int | None: ...


@runtime_checkable
class NodeHandle(Protocol):
    """One node of a running fleet, as the fault kinds act on it.

    ``kill`` is a crash (no goodbye); ``stop``/``start`` a clean stop and a restart with
    the same identity (the node registers again); ``pause``/``resume`` freeze and thaw
    it; ``update_limits`` changes its CPU share or memory cap live (a real throttle);
    ``set_control`` writes the node's live fault controls (straggler slowdown,
    misconfiguration) that its ClientApp reads at every task.
    """

    name: str

    def kill(self) -> None: ...
    def stop(self) -> None: ...
    def start(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def update_limits(
        self, *, cpus: float | None = None, memory_mb: int | None = None
    ) -> dict[str, Any]: ...
    def set_control(self, control: NodeControl) -> None: ...
    def alive(self) -> bool: ...


@runtime_checkable
class Backend(Protocol):
    """A fleet realised from a :class:`~testbed.planner.Plan`.

    Attributes
    ----------
    name : str
        The registered name (``--backend``).
    plan, run_dir
        The run it realises and the run's artifact folder.
    superlink_port : int or None
        Where the SuperLink listens once started (None before).
    superlink_restarts : int
        How many times the SuperLink was restarted by a fault.
    """

    name: ClassVar[str]
    plan: Plan
    run_dir: Path
    superlink_port: int | None
    superlink_restarts: int

    # -- fleet lifecycle --------------------------------------------------------------
    def start(self, timeout_s: float = 60.0) -> None: ...
    def stop(self) -> None: ...
    def start_schedules(self) -> None: ...

    # -- nodes, links and the server ---------------------------------------------------
    def node(self, name: str) -> NodeHandle: ...
    @property
    def links(self) -> Mapping[str, Link]: ...
    def restart_superlink(self) -> None: ...

    # -- the Flower run ----------------------------------------------------------------
    def submit(self, run_config: dict[str, object]) -> Process: ...
    def attach(self, flwr_run_id: int) -> Process: ...
    def flwr_run_id(self) -> int | None: ...

    # -- observations ------------------------------------------------------------------
    def node_ids(self) -> dict[str, str]: ...
    def node_limits(self) -> dict[str, dict[str, Any]]: ...
    def resources(self) -> dict[str, NodeResources]: ...
    def space_model(self) -> Any: ...
