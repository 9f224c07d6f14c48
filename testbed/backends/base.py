"""The contract every backend implements: start and stop a fleet, node handles for
faults, the links, the Flower run, resource observations, and what it supports.

:class:`Backend` is an abstract base class: every member a caller uses is declared
here, abstract where every backend implements it, with a default where a backend may
lack it (an action it cannot take raises :class:`NotSupported`; an observation it
cannot make is empty). The built-ins are ``local`` (processes on loopback),
``docker`` (a container per node), ``compose`` (attach to a docker-compose fleet) and
``simulation`` (Flower's Simulation Engine on a virtual clock).

Each backend declares what it supports (:attr:`Backend.workloads`,
:attr:`Backend.link_kinds`, :attr:`Backend.fault_kinds`); its classmethod
:meth:`Backend.preflight` checks experiments against them plus the backend's own
checks, and is what both ``testbed validate --backend B`` and ``testbed run --backend
B`` (and :func:`testbed.runner.run_experiment`) call, so they cannot disagree.

The runner, the chaos engine (fault kinds), the controller and the workloads talk to a
backend only through :class:`Backend`, :class:`NodeHandle` and
:class:`testbed.emulation.link.Link`. A backend is one registered class in one file
(``@register_backend("name")`` in :mod:`testbed.backends`).
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    from nodes.device_control import NodeControl
    from testbed.emulation.link import Link
    from testbed.planner import Plan
    from testbed.procs import Popen
    from testbed.space.schedule import SpaceModel
    from testbed.spec.models import Experiment, LinkSpec


class NotSupported(ValueError):
    """What a backend cannot do (``start_services is not supported on --backend
    simulation``); a ValueError, so the CLI reports it as a user error (exit 2)."""


class NotStarted(KeyError):
    """A fault or an injection names a node the fleet did not start (it runs nothing in
    this run: an LLM stage HEFT left empty, a node of no workload)."""

    def __init__(self, name: str, started: list[str]) -> None:
        super().__init__(f"no started client node {name!r} (nodes: {started})")


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


class Backend(abc.ABC):
    """A fleet realised from a :class:`~testbed.planner.Plan` (constructed as
    ``cls(plan, run_dir, **options)``, not started).

    Class attributes (declarations)
    -------------------------------
    name : str
        The registered name (``--backend``).
    workloads : frozenset of str or None
        The ``workload:`` sections it runs (None: every registered workload).
    link_kinds : frozenset of str or None
        The link kinds it builds, for ``links.mode`` and each link's own ``kind``
        (None: every registered kind); ``links.mode: none`` (no emulated links) is
        always allowed.
    fault_kinds : frozenset of str or None
        The fault kinds its fleet can take (None: every kind, by name or dotted path).
        A backend whose answer depends on more than the kind's name checks in its
        :meth:`preflight` (simulation: :func:`testbed.simulation.vfaults.check_faults`).
    decides_faults : bool
        True when the backend decides the spec's fault schedule itself (simulation: on
        its virtual clock), so the control plane's chaos engine must not fire it.
    options : frozenset of str
        The keyword options its constructor takes (``warm``: ``testbed run --cold``);
        any other is refused by :func:`testbed.backends.preflight`, never ignored.
    user_apps : bool
        True when it runs a user's own Flower App (``workload.fl.app``); the preflight
        refuses one elsewhere, naming the field.
    app_runs_on_host : bool
        True when a user's app runs with this host's Python (local, simulation): the
        preflight refuses an app whose declared dependency is not installed here.

    Attributes
    ----------
    plan : Plan
        The run it realises.
    run_dir : pathlib.Path
        The run's artifact folder.
    superlink_port : int or None
        Where the SuperLink listens on 127.0.0.1 once started (None before, or none).
    superlink_restarts : int
        How many times the SuperLink was restarted by a fault.
    """

    name: ClassVar[str]
    workloads: ClassVar[frozenset[str] | None] = None
    link_kinds: ClassVar[frozenset[str] | None] = None
    fault_kinds: ClassVar[frozenset[str] | None] = None
    decides_faults: ClassVar[bool] = False
    options: ClassVar[frozenset[str]] = frozenset()
    #: Runs a user's own Flower App (``workload.fl.app``, :mod:`nodes.fl.userapp`).
    user_apps: ClassVar[bool] = False
    #: A user's app runs with this host's Python (its declared dependencies must be
    #: installed here); False: the backend brings them (docker: a derived image).
    app_runs_on_host: ClassVar[bool] = True
    #: Reads ``fleet.nodes[i].placement`` (swarm: which engine runs a node's containers).
    places_nodes: ClassVar[bool] = False
    #: Runs on the wall clock, so reads ``time_dilation`` (:mod:`testbed.dilation`);
    #: False: a virtual clock (simulation), where a fast device needs no dilation.
    dilates_time: ClassVar[bool] = True

    def __init__(self, plan: Plan, run_dir: Path, **options: Any) -> None:
        """Keep the run; ``options`` are the backend's own (``warm``, ``image`` ...)."""
        del options  # (a subclass takes the ones it knows by name)
        self.plan = plan
        self.run_dir = run_dir
        self.superlink_port: int | None = None
        self.superlink_restarts = 0

    # -- what it supports, checked before anything is recorded ------------------------
    @classmethod
    def unavailable(cls) -> str | None:
        """Why this backend cannot run on this host now (None: it can), without a spec:
        what a run needs of this machine beyond the spec (docker: an engine that
        answers and has the image; simulation: Ray installed).

        ``testbed run`` refuses with it after :meth:`preflight`; ``testbed validate``
        prints it without failing (the spec is valid for the backend, the host is not
        ready yet). Cheap enough to ask every few seconds (the controller's ``GET
        /backends``): a backend that needs an engine pings it with a short timeout, one
        that needs a package looks it up without importing it. The base needs nothing.
        """
        return None

    @classmethod
    def preflight(
        cls, experiments: Sequence[Experiment], options: Mapping[str, Any] | None = None
    ) -> None:
        """Check experiments against this backend before anything is recorded.

        The base checks the declarations (:attr:`workloads`, :attr:`link_kinds`,
        :attr:`fault_kinds`); a backend extends it with its own checks (an engine
        reachable, an image present, a package installed) and calls ``super()``.
        ``testbed validate --backend``, ``testbed run --backend`` and
        :func:`testbed.runner.run_experiment` all call it.

        Parameters
        ----------
        experiments : Sequence[Experiment]
            The configurations to run (a sweep's, or one).
        options : Mapping, optional
            The backend options the run passes (:attr:`options`, already checked by
            name), for checks that depend on them (docker: ``oversubscribe``).

        Raises
        ------
        NotSupported
            Naming the field: ``workload.<section>``, ``links.mode``,
            ``links.nodes.<node>.kind``, ``faults[<i>].kind``; with what is allowed.
        """
        del options  # (the declarations do not depend on them)
        for exp in experiments:
            cls._check_workloads(exp)
            cls._check_user_app(exp)
            cls._check_links(exp)
            cls._check_faults(exp)
            cls._check_time_dilation(exp)

    @classmethod
    def notes(
        cls, experiments: Sequence[Experiment], options: Mapping[str, Any] | None = None
    ) -> list[str]:
        """What a run will do differently from the spec's letter, said before it starts
        (``testbed validate`` prints them; the run records them in its summary). docker:
        nodes whose built-in profile is above this host get the host's figures. The
        base notes what of the spec it does not read (:meth:`ignored`)."""
        del options
        if not experiments:
            return []
        out = [f"ignored: {line}" for line in cls.ignored(experiments[0])]
        if cls.dilates_time:
            out += cls._time_notes(experiments[0])
        return out

    @classmethod
    def _check_time_dilation(cls, exp: Experiment) -> None:
        """A dilated run (``time_dilation`` above 1) of a workload that keeps a clock
        dilation does not reach is refused, naming the field."""
        from testbed.dilation import resolve, unsupported

        if not cls.dilates_time or resolve(exp).tdf == 1.0:
            return
        if bad := unsupported(exp):
            raise NotSupported(
                f"time_dilation: workload.{', workload.'.join(bad)} does not run on a "
                f"dilated clock yet (docs/time-dilation.md says which do); set "
                f"time_dilation: 1"
            )

    @classmethod
    def _time_notes(cls, exp: Experiment) -> list[str]:
        """The factor a run will use, and the profiles that run faster than it lets
        them (at ``TDF`` x this host's speed instead of their own)."""
        from testbed.dilation import host_speed_profiles, resolve

        d = resolve(exp)
        out = [f"time dilation: TDF {d.tdf:g} ({d.chosen})"] if d.tdf != 1.0 else []
        if fast := host_speed_profiles(exp, d.tdf):
            out.append(
                f"profiles faster than TDF x this host run at {d.tdf:g} x host speed, not "
                f"their own: {', '.join(f'{n} ({s:g})' for n, s in fast.items())} (set "
                f"time_dilation: auto to run them at their speed)"
            )
        return out

    @classmethod
    def _refuse(cls, field: str, what: str, allowed: Collection[str]) -> NotSupported:
        return NotSupported(
            f"{field}: {what} is not supported on --backend {cls.name} "
            f"(supported: {', '.join(sorted(allowed)) or 'none'})"
        )

    @classmethod
    def _check_workloads(cls, exp: Experiment) -> None:
        if cls.workloads is None:
            return
        for section in exp.workload.sections:
            if section not in cls.workloads:
                raise cls._refuse(f"workload.{section}", "this workload", cls.workloads)

    @classmethod
    def _check_user_app(cls, exp: Experiment) -> None:
        fl = exp.workload.fl
        if fl is None or fl.app is None:
            return
        if not cls.user_apps:
            raise NotSupported(
                f"workload.fl.app: a user's own Flower App is not supported on --backend "
                f"{cls.name} yet (supported: --backend local, docker, simulation)"
            )
        if cls.app_runs_on_host:
            from nodes.fl.userapp import require_on_host

            require_on_host(fl.app, cls.name)

    @classmethod
    def _check_links(cls, exp: Experiment) -> None:
        allowed, mode = cls.link_kinds, exp.links.mode
        if allowed is None or mode == "none":
            return
        if mode not in allowed:
            raise cls._refuse("links.mode", f"link kind {mode!r}", {*allowed, "none"})
        links: list[tuple[str, LinkSpec]] = [
            *((f"links.defaults.{k}", v) for k, v in exp.links.defaults.items()),
            *((f"links.nodes.{k}", v) for k, v in exp.links.nodes.items()),
        ]
        for where, link in links:
            kind = link.kind_in(mode)
            if kind not in allowed:
                raise cls._refuse(f"{where}.kind", f"link kind {kind!r}", allowed)

    @classmethod
    def _check_faults(cls, exp: Experiment) -> None:
        if cls.fault_kinds is None:
            return
        for i, f in enumerate(exp.faults):
            if f.kind not in cls.fault_kinds:
                raise cls._refuse(f"faults[{i}].kind", f"fault kind {f.kind!r}", cls.fault_kinds)

    def _not_supported(self, member: str) -> NotSupported:
        return NotSupported(f"{member} is not supported on --backend {self.name}")

    # -- fleet lifecycle --------------------------------------------------------------
    @abc.abstractmethod
    def start(self, timeout_s: float = 60.0) -> None:
        """Start the fleet (SuperLink, links, SuperNodes); return when it is ready.

        Parameters
        ----------
        timeout_s : float
            How long the fleet may take to come up, s (a backend may allow more).
        """

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop everything the backend started (processes, containers, links)."""

    @abc.abstractmethod
    def start_schedules(self, only: Collection[str] | None = None, t0: float | None = None) -> None:
        """Play the time-varying links (schedules, satellite passes) from ``t0``.

        Parameters
        ----------
        only : Collection[str] or None
            The nodes whose links start (None: every link).
        t0 : float or None
            The clock's origin, ``time.monotonic()`` s (None: now).
        """

    # -- nodes, links and the server ---------------------------------------------------
    def node(self, name: str) -> NodeHandle:
        """The handle the fault kinds act on for client node ``name``.

        Raises
        ------
        NotSupported
            When the backend has no node handles (simulation, compose).
        """
        raise self._not_supported(f"node {name!r}: node handles")

    @property
    @abc.abstractmethod
    def links(self) -> Mapping[str, Link]:
        """Node name -> its emulated link (empty with ``links.mode: none`` or none)."""

    def restart_superlink(self) -> None:
        """Restart the SuperLink with its state (fault ``superlink-restart``).

        Raises
        ------
        NotSupported
            When there is no SuperLink this backend owns.
        """
        raise self._not_supported("restart_superlink")

    # -- the Flower run ----------------------------------------------------------------
    @abc.abstractmethod
    def submit(self, run_config: dict[str, object], app_dir: Path | None = None) -> Process:
        """Submit the Flower app with ``run_config``; the process ends with the run.
        ``app_dir``: the Flower App folder to run (default: the testbed's own app,
        ``nodes/fl/app``; a user's app observed, :func:`nodes.fl.userapp.observed_fab`)."""

    def attach(self, flwr_run_id: int) -> Process:
        """Stream run ``flwr_run_id`` again after a SuperLink restart.

        Raises
        ------
        NotSupported
            When a run cannot be re-attached (simulation).
        """
        raise self._not_supported("attach")

    @abc.abstractmethod
    def flwr_run_id(self) -> int | None:
        """The Flower run id of the submitted run (None: unknown, or no SuperLink)."""

    # -- a workload's own processes and links ------------------------------------------
    def start_services(
        self, commands: Mapping[str, list[str]], ports: Mapping[str, int], timeout_s: float = 60.0
    ) -> dict[str, int]:
        """Start nodes that run a workload's own server, each behind its link.

        Parameters
        ----------
        commands : Mapping[str, list[str]]
            Node name -> the command of its server.
        ports : Mapping[str, int]
            Node name -> the 127.0.0.1 port its server listens on.
        timeout_s : float
            How long a server may take to listen, s.

        Returns
        -------
        dict[str, int]
            Node name -> the 127.0.0.1 port that reaches it through its link.

        Raises
        ------
        NotSupported
            When the backend cannot start service nodes.
        """
        raise self._not_supported("start_services")

    def start_processes(self, commands: Mapping[str, list[str]]) -> dict[str, str]:
        """Start nodes that run a workload's own program (no port waited for).

        Returns
        -------
        dict[str, str]
            Node name -> its process key (for :meth:`process`).

        Raises
        ------
        NotSupported
            When the backend cannot start programs on nodes.
        """
        raise self._not_supported("start_processes")

    def open_links(
        self, specs: Mapping[str, LinkSpec], server_port: int, server_host: str = "127.0.0.1"
    ) -> dict[str, str]:
        """One link per named node to ``server_host:server_port``.

        Returns
        -------
        dict[str, str]
            Node name -> the ``host:port`` it dials.

        Raises
        ------
        NotSupported
            When the backend cannot make a workload's own links.
        """
        raise self._not_supported("open_links")

    def service_host(self, key: str) -> str:
        """The address a workload's process ``key`` serves on, as the runner reaches it
        (default this host's loopback)."""
        del key
        return "127.0.0.1"

    def process(self, key: str) -> Popen:
        """The host process of key ``key`` (from :meth:`start_processes`).

        Raises
        ------
        NotSupported
            When the backend has no processes of its own to hand out.
        """
        raise self._not_supported("process")

    # -- observations ------------------------------------------------------------------
    @abc.abstractmethod
    def node_ids(self) -> dict[str, str]:
        """Flower node id -> node name (empty when the backend has none)."""

    @abc.abstractmethod
    def node_limits(self) -> dict[str, dict[str, Any]]:
        """Node name -> the limits in force on it (for the ``node_limits`` events)."""

    @abc.abstractmethod
    def resources(self) -> dict[str, NodeResources]:
        """Node name -> one sample of its memory (MB) and CPU (percent of one core)."""

    @abc.abstractmethod
    def rss_mb(self) -> dict[str, float]:
        """Node name -> resident memory of its processes (or container), MB."""

    @abc.abstractmethod
    def link_counters(self) -> dict[str, dict[str, Any]]:
        """Node name -> its link's counters (``bytes_up``, ``bytes_down`` in bytes,
        ``partitioned_s``, ``stalled_s`` in s, ``changes`` ...)."""

    @abc.abstractmethod
    def space_model(self) -> SpaceModel | None:
        """The orbital model of the run's space tier (None: no space tier here)."""

    def alive(self) -> dict[str, bool]:
        """Process (or container) key -> whether it still runs.

        Raises
        ------
        NotSupported
            When the backend has no processes of its own to watch.
        """
        raise self._not_supported("alive")

    def fleet_info(self) -> dict[str, Any]:
        """What the fleet chose at start, for the ``fleet_ready`` event and the run's
        summary: the links in force (:func:`links_in_force`: ``links_mode``,
        ``link_kinds``), plus ``links_fallback`` (docker: why netem fell back to proxy)
        or ``links_modelled`` and ``clock`` (simulation: links are modelled, not shaped;
        round times are virtual), and ``ignored``: what of the spec this backend does not
        read (a ``simulation:`` section off the simulation backend)."""
        info = links_in_force(self.plan, self.plan.experiment.links.mode)
        ignored = self.ignored(self.plan.experiment)
        if ignored:
            info["ignored"] = "; ".join(ignored)
        return info

    @classmethod
    def ignored(cls, exp: Experiment) -> list[str]:
        """What of ``exp`` this backend does not read: a ``simulation:`` section off the
        simulation backend, ``fleet.nodes[i].placement`` off a backend that does not
        place nodes (:attr:`places_nodes`)."""
        out = []
        if exp.simulation is not None and cls.name != "simulation":
            out.append("simulation: (read by --backend simulation only)")
        if exp.time_dilation != 1.0 and not cls.dilates_time:
            out.append(
                f"time_dilation: {exp.time_dilation} (a virtual clock prices every "
                f"device at its profile's speed without it)"
            )
        placed = [n.id for n in (exp.fleet.nodes if exp.fleet else ()) if n.placement]
        if placed and not cls.places_nodes:
            out.append(
                f"placement of {', '.join(placed)} (read by --backend swarm only: every "
                f"node runs on this host)"
            )
        return out

    def exit_reasons(self) -> dict[str, str]:
        """Client node -> why it ended on its own, not by a fault (docker: ``oom``,
        ``exited <code>``); empty by default."""
        return {}

    def mean_cpu_pct(self) -> dict[str, float]:
        """Node name -> mean CPU use over the run, percent of one core, from the
        engine's stats (docker); empty by default."""
        return {}


def links_in_force(plan: Plan, mode: str) -> dict[str, Any]:
    """The links of ``plan``'s client nodes under ``links.mode`` = ``mode`` (the mode in
    force, which may differ from the spec's): ``{"links_mode": mode, "link_kinds":
    {kind: links of that kind}}`` (a link's own ``kind`` wins over the mode; ``none``:
    no emulated links, so no kinds)."""
    kinds: dict[str, int] = {}
    if mode != "none":
        for link, count in plan.client_links():
            kind = link.kind_in(mode)
            kinds[kind] = kinds.get(kind, 0) + count
    return {"links_mode": mode, "link_kinds": kinds}
