"""Local backend: every node a process on 127.0.0.1 (the embedded default).

The server node runs a real ``flower-superlink``; every client node runs a real
``flower-supernode`` with the node agent's warm executor, each through the node entry
point the Docker image uses too (:mod:`nodes.cli`: ``python -m nodes`` here,
``testbed node`` in a container). Ports are chosen free at run time.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import tomli_w

from nodes.agent import FLOWER_ENV, SUPERLINK_TIMING_ENV, client_nice, flower_bin
from nodes.device_control import NodeControl
from testbed.backends import register_backend
from testbed.backends.base import Backend, NodeResources, NotStarted, NotSupported
from testbed.backends.local_node import LocalNode, cpu_seconds, remove_node_cgroups
from testbed.backends.zygote import Zygote
from testbed.emulation.kinds import LINK_KINDS, LinkEnds, link_kind
from testbed.emulation.link import Link
from testbed.planner import Plan, PlannedNode
from testbed.procs import Popen, ProcGroup, children_map, free_port, log_tail, wait_port

if TYPE_CHECKING:
    from testbed.space.schedule import SpaceModel
    from testbed.spec.models import Experiment, LinkSpec

APP_DIR = Path(__file__).resolve().parents[2] / "nodes" / "fl" / "app"
SUPEREXEC_POLL_ENV = "FLWR_SUPEREXEC_TASK_POLL_INTERVAL"  # Flower's own setting, s
FAST_SUPEREXEC_POLL_S = 0.1  # its value in ``fast`` protocol timing
REGISTER_TIMEOUT_S = 30.0  # the longest start() waits for the nodes to register, s
START_POLL_S = 0.02  # start() checks for warm and registered nodes this often, s
RESTARTED = "superlink restarted"  # what the server's agent logs once it started it again
RESTART_TIMEOUT_S = 60.0  # the longest restart_superlink() waits for the SuperLink, s
SUPERNODE_ID = re.compile(r"SuperNode ID: (\d+)")  # a SuperNode's registration, logged


@runtime_checkable
class _Namespaced(Protocol):
    """A link whose ends live in network namespaces (netem): a program runs on one side
    behind ``exec_prefix(side)``."""

    def exec_prefix(self, side: str) -> list[str]: ...


@runtime_checkable
class _RadioClocked(Protocol):
    """A link with a radio schedule of its own (mmwave), played from the ready time."""

    def restart_radio_clock(self, t0: float) -> None: ...


def _env(flwr_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(FLOWER_ENV)
    env["FLWR_HOME"] = str(flwr_home)
    env["PYTHONUNBUFFERED"] = "1"
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


@register_backend("local")
class LocalBackend(Backend):
    """Start the plan's nodes as local processes and submit the Flower app.

    It supports every workload, link kind and fault kind (the declarations of
    :class:`~testbed.backends.base.Backend` stay None); :meth:`preflight` adds that
    netem links need root.

    Parameters
    ----------
    plan : Plan
        The resolved run.
    run_dir : pathlib.Path
        Artifact folder of the run (logs, per-node FLWR_HOME, run config).
    warm : bool
        Use the warm executor (default) or Flower's cold per-message subprocesses.
    """

    name = "local"
    user_apps = True
    #: netem links need a server namespace this process makes (root / CAP_NET_ADMIN).
    netem_needs_root: ClassVar[bool] = True
    #: ``oversubscribe``: the fleet was started although the capacity check said it would
    #: not fit (``testbed run --oversubscribe``; the CLI checks, the run records it).
    options: ClassVar[frozenset[str]] = frozenset({"warm", "oversubscribe"})
    #: Where host-side links (proxy, mmwave) listen: the address nodes dial.
    listen_host: str = "127.0.0.1"
    #: The client nodes' scheduling priority (nice, 0-19), passed to each node's agent,
    #: which sets it before anything of the node starts; None: the default,
    #: :func:`nodes.agent.client_nice` (19, or ``$TESTBED_CLIENT_NICE``).
    node_nice: ClassVar[int | None] = None

    def __init__(
        self, plan: Plan, run_dir: Path, warm: bool = True, oversubscribe: bool = False
    ) -> None:
        super().__init__(plan, run_dir)
        self.warm = warm
        self.oversubscribe = oversubscribe
        self.procs = ProcGroup()
        self.node_ports: dict[str, int] = {}
        self._cmds: dict[str, list[str]] = {}
        self._links: dict[str, Link] = {}  # client node -> its link (not with mode none)
        self._run_tag = secrets.token_hex(3)  # names host-wide objects (netem namespaces)
        self._space: SpaceModel | None = None
        self.netns: str | None = None  # links.mode netem: the server namespace
        self._server_prefix: list[str] = []  # runs a program in the server's namespace
        self._client_prefix: dict[str, list[str]] = {}
        self.paused: set[str] = set()  # nodes frozen by a pause fault
        self._cpu: dict[str, tuple[float, dict[int, float]]] = {}  # last CPU sample
        self._zygote: Zygote | None = None  # forks the client nodes (warm, not netem)
        self._beside: dict[str, list[str]] = {}  # node -> its other processes' keys

    @classmethod
    def preflight(
        cls, experiments: Sequence[Experiment], options: Mapping[str, Any] | None = None
    ) -> None:
        """The declarations (:meth:`Backend.preflight`), then: netem links (``links.mode``
        or a link's ``kind``) need root here (:attr:`netem_needs_root`), and a link of
        kind netem needs the run's namespaces (``links.mode: netem``)."""
        super().preflight(experiments, options)
        for exp in experiments:
            cls._check_netem_per_link(exp)
        if not cls.netem_needs_root or os.geteuid() == 0:
            return
        for exp in experiments:
            mode = exp.links.mode
            if mode == "none":
                continue
            fields = {"links.mode": mode} | {
                f"links.{group}.{k}.kind": link.kind_in(mode)
                for group, links in (("defaults", exp.links.defaults), ("nodes", exp.links.nodes))
                for k, link in links.items()
            }
            where = next((f for f, kind in fields.items() if kind == "netem"), None)
            if where is not None:
                raise NotSupported(
                    f"{where}: netem links on --backend {cls.name} need root "
                    "(CAP_NET_ADMIN); use proxy"
                )

    @classmethod
    def _check_netem_per_link(cls, exp: Experiment) -> None:
        """A netem link puts its node in a network namespace that reaches the SuperLink
        in the run's server namespace, which only ``links.mode: netem`` creates: under
        another mode such a node never listens where the fleet waits for it."""
        if exp.links.mode in ("netem", "none"):
            return
        for group, links in (("defaults", exp.links.defaults), ("nodes", exp.links.nodes)):
            for k, link in links.items():
                if link.kind == "netem":
                    raise NotSupported(
                        f"links.{group}.{k}.kind: a netem link needs links.mode: netem "
                        f"on --backend {cls.name} (the run's network namespaces); set "
                        f"links.mode: netem, or use kind: proxy for this link"
                    )

    def _node_cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "nodes", *args]

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the SuperLink, then every SuperNode; return when all listen."""
        from nodes.agent import remove_stale_cgroups
        from testbed.reaper import write_fleet_file

        remove_stale_cgroups()
        write_fleet_file(self.run_dir, self._run_tag)
        mode = self.plan.experiment.links.mode
        host = "127.0.0.1"
        if mode == "netem":  # the SuperLink lives in this run's own server namespace
            self.netns = self._make_netns()
            host, self._server_prefix = "0.0.0.0", ["ip", "netns", "exec", self.netns]
        elif self.warm and self.plan.clients:  # imports the nodes' stack meanwhile
            self._zygote = Zygote(self.run_dir, self._run_tag)
            self._zygote.start(_env(self.run_dir), self.run_dir / "logs" / "zygote.log")
        self._start_superlink(host, timeout_s)
        if mode in LINK_KINDS:  # ("none": the nodes dial the SuperLink directly)
            self._start_links(mode)
        started = [(node.name, *self.start_node(node.name)) for node in self.plan.clients]
        if mode != "netem":  # (a SuperNode's Runtime API is inside its own namespace)
            for name, port, p in started:
                try:
                    wait_port(port, timeout_s, p)
                except RuntimeError as e:
                    log = log_tail(self.node_log(name))
                    raise RuntimeError(f"node {name}: {e}; {log}") from None
        if self.warm:  # nodes import their stack before the run is submitted
            self._wait_warm(timeout_s)
        self._wait_registered(min(timeout_s, REGISTER_TIMEOUT_S))

    def _wait_registered(self, timeout_s: float) -> None:
        """Wait until the SuperLink has every client node online: the fleet is ready
        when each node can be sampled, so link schedules and faults that start at
        ``fleet_ready`` meet registered nodes (a forked node is warm in milliseconds,
        before its SuperNode has registered). A SuperNode logs ``SuperNode ID: <id>``
        once the SuperLink answered its ``ActivateNode`` (the node is online there);
        the SuperLink's state may be in memory, so its logs are what is read. A node
        that exits, or does not register in time, is left to the run: the ServerApp's
        ``fleet_connected`` event records who was there."""
        pending = {n.name for n in self.plan.clients}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pending -= self.registered(pending)  # (a registered node's log: read no more)
            if not pending or any(self._exited(n) for n in pending):
                return
            time.sleep(START_POLL_S)

    def _exited(self, name: str) -> bool:
        """Whether client node ``name``'s main process has exited."""
        return self.procs.procs[name].poll() is not None

    def _start_superlink(self, host: str, timeout_s: float) -> None:
        """Start the server node's SuperLink on a free port (three tries)."""
        server = self.plan.server
        (self.run_dir / "nodes" / server.name).mkdir(parents=True, exist_ok=True)
        db = self.superlink_db()
        for _attempt in range(3):  # a port taken between choice and bind: pick again
            port = free_port()
            cmd = self._node_cmd("superlink", "--port", str(port), "--host", host)
            cmd += ["--database", str(db)] if db is not None else []
            p = self.procs.start(
                server.name,
                self._server_prefix + cmd,
                self.node_log(server.name),
                env=self._server_env(),
                cwd=self._server_cwd(),
            )
            try:
                wait_port(port, timeout_s, p, netns=self.netns)
            except RuntimeError:
                self.procs.stop(server.name)
                continue
            self.superlink_port = port
            return
        raise RuntimeError("could not start the SuperLink (see logs)")

    def _server_cwd(self) -> str | None:
        """The server node's working directory when it runs a user's app: its folder in
        the run (what the app's ServerApp writes to relative paths stays with the run,
        e.g. quickstart-numpy's ``final_model.npz``); None: this process's own."""
        fl = self.plan.experiment.workload.fl
        if fl is None or fl.app is None:
            return None
        return str((self.run_dir / "nodes" / self.plan.server.name).resolve())

    def node_log(self, name: str) -> Path:
        """Where node (or process key) ``name`` writes its output."""
        return self.run_dir / "logs" / f"{name}.log"

    def _require_superlink_db(self) -> None:
        """RuntimeError unless the SuperLink keeps its state on disk (a restart of a
        SuperLink whose state is in memory would lose the run)."""
        if self.superlink_db() is None:
            raise RuntimeError(
                "superlink-restart: this run's SuperLink keeps its state in memory (no "
                "superlink-restart planned in faults:), a restart would lose the run; "
                "plan one in the spec's faults to keep the state on disk"
            )

    def superlink_db(self) -> Path | None:
        """The SuperLink's state file, or None: its state in memory (Flower's default).

        On disk (SQLite, through SQLAlchemy) only when the spec plans a
        ``superlink-restart`` fault: the restarted SuperLink finds its runs, nodes and
        messages there. In memory otherwise: every request of the round's object
        transfers costs the SuperLink a few SQL statements on disk (about 60 % of its
        busy time, and the SuperLink is the busiest process of a fast round), and bare
        Flower (``bench/overhead.py``) runs in memory too. The docker backend follows
        the same rule: on disk, 48 node containers on 2 cores made the SuperLink's
        writes wait past SQLite's 5 s busy timeout (``database is locked``, HTTP 500s),
        and the run failed in round 1.
        """
        if not any(f.kind == "superlink-restart" for f in self.plan.experiment.faults):
            return None
        return (self.run_dir / "nodes" / self.plan.server.name / "superlink.db").resolve()

    def _server_env(self) -> dict[str, str]:
        """Environment of the server node: in ``fast`` protocol timing, Flower's SuperExec
        checks for a submitted run every 0.1 s (its own setting,
        ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``; Flower's default: 1 s)."""
        env = _env(self.run_dir / "nodes" / self.plan.server.name)
        fl = self.plan.experiment.workload.fl
        if fl is not None and fl.protocol_timing == "fast":
            env[SUPEREXEC_POLL_ENV] = str(FAST_SUPEREXEC_POLL_S)
            env[SUPERLINK_TIMING_ENV] = "fast"  # (nodes/fl/superlink_stack.py)
        return env

    def _wait_warm(self, timeout_s: float) -> None:
        """Wait until every client node's warm executor wrote its ready file."""
        deadline = time.monotonic() + timeout_s
        for node in self.plan.clients:
            while not self._ready_file(node.name).exists():
                if time.monotonic() > deadline or self.procs.procs[node.name].poll() is not None:
                    log = log_tail(self.node_log(node.name))
                    raise RuntimeError(f"node {node.name} did not warm up; {log}")
                time.sleep(START_POLL_S)

    def _limit_args(self, node: PlannedNode) -> list[str]:
        """Memory cap from the profile; CPUs pinned round-robin when the profile has
        fewer cores than this host (a node never gets more cores than its device); the
        lowest scheduling priority (:data:`nodes.agent.CLIENT_NICE`: the devices' work
        never starves the SuperLink, the ServerApp or the runner)."""
        nice = client_nice() if self.node_nice is None else self.node_nice
        args = ["--memory-mb", str(node.profile.memory_mb), "--nice", str(nice)]
        host = sorted(os.sched_getaffinity(0))
        k = node.profile.cpu_cores
        if k < len(host):
            i = self.plan.clients.index(node)
            args += ["--cpus", ",".join(str(host[(i * k + j) % len(host)]) for j in range(k))]
        return args

    def node_limits(self) -> dict[str, dict[str, Any]]:
        """What each node's agent applied (from its ready file)."""
        out: dict[str, dict[str, Any]] = {}
        for node in self.plan.clients:
            f = self._ready_file(node.name)
            if f.exists():
                out[node.name] = json.loads(f.read_text()).get("limits", {})
        return out

    def _ready_file(self, name: str) -> Path:
        return self.run_dir / "nodes" / name / "ready"

    def _start_links(self, mode: str) -> None:
        """One link of kind ``mode`` (:data:`~testbed.emulation.kinds.LINK_KINDS`), or of
        the link's own ``kind``, per client node, between it and the SuperLink; a kind
        whose client side lives in a network namespace also tells how to start the node
        there."""
        for i, node in enumerate(self.plan.clients):
            ends = LinkEnds(
                index=i,
                seed=self.plan.seed * 1000 + i,
                server_port=int(self.superlink_port or 0),
                server_netns=self.netns,
                run_tag=self._run_tag,
                listen_host=self.listen_host,
            )
            kind = link_kind(node.uplink.kind_in(mode))
            link = kind.build(node.name, node.uplink.params(), ends, **node.uplink.link_options())
            link.start()
            self._links[node.name] = link
            if isinstance(link, _Namespaced):
                self._client_prefix[node.name] = link.exec_prefix("client")

    def space_model(self) -> SpaceModel | None:
        """The orbital model of the run's space tier (None without ``space:``)."""
        exp = self.plan.experiment
        if exp.space is None:
            return None
        if self._space is None:
            from testbed.space.schedule import SpaceModel

            fl = exp.workload.fl
            horizon = fl.round_timeout_s * (fl.rounds + 2) + 120 if fl else None
            if exp.space.horizon_s is not None and horizon is not None:
                horizon = max(horizon, exp.space.horizon_s)
            space_nodes = [n.name for n in self.plan.clients if n.tier == "space"]
            self._space = SpaceModel(exp.space, space_nodes, horizon_s=horizon)
        return self._space

    def _make_netns(self) -> str:
        """Create this run's server namespace (root / CAP_NET_ADMIN needed)."""
        if os.geteuid() != 0:
            raise ValueError("links.mode: netem needs root (CAP_NET_ADMIN); use proxy")
        ns = f"ct-{self._run_tag}-srv"
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, capture_output=True)
        return ns

    def start_schedules(self, only: Collection[str] | None = None, t0: float | None = None) -> None:
        """Play time-varying links from now (called when the fleet is ready): a node's
        own ``schedule``, or its passes over the ground stations (space tier). ``only``
        and ``t0`` (a ``time.monotonic()`` origin): the links of nodes ``only``, on the
        clock started at ``t0`` (a workload's links made after the others' started)."""
        t0 = time.monotonic() if t0 is None else t0
        space = self.space_model()
        for node in self.plan.nodes:  # (the nodes of start_services may include a server)
            link = self._links.get(node.name)
            if link is None or (only is not None and node.name not in only):
                continue
            if isinstance(link, _RadioClocked):  # its radio schedule starts now too
                link.restart_radio_clock(t0)
            if space is not None and node.name in space.nodes:  # orbital passes
                link.run_schedule(space.link_schedule(node.name), t0)
            elif node.uplink.schedule:
                link.run_schedule(node.uplink.link_schedule(), t0)

    def link_counters(self) -> dict[str, dict[str, Any]]:
        """Per-node link counters (bytes up/down on the wire, partitioned time...)."""
        return {name: link.counters() for name, link in self._links.items()}

    def _superlink_address(self, name: str) -> str:
        """``host:port`` node ``name`` dials: through its link when it has one."""
        port = int(self.superlink_port or 0)
        link = self._links.get(name)
        return link.connect_address(port) if link is not None else f"{self.listen_host}:{port}"

    def control_path(self, name: str) -> Path:
        return (self.run_dir / "nodes" / name / "control.json").resolve()

    def start_node(self, name: str) -> tuple[int, Popen]:
        if name not in self._cmds:
            node = next(n for n in self.plan.clients if n.name == name)
            port = free_port()
            config = node.node_config(len(self.plan.clients))
            config["control-path"] = str(self.control_path(name))
            self._cmds[name] = self._node_cmd(
                "supernode",
                "--superlink",
                self._superlink_address(name),
                "--port",
                str(port),
                "--node-config",
                json.dumps(config),
            ) + (["--ready-file", str(self._ready_file(name))] if self.warm else ["--cold"])
            self._cmds[name] += self._limit_args(node)
            self.node_ports[name] = port
        cmd = self._client_prefix.get(name, []) + self._cmds[name]
        log, env = self.node_log(name), _env(self.run_dir / "nodes" / name)
        p = self._fork(name, cmd, log, env) or self.procs.start(name, cmd, log, env=env)
        return self.node_ports[name], p

    def _fork(self, name: str, cmd: list[str], log: Path, env: dict[str, str]) -> Popen | None:
        """Node ``name`` forked by the zygote (a SuperNode command only); None: start it
        plainly (no zygote, or it did not come up)."""
        supernode = self._node_cmd("supernode")
        if self._zygote is None or cmd[: len(supernode)] != supernode:
            return None
        p = self._zygote.spawn(cmd, log, env)
        if p is None:  # it did not come up: every later node starts plainly, at once
            self._zygote.stop()
            self._zygote = None
            return None
        return self.procs.adopt(name, p)

    def start_services(
        self, commands: Mapping[str, list[str]], ports: Mapping[str, int], timeout_s: float = 60.0
    ) -> dict[str, int]:
        """:meth:`Backend.start_services` as local processes: each server is restarted
        as is by ``node().start``; without links (``links.mode: none``) the port
        returned is the server's own."""
        keys = {}
        for name, cmd in commands.items():
            keys[name] = key = self._service_key(name)
            self._cmds[key], self.node_ports[key] = list(cmd), ports[name]
            self.start_node(key)
        hosts = {name: self.service_host(key) for name, key in keys.items()}
        for name in commands:
            wait_port(ports[name], timeout_s, self.procs.procs[keys[name]], host=hosts[name])
        return self._service_links(list(commands), ports, hosts)

    def service_host(self, key: str) -> str:
        """The address a workload's process ``key`` serves on, as the runner reaches it
        (this host's loopback; swarm: the address of the engine that runs it)."""
        del key
        return "127.0.0.1"

    def _service_key(self, name: str) -> str:
        """The process key of a service on node ``name``: the name itself, or
        ``<name>.svc`` beside the node's SuperNode (another workload of the run)."""
        if not self._taken(name):
            return name
        beside = self._beside.setdefault(name, [])  # a third workload's: <name>.svc2 ...
        key = f"{name}.svc{len(beside) + 1 if beside else ''}"
        beside.append(key)
        return key

    def _taken(self, name: str) -> bool:
        """Whether node ``name`` already runs a process of the run (the SuperLink's)."""
        return name in self._cmds or name in self.procs.procs

    def process(self, key: str) -> Popen:
        """The process of key ``key`` (a node, or ``<name>.svc`` from
        :meth:`start_processes`)."""
        return self.procs.procs[key]

    def processes_of(self, name: str) -> list[str]:
        """Process keys of node ``name``: its own and those of other workloads beside it."""
        keys = [name, *self._beside.get(name, [])]
        return [k for k in keys if k in self._cmds or k in self.procs.procs]

    def start_processes(self, commands: Mapping[str, list[str]]) -> dict[str, str]:
        """Start nodes that run a workload's own program (no SuperNode, no port waited
        for: e.g. semantic offload's devices and fog); their node handles (faults)
        restart them with the same command. Returns node name -> its process key (the
        name, or ``<name>.svc`` beside another workload's process on the node)."""
        keys = {}
        for name, cmd in commands.items():
            keys[name] = key = self._service_key(name)
            self._cmds[key], self.node_ports[key] = list(cmd), 0
            self.start_node(key)
        return keys

    def open_links(
        self, specs: Mapping[str, LinkSpec], server_port: int, server_host: str = "127.0.0.1"
    ) -> dict[str, str]:
        """A link per named node to one server at ``server_host:server_port`` (e.g. edge
        devices to their fog node: :meth:`service_host` of its process), each of its own
        kind (``links.mode`` or the link's ``kind``), listening where the nodes reach it
        (:attr:`listen_host`).

        Returns
        -------
        dict[str, str]
            Node name -> the ``host:port`` it dials (the server itself with
            ``links.mode: none``).
        """
        mode = self.plan.experiment.links.mode
        reach: dict[str, str] = {}
        for name, spec in specs.items():
            if mode == "none":
                reach[name] = f"{server_host}:{server_port}"
                continue
            i = len(self._links)
            ends = LinkEnds(i, self.plan.seed * 1000 + i, server_host=server_host,
                            server_port=server_port, run_tag=self._run_tag,
                            listen_host=self.listen_host)  # fmt: skip
            link = link_kind(spec.kind_in(mode)).build(name, spec.params(), ends,
                                                       **spec.link_options())  # fmt: skip
            if isinstance(link, _Namespaced):
                raise ValueError(
                    f"links.mode: {mode} links to a workload's own server need "
                    "a host-side kind (proxy, mmwave)"
                )
            link.start()
            self._links[name] = link
            reach[name] = link.connect_address(server_port)
        return reach

    def _service_links(
        self, names: list[str], ports: Mapping[str, int], hosts: Mapping[str, str]
    ) -> dict[str, int]:
        """A shaping proxy in front of each service node's server (at ``hosts[name]``),
        listening on this host's loopback for the runner (none with ``links.mode:
        none``: the server itself, at 127.0.0.1 only); node name -> the 127.0.0.1 port
        that reaches it."""
        planned = {n.name: n for n in self.plan.nodes}
        reach = {name: ports[name] for name in names}
        if self.plan.experiment.links.mode == "none":
            if off := {n: h for n, h in hosts.items() if h != "127.0.0.1"}:
                raise ValueError(
                    f"links.mode: none: the runner reaches services on this host only, "
                    f"not {off} (use links.mode: proxy)"
                )
            return reach
        for i, name in enumerate(names):
            shared = self._links.get(name)
            if shared is not None and hasattr(shared, "add_route"):  # the node's own link
                reach[name] = int(shared.add_route(ports[name]))
                continue
            ends = LinkEnds(index=i, seed=self.plan.seed * 1000 + i, server_port=ports[name],
                            server_host=hosts[name])  # fmt: skip
            link = link_kind("proxy").build(name, planned[name].uplink.params(), ends)
            link.start()
            self._links[name] = link
            reach[name] = int(link.connect_address(ports[name]).rsplit(":", 1)[1])
        return reach

    # -- nodes and links as the fault kinds see them (testbed.backends.base) ------------
    def node(self, name: str) -> LocalNode:
        """The handle of client node ``name`` (KeyError naming the nodes otherwise)."""
        if name not in self._cmds:
            raise NotStarted(name, sorted(self._cmds))
        return LocalNode(self, name)

    @property
    def links(self) -> Mapping[str, Link]:
        """The emulated link of each client node (empty with ``links.mode: none``)."""
        return self._links

    def set_control(self, name: str, control: NodeControl) -> None:
        """Write node ``name``'s live fault controls (see :meth:`LocalNode.set_control`)."""
        self.node(name).set_control(control)

    def resources(self) -> dict[str, NodeResources]:
        """Resident memory (process tree, MB) and CPU use (percent of one core since the
        previous call; None on the first) of every running node."""
        now = time.monotonic()
        out: dict[str, NodeResources] = {}
        beside = {k for keys in self._beside.values() for k in keys}
        kids = children_map()
        for name in list(self.procs.procs):
            if name == "flwr-run" or name in beside:
                continue
            keys = [k for k in self.processes_of(name) if k in self.procs.procs] or [name]
            secs = cpu_seconds([p for k in keys for p in self.procs.tree(k, kids)])
            prev = self._cpu.get(name)
            pct = None
            if prev is not None and now > prev[0]:
                used = sum(t - prev[1].get(pid, 0.0) for pid, t in secs.items())
                pct = max(0.0, 100.0 * used / (now - prev[0]))
            self._cpu[name] = (now, secs)
            rss = sum(self.procs.rss_mb(k, kids) for k in keys)
            out[name] = NodeResources(rss_mb=rss, cpu_pct=pct)
        return out

    def restart_superlink(self) -> None:
        """SIGKILL the SuperLink and start it again (same port, same state database);
        return once the new SuperLink listens.

        The node agent does it on SIGUSR1; its SuperExec and the ServerApp survive.
        RuntimeError (a live injection is then rejected) when the SuperLink keeps its
        state in memory (:meth:`superlink_db`): the restart would lose the run.
        """
        self._require_superlink_db()
        server = self.plan.server.name
        before = self._log_text(server).count(RESTARTED)
        os.kill(self.procs.procs[server].pid, signal.SIGUSR1)
        self.superlink_restarts += 1
        # back before returning: a `flwr run` submitted in between (a restart "before
        # round 1" fires as the fleet is ready) found no SuperLink and the run failed
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while self._log_text(server).count(RESTARTED) <= before:
            if time.monotonic() > deadline or self.procs.procs[server].poll() is not None:
                raise RuntimeError(
                    f"superlink-restart: the SuperLink did not restart (see logs/{server}.log)"
                )
            time.sleep(START_POLL_S)
        wait_port(int(self.superlink_port or 0), RESTART_TIMEOUT_S, netns=self.netns)

    def attach(self, flwr_run_id: int) -> Popen:
        """Stream a submitted run's logs again (after the SuperLink came back)."""
        wait_port(int(self.superlink_port or 0), 60, netns=self.netns)
        cmd = [flower_bin("flwr"), "log", str(flwr_run_id), "fleet", "--stream"]
        return self.procs.start(
            "flwr-run",
            self._server_prefix + cmd,
            self.run_dir / "logs" / "flwr-run.log",
            env=_env(self.run_dir / "flwr_home"),
        )

    def flwr_run_id(self) -> int | None:
        """The Flower run id printed by ``flwr run``."""
        import re

        log = (self.run_dir / "logs" / "flwr-run.log").read_text(errors="replace")
        m = re.search(r"Successfully started run (\d+)", log)
        return int(m.group(1)) if m else None

    def submit(self, run_config: dict[str, object], app_dir: Path | None = None) -> Popen:
        """Submit the Flower app (``app_dir``, default the testbed's) with ``flwr run
        --stream``; the process ends with the run."""
        home = self.run_dir / "flwr_home"
        home.mkdir(parents=True, exist_ok=True)
        conf = {
            "superlink": {
                "default": "fleet",
                "fleet": {"address": f"127.0.0.1:{self.superlink_port}", "insecure": True},
            }
        }
        (home / "config.toml").write_text(tomli_w.dumps(conf))
        rc = self.run_dir / "run_config.toml"
        rc.write_text(tomli_w.dumps(run_config))
        cmd = [
            flower_bin("flwr"),
            "run",
            str(app_dir or APP_DIR),
            "fleet",
            "--run-config",
            str(rc),
            "--stream",
        ]
        return self.procs.start(
            "flwr-run",
            self._server_prefix + cmd,
            self.run_dir / "logs" / "flwr-run.log",
            env=_env(home),
        )

    def _log_text(self, name: str) -> str:
        log = self.node_log(name)
        return log.read_text(errors="replace") if log.exists() else ""

    def node_ids(self) -> dict[str, str]:
        """Flower node id -> node name, from each SuperNode's registration in its log
        (a restarted node registers again under a new id: all map to its name)."""
        out: dict[str, str] = {}
        for node in self.plan.clients:
            for nid in SUPERNODE_ID.findall(self._log_text(node.name)):
                out[nid] = node.name
        return out

    def registered(self, among: Collection[str] | None = None) -> set[str]:
        """Client nodes (of ``among``; default: all) whose SuperNode has logged its
        registration (``SuperNode ID``, printed once the SuperLink activated it: the
        node is online there)."""
        names = [n.name for n in self.plan.clients] if among is None else among
        return {name for name in names if SUPERNODE_ID.search(self._log_text(name))}

    def alive(self) -> dict[str, bool]:
        return {name: p.poll() is None for name, p in self.procs.procs.items()}

    def rss_mb(self) -> dict[str, float]:
        """Resident memory per node (whole process tree), MB."""
        kids = children_map()  # one look at the process table for every node's tree
        return {
            n.name: sum(
                self.procs.rss_mb(k, kids)
                for k in self.processes_of(n.name)
                if k in self.procs.procs
            )
            for n in self.plan.nodes
            if n.name in self.procs.procs
        }

    def stop(self) -> None:
        """Stop every process (frozen nodes thawed first), link and node cgroup."""
        for name in list(self.paused):
            self.node(name).resume()
        pids = [p.pid for p in self.procs.procs.values()]
        self.procs.stop_all()
        for link in self._links.values():
            link.stop()
        for pid in pids:  # memory (and cpu) cgroups of the nodes
            remove_node_cgroups(pid)
        if self._zygote is not None:
            self._zygote.stop()
        if self.netns:
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
