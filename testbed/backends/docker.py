"""Docker backend: every node a container of the project's image, driven through the
Docker SDK (the ``docker`` package).

The same Plan as the local backend, realised as one container per node (and one for
the SuperLink), each running the same ``testbed node ...`` entrypoint. Containers use
the host network (``network_mode: host``); links are the host's userspace shaping
proxies (``links.mode: proxy``), so bandwidth, latency, loss, schedules and partitions
act exactly as locally. The run's folder is bind-mounted at the same path in every
container: logs, ready files, live fault controls and telemetry are shared files.

Device profiles become container limits: a CPU quota (CFS, the profile's cores capped at
this host's), a cpuset (round-robin, when the profile has fewer cores than the host)
and a memory limit (``memory_mb``). Faults act through the engine: crash = kill,
outage = kill then start of the same container, pause = ``docker pause``, a live
``update_limits`` = ``docker update`` of the CPU quota / memory, SuperLink restart =
SIGUSR1 to the server container's agent (as locally: its SuperExec and ServerApp
survive). Every container is labelled ``testbed.run=<run id>`` and
``testbed.node=<name>`` and removed on stop, whatever ended the run.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, ClassVar

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from requests import RequestException

from kernel import dilation
from nodes.agent import FLOWER_ENV
from testbed.backends import register_backend
from testbed.backends.base import NodeResources, NotStarted, links_in_force
from testbed.backends.docker_net import (
    choose_link_mode,
    container_links,
    net_gate,
    start_timeout_s,
)
from testbed.backends.docker_node import (
    PERIOD_US,
    ContainerProcess,
    DockerNode,
    container_limits,
    in_image,
    input_dirs,
    memory_mb_of,
)
from testbed.backends.gpu import gpu_nodes, gpu_note, gpu_request, gpu_unavailable
from testbed.backends.host_limits import Host, capped, check_limits, grouped
from testbed.backends.image_source import checkout_hash, image_hash
from testbed.backends.local import REGISTER_TIMEOUT_S, LocalBackend
from testbed.emulation.container_net import InContainer, attach_netns
from testbed.hostfs import host_path
from testbed.planner import Plan, PlannedNode, make_plan
from testbed.procs import free_port, log_tail, wait_port
from testbed.reaper import write_fleet_file
from testbed.spec.models import Experiment

if TYPE_CHECKING:
    from docker.models.containers import Container

    from testbed.backends.app_image import AppImage

IMAGE_ENV = "TESTBED_IMAGE"
DEFAULT_IMAGE = "continuum-testbed:latest"
RUN_LABEL = "testbed.run"
NODE_LABEL = "testbed.node"
STATS_EVERY_S = 2.0  # engine stats are sampled at most this often (s)
PING_TIMEOUT_S = 5  # `unavailable`: how long the engine may take to answer (s)


class EngineUnavailable(ValueError):
    """No Docker engine answers where the SDK looks (``DOCKER_HOST``)."""


def docker_host() -> str:
    """Where the SDK looks for the engine (``DOCKER_HOST``)."""
    return os.environ.get("DOCKER_HOST") or "unset (default unix:///var/run/docker.sock)"


def engine_hint() -> str:
    """Where the SDK looks for the engine, and how to start one."""
    return (
        f"DOCKER_HOST={docker_host()}. Start an engine (`sudo systemctl start docker`, or a "
        "private one as docker/e2e.sh does: `dockerd --bridge=none --iptables=false "
        "-H unix:///tmp/d.sock &` then `export DOCKER_HOST=unix:///tmp/d.sock`)"
    )


def connect(timeout_s: int = 60) -> docker.DockerClient:
    """A client of the engine at ``DOCKER_HOST`` (EngineUnavailable when none answers
    within ``timeout_s`` s, per request)."""
    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
    except DockerException as e:
        raise EngineUnavailable(
            f"--backend docker: no Docker engine reachable ({e}); {engine_hint()}"
        ) from None
    return client


def image_name() -> str:
    """The image every node container runs (``TESTBED_IMAGE`` or the default)."""
    return os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE


def check_image(client: docker.DockerClient, image: str) -> None:
    """ValueError with the build command when ``image`` is not on the engine, or was
    built from other sources than this checkout's (:mod:`image_source`: its node
    containers would run other code than the runner)."""
    build = (
        f"Build it: `DOCKER_BUILDKIT=0 docker build --network host -t {image} .` in "
        "the project's root (`make test-docker` builds it offline from a wheelhouse), "
        f"or name another image with {IMAGE_ENV}"
    )
    try:
        client.images.get(image)
    except ImageNotFound:
        raise ValueError(
            f"--backend docker: image {image!r} is not on the engine at "
            f"DOCKER_HOST={docker_host()}. {build}"
        ) from None
    built_from, here = image_hash(client, image), checkout_hash()
    if built_from != here:
        what = "records no sources" if built_from is None else f"sources {built_from[:12]}"
        raise ValueError(
            f"--backend docker: image {image!r} is stale: it was built from other sources "
            f"than this checkout ({what}; here {here[:12]}), so its node containers "
            f"would run other code than the runner. {build.replace('Build', 'Rebuild')}"
        )


def _ended(state: dict[str, Any]) -> str | None:
    """``oom`` / ``exited <code>`` for a container state that has ended, else None."""
    if state.get("Status") != "exited":
        return None
    return "oom" if state.get("OOMKilled") else f"exited {state.get('ExitCode')}"


def remove_containers(client: docker.DockerClient, run: str | None = None) -> list[str]:
    """Remove (force) every container labelled with run ``run`` (every testbed
    container when None); return their names."""
    label = RUN_LABEL if run is None else f"{RUN_LABEL}={run}"
    gone = []
    for c in client.containers.list(all=True, filters={"label": label}):
        try:
            c.remove(force=True)
            gone.append(c.name or c.id or "?")
        except NotFound:
            pass
    return gone


@register_backend("docker")
class DockerBackend(LocalBackend):
    """One container per node of the plan, through the Docker SDK.

    Parameters
    ----------
    plan : Plan
        The resolved run.
    run_dir : pathlib.Path
        Artifact folder of the run (mounted at the same path in every container).
    warm : bool
        Use the warm executor (default) or Flower's cold per-message subprocesses.
    image : str, optional
        The image (default: ``TESTBED_IMAGE`` or ``continuum-testbed:latest``).
    """

    name = "docker"
    user_apps = True  # (Flower ships the app to the containers)
    #: The app's declared dependencies the image lacks: a derived image (app_image.py).
    app_runs_on_host = False
    #: netem links fall back to proxy (saying why) where they cannot be made.
    netem_needs_root = False
    options: ClassVar[frozenset[str]] = frozenset({"warm", "image", "oversubscribe"})

    def __init__(
        self,
        plan: Plan,
        run_dir: Path,
        warm: bool = True,
        image: str | None = None,
        oversubscribe: bool = False,
    ) -> None:
        super().__init__(plan, run_dir, warm)
        self.host = Host.measure()
        self.oversubscribe = oversubscribe  # profiles above the host: refused unless set
        self.run_dir = run_dir.resolve()
        self.image = image or image_name()
        self.app_image: AppImage | None = None  # a user's app: the image it runs in
        self.run_label = self.run_dir.name
        self.client = connect()
        self.containers: dict[str, Container] = {}
        self._stats: dict[str, tuple[float, int]] = {}  # name -> (t, cpu ns)
        self._sampled: dict[str, NodeResources] = {}  # by the watcher thread
        self._exits: dict[str, str] = {}  # by the watcher thread
        self._stop_watch = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="docker-watch", daemon=True)
        self._cpu_pcts: dict[str, list[float]] = {}  # every CPU sample of each container
        self._sigterm: Any = None  # the SIGTERM handler before start (restored by stop)
        self.downed: set[str] = set()  # nodes a fault killed or stopped (not dead by itself)
        self.link_mode: str = plan.experiment.links.mode  # in force (netem may fall back)
        self.link_note: str | None = None  # why netem fell back to proxy
        self.base_cpus: dict[str, float] = {}  # the profile's CPU quota of each container
        self.throttled: dict[str, dict[str, int]] = {}  # straggler: CFS counters at start
        self._service_of: dict[str, str] = {}  # a workload's process key -> its node

    @classmethod
    def unavailable(cls) -> str | None:
        """Why not here now: no engine answers at ``DOCKER_HOST`` within
        :data:`PING_TIMEOUT_S`, or it lacks the image (:func:`check_image`)."""
        try:
            check_image(connect(PING_TIMEOUT_S), image_name())
        except (ValueError, DockerException, RequestException) as e:
            return str(e)
        return None

    @classmethod
    def preflight(
        cls, experiments: Sequence[Experiment], options: Mapping[str, Any] | None = None
    ) -> None:
        """The declarations (every workload, link kind and fault kind: netem falls back
        to proxy, saying why), then: no spec-defined profile above this host unless
        ``oversubscribe`` (:func:`~testbed.backends.host_limits.check_limits`)."""
        super().preflight(experiments, options)
        host, over = Host.measure(), bool((options or {}).get("oversubscribe"))
        for exp in experiments:
            check_limits(exp, host, over)

    @classmethod
    def notes(
        cls, experiments: Sequence[Experiment], options: Mapping[str, Any] | None = None
    ) -> list[str]:
        """Per node above this host, what its container gets (``limits_capped``), and
        the workloads that run in the runner's process, not in a container."""
        from testbed.workloads import workload
        from testbed.workloads.base import LibraryWorkload

        host, over = Host.measure(), bool((options or {}).get("oversubscribe"))
        plans = [make_plan(e) for e in experiments[:1]]  # (a sweep's fleets are alike)
        out = super().notes(experiments, options)
        out += [f"limits: {line}" for p in plans for line in grouped(capped(p, host, over))]
        for section in experiments[0].workload.sections if experiments else ():
            wl = workload(section)
            if isinstance(wl, LibraryWorkload):
                out.append(f"workload.{section} runs in {wl.runs_in}")
        return out

    # -- containers ---------------------------------------------------------------------
    def _env(self, name: str) -> dict[str, str]:
        home = self.run_dir / "nodes" / name
        home.mkdir(parents=True, exist_ok=True)
        env = dict(FLOWER_ENV)
        env.update(FLWR_HOME=str(home), HOME=str(home), PYTHONUNBUFFERED="1")
        if tdf_env := os.environ.get(dilation.ENV):  # the run's clock, as on the host
            env[dilation.ENV] = tdf_env
        return env

    def _run(
        self,
        name: str,
        cmd: list[str],
        limits: dict[str, Any],
        ro: tuple[str, ...] = (),
        network: str = "host",
        gated: bool = False,
    ) -> Container:
        """Start a container for node ``name`` running ``cmd`` (output to its log), the
        run folder mounted and the folders ``ro`` too (read-only), each at its own path.
        ``network="none"`` gives it a namespace of its own (netem links); ``gated``:
        ``cmd`` waits for the node's gate file, written once its link is plumbed in."""
        log = self.node_log(name)
        log.parent.mkdir(parents=True, exist_ok=True)
        shell = f"exec {shlex.join(cmd)} >> {shlex.quote(str(log))} 2>&1"
        if gated:
            gate = shlex.quote(str(net_gate(self.run_dir, name)))
            shell = f"while [ ! -e {gate} ]; do sleep 0.05; done; {shell}"
        mount = str(self.run_dir)  # (host paths as the engine knows them: hostfs)
        volumes = {host_path(d): {"bind": d, "mode": "ro"} for d in ro}
        volumes[host_path(mount)] = {"bind": mount, "mode": "rw"}
        if "cpu_quota" in limits:
            self.base_cpus[name] = limits["cpu_quota"] / limits["cpu_period"]
        container = self._create(name, ["sh", "-c", shell], volumes, limits, network)
        self.containers[name] = container
        return container

    def _create(
        self,
        name: str,
        command: list[str],
        volumes: dict[str, dict[str, str]],
        limits: dict[str, Any],
        network: str,
    ) -> Container:
        """Create and start node ``name``'s container (swarm: a service's task)."""
        container: Container = self.client.containers.run(
            self.image,
            command,
            name=self._container_name(name),
            detach=True,
            init=True,
            network_mode=network,
            labels=self._labels(name),
            volumes=volumes,
            environment=self._env(name),
            working_dir=str(self.run_dir / "nodes" / name),  # as locally: its home
            user=f"{os.getuid()}:{os.getgid()}",
            **limits,
        )
        return container

    def _container_name(self, name: str) -> str:
        return f"tb-{self.run_label}-{name}"[:120]

    def _labels(self, name: str) -> dict[str, str]:
        return {RUN_LABEL: self.run_label, NODE_LABEL: name}

    def proc(self, name: str) -> ContainerProcess:
        """The container of node ``name`` as a process (``poll``)."""
        return ContainerProcess(self.containers[name])

    def process(self, key: str) -> ContainerProcess:  # type: ignore[override]
        """The container of a workload's process ``key`` (:meth:`start_processes`)."""
        return self.proc(key)

    def _limits(self, node: PlannedNode, index: int | None = None) -> dict[str, Any]:
        """Engine limits of a container of ``node`` (``index``: its cpuset's position,
        default the node's among the clients)."""
        host = sorted(os.sched_getaffinity(0))
        index = self.plan.clients.index(node) if index is None else index
        limits = container_limits(node, index, host, self.host.memory_mb, self.oversubscribe)
        return {**limits, **gpu_request(node, self._no_gpu)}

    @functools.cached_property
    def _no_gpu(self) -> str | None:
        """Why GPU profiles stay emulated on this host (None: GPUs are passed through)."""
        return gpu_unavailable(self.client) if gpu_nodes(self.plan) else "no GPU profile"

    @functools.cached_property
    def _inputs(self) -> tuple[str, ...]:
        """Folders every container mounts read-only (:func:`input_dirs`), found once."""
        return input_dirs(self.plan.experiment, self.run_dir)

    # -- fleet lifecycle ----------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> None:
        """Start the SuperLink container, the links, then every SuperNode container;
        return when all listen (and, warm, have imported their stack) and have registered
        with the SuperLink (as on the local backend: schedules start on registered nodes).

        ``timeout_s`` grows with the fleet (:func:`start_timeout_s`): the containers
        start at once and import their stack on the host's CPUs together.
        """
        timeout_s = max(timeout_s, start_timeout_s(len(self.plan.clients)))
        check_image(self.client, self.image)
        fl = self.plan.experiment.workload.fl
        if fl is not None and fl.app is not None:  # its dependencies: a derived image
            from testbed.backends.app_image import app_image

            self.app_image = app_image(self.client, self.image, Path(fl.app))
            self.image = self.app_image.image
        self._catch_sigterm()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_fleet_file(self.run_dir, self._run_tag)  # (the reaper finds the namespaces)
        self.link_mode, self.link_note = choose_link_mode(self.plan.experiment.links.mode)
        netem = self.link_mode == "netem"
        server = self.plan.server
        port = free_port()
        (self.run_dir / "nodes" / server.name).mkdir(parents=True, exist_ok=True)
        db = self.superlink_db()  # (on disk only when a superlink-restart is planned)
        host = "0.0.0.0" if netem or self.listen_host != "127.0.0.1" else "127.0.0.1"
        cmd = ["testbed", "node", "superlink", "--port", str(port), "--host", host]
        net = "none" if netem else "host"
        cmd += ["--database", str(db)] if db is not None else []
        self._run(server.name, cmd, {}, self._inputs, network=net)
        if netem:  # the SuperLink container's namespace is the links' server side
            self.netns = f"ct-{self._run_tag}-srv"
            attach_netns(self.netns, self._pid(server.name))
            self._server_prefix = ["ip", "netns", "exec", self.netns]
        wait_port(port, timeout_s, self.proc(server.name), netns=self.netns)  # type: ignore[arg-type]
        self.superlink_port = port
        if netem:
            self._links.update(container_links(self.plan, self._run_tag, self.netns or ""))
        elif self.link_mode != "none":  # host-side kinds (proxy, a user's), per link too
            self._start_links(self.link_mode)
        for node in self.plan.clients:
            self.start_node(node.name)
        self._watcher.start()
        deadline = time.monotonic() + timeout_s
        for node in self.plan.clients:
            self._wait_node(node.name, deadline)
        self._wait_registered(min(timeout_s, REGISTER_TIMEOUT_S))

    def _exited(self, name: str) -> bool:
        return self.proc(name).poll() is not None

    def fleet_info(self) -> dict[str, Any]:
        """What the fleet chose at start, for the ``fleet_ready`` event and the summary:
        the links in force (``links_mode``, ``link_kinds``) and ``links_fallback`` (why
        netem fell back to proxy)."""
        out = {**super().fleet_info(), **links_in_force(self.plan, self.link_mode)}
        if self.link_note:
            out["links_fallback"] = self.link_note
        limits = capped(self.plan, self.host, self.oversubscribe)
        if limits:
            out["limits_capped"] = limits
        if self.app_image is not None:
            out["app_image"] = self.app_image.describe()
        gpu = gpu_note(self.plan, self._no_gpu)
        if gpu is not None:
            out["gpu"] = gpu
        return out

    def _pid(self, name: str) -> int:
        """The host PID of node ``name``'s container (RuntimeError if it is not running)."""
        c = self.containers[name]
        c.reload()
        pid = int(c.attrs["State"].get("Pid") or 0)
        if pid <= 0:
            raise RuntimeError(f"node {name}: container not running ({self.exit_reason(name)})")
        return pid

    def _plumb(self, name: str) -> None:
        """Move node ``name``'s netem link into its container's namespace, then open the
        gate its command waits on."""
        link = self._links.get(name)
        if isinstance(link, InContainer):
            link.attach(self._pid(name))
            net_gate(self.run_dir, name).touch()

    def _catch_sigterm(self) -> None:
        """SIGTERM (``docker stop`` of a runner in a container, ``compose down``) raises
        KeyboardInterrupt while the fleet runs, so the run's teardown removes the
        containers; the previous handler comes back in :meth:`stop`."""
        if threading.current_thread() is not threading.main_thread():
            return

        def interrupt(_signum: int, _frame: FrameType | None) -> None:
            raise KeyboardInterrupt("SIGTERM")

        self._sigterm = signal.signal(signal.SIGTERM, interrupt)

    def _wait_node(self, name: str, deadline: float) -> None:
        """Wait for node ``name``'s port (and ready file, warm) or fail naming its log."""
        remaining = max(1.0, deadline - time.monotonic())
        try:
            wait_port(self.node_ports[name], remaining, self.proc(name), netns=self._ns(name))  # type: ignore[arg-type]
        except RuntimeError as e:
            log = log_tail(self.node_log(name))
            raise RuntimeError(f"node {name}: {e} ({self.exit_reason(name)}); {log}") from None
        while self.warm and not self._ready_file(name).exists():
            if time.monotonic() > deadline or self.proc(name).poll() is not None:
                why = self.exit_reason(name) or "still starting"
                log = log_tail(self.node_log(name))
                raise RuntimeError(f"node {name} did not warm up ({why}); {log}")
            time.sleep(0.2)

    def start_node(self, name: str) -> tuple[int, Any]:
        """Create node ``name``'s container, or start it again (same command, port and
        name) after a crash or stop. ``name`` may be a workload's process key
        (:meth:`_service_key`: a function runtime, a semantic device): its own
        container, with its node's limits, beside the node's SuperNode."""
        known = self.containers.get(name)
        self.downed.discard(name)
        netem = isinstance(self._links.get(name), InContainer)
        if known is not None:
            net_gate(self.run_dir, name).unlink(missing_ok=True)
            known.start()  # (a new network namespace: the link is plumbed again)
            self._plumb(name)
            return self.node_ports[name], self.proc(name)
        if name in self._service_of:
            return self._start_service(name)
        node = next(n for n in self.plan.clients if n.name == name)
        port = free_port()
        config = node.node_config(len(self.plan.clients))
        config["control-path"] = str(self.control_path(name))
        cmd = ["testbed", "node", "supernode", "--superlink", self._superlink_address(name)]
        cmd += ["--port", str(port), "--node-config", json.dumps(config)]
        cmd += ["--ready-file", str(self._ready_file(name))] if self.warm else ["--cold"]
        self._cmds[name], self.node_ports[name] = cmd, port
        net = "none" if netem else "host"
        self._run(name, cmd, self._limits(node), self._inputs, network=net, gated=netem)
        self._plumb(name)
        return port, self.proc(name)

    def _ns(self, name: str) -> str | None:
        """The network namespace node ``name`` listens in (None: the host's)."""
        link = self._links.get(name)
        return link.client_netns if isinstance(link, InContainer) else None

    def _taken(self, name: str) -> bool:
        """Whether node ``name`` already has a container of the run (the SuperLink's)."""
        return name in self._cmds or name in self.containers

    def _service_key(self, name: str) -> str:
        """As locally (``<name>.svc`` beside the node's SuperNode), remembering the node
        of each key: its container gets that node's limits."""
        key = super()._service_key(name)
        self._service_of[key] = name
        return key

    def _start_service(self, key: str) -> tuple[int, Any]:
        """A workload's process ``key`` in a container of its own: its node's profile
        limits, host network, the function modules' folders mounted read-only; this
        interpreter's ``python -m ...`` becomes the image's."""
        check_image(self.client, self.image)
        self._catch_sigterm()
        names = [n.name for n in self.plan.nodes]
        i = names.index(self._service_of[key])
        limits = self._limits(self.plan.nodes[i], i)
        self._run(key, in_image(self._cmds[key]), limits, self._inputs)
        if not self._watcher.is_alive():
            self._watcher.start()
        return self.node_ports[key], self.proc(key)

    def start_services(
        self, commands: Mapping[str, list[str]], ports: Mapping[str, int], timeout_s: float = 60.0
    ) -> dict[str, int]:
        """:meth:`Backend.start_services` in containers: one per service with its
        node's profile limits (host network), each behind its node's link as locally
        (a service on a node that runs a SuperNode or the SuperLink is a container of
        its own beside it)."""
        keys = {}
        for name, cmd in commands.items():
            keys[name] = key = self._service_key(name)
            self._cmds[key], self.node_ports[key] = list(cmd), ports[name]
            self.start_node(key)
        deadline = time.monotonic() + timeout_s
        hosts = {name: self.service_host(key) for name, key in keys.items()}
        for name, key in keys.items():
            left = max(1.0, deadline - time.monotonic())
            try:
                wait_port(ports[name], left, self.proc(key), host=hosts[name])  # type: ignore[arg-type]
            except RuntimeError as e:
                raise RuntimeError(f"node {name}: {e} ({self.exit_reason(key)})") from None
        return self._service_links(list(commands), ports, hosts)

    def stop(self) -> None:
        """Stop the local parts (``flwr`` client, links), then remove every container of
        this run (those this process made, and any other carrying the run's label)."""
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None
        self._stop_watch.set()
        if self._watcher.is_alive():  # (not sampling containers while they go)
            self._watcher.join(timeout=10)
        try:
            super().stop()
        finally:
            for c in self.containers.values():
                try:
                    c.remove(force=True)
                except (NotFound, APIError):
                    pass
            remove_containers(self.client, self.run_label)

    # -- nodes and the server as the fault kinds see them --------------------------------
    def node(self, name: str) -> DockerNode:  # type: ignore[override]
        """The handle of client node ``name`` (KeyError naming the nodes otherwise)."""
        if name not in self._cmds:
            raise NotStarted(name, sorted(self._cmds))
        return DockerNode(self, name)

    def restart_superlink(self) -> None:
        """SIGUSR1 to the server container's agent: it restarts the SuperLink on the same
        port and database (its SuperExec and the ServerApp survive, as locally);
        RuntimeError, as locally, when its state is in memory."""
        self._require_superlink_db()
        self.containers[self.plan.server.name].kill(signal="SIGUSR1")
        self.superlink_restarts += 1

    # -- observations --------------------------------------------------------------------
    def node_limits(self) -> dict[str, dict[str, Any]]:
        """The limits the engine holds for each client container (docker inspect)."""
        out: dict[str, dict[str, Any]] = {}
        for node in self.plan.clients:
            c = self.containers.get(node.name)
            if c is None:
                continue
            c.reload()
            hc = c.attrs["HostConfig"]
            out[node.name] = {
                "cpus": f"docker cpu_quota={hc['CpuQuota']} per {hc['CpuPeriod'] or PERIOD_US}",
                "cpuset": hc.get("CpusetCpus") or "",
                "memory": f"docker memory={hc['Memory']}",
            }
        return out

    def alive(self) -> dict[str, bool]:
        """Whether each container runs (a paused one counts as alive, as locally)."""
        return {name: self.proc(name).poll() is None for name in self.containers}

    def exit_reason(self, name: str) -> str | None:
        """Why node ``name``'s container ended: ``oom`` (killed by the kernel under its
        memory limit: State.OOMKilled) or ``exited <code>``; None while it runs."""
        c = self.containers[name]
        try:
            c.reload()
        except NotFound:
            return "removed"
        return _ended(c.attrs["State"])

    def exit_reasons(self) -> dict[str, str]:
        """Client containers that ended on their own (not by a fault), with
        :meth:`exit_reason`, as the watcher thread last saw them."""
        return self._exits

    def resources(self) -> dict[str, NodeResources]:
        """Memory (usage less page cache, MB) and CPU (percent of one core since the
        previous sample) of every running container, from the engine's stats, as the
        watcher thread last sampled them (every :data:`STATS_EVERY_S` seconds)."""
        return self._sampled

    def _watch(self) -> None:
        """Sample every container's stats and state off the runner's loop (each engine
        call takes tens of ms; the runner reacts to telemetry every 0.25 s)."""
        apis: dict[str, docker.APIClient] = {}  # clients of its own (not shared across threads)
        try:
            while not self._stop_watch.wait(STATS_EVERY_S):
                now = time.monotonic()
                ids = {name: c.id for name, c in list(self.containers.items()) if c.id}
                out: dict[str, NodeResources] = {}
                exits: dict[str, str] = {}
                for name, cid in ids.items():
                    if self._stop_watch.is_set():
                        return
                    url = self._engine_url(name)
                    if url is None:
                        continue  # (swarm: an engine the runner cannot reach)
                    if url not in apis:
                        apis[url] = self._api_client(url)
                    api = apis[url]
                    try:
                        sample = self._sample(
                            name, api.stats(cid, stream=False, one_shot=True), now
                        )
                        why = _ended(api.inspect_container(cid)["State"])
                    except (NotFound, APIError, RequestException, ValueError):
                        continue  # gone meanwhile (a stop or removal: an empty reply)
                    if sample is not None:
                        out[name] = sample
                    if (
                        why is not None
                        and name != self.plan.server.name
                        and name not in self.downed
                    ):
                        exits[name] = why
                self._sampled, self._exits = out, exits
        finally:
            for api in apis.values():
                api.close()

    def _engine_url(self, name: str) -> str | None:
        """The engine that runs node ``name``'s container (``DOCKER_HOST``'s here)."""
        del name
        return docker_host()

    def _api_client(self, url: str) -> docker.APIClient:
        """A low-level client of engine ``url`` for the watcher thread."""
        del url
        api: docker.APIClient = docker.from_env(timeout=30).api
        return api

    def _sample(self, name: str, s: dict[str, Any], now: float) -> NodeResources | None:
        mem = s.get("memory_stats") or {}
        if "usage" not in mem:
            return None  # not running
        stats = mem.get("stats") or {}
        cache = stats.get("total_inactive_file", stats.get("inactive_file", 0))
        cpu_ns = int(((s.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage", 0))
        prev = self._stats.get(name)
        self._stats[name] = (now, cpu_ns)
        pct = None
        if prev is not None and now > prev[0] and cpu_ns >= prev[1]:
            pct = 100.0 * (cpu_ns - prev[1]) / 1e9 / (now - prev[0])
            self._cpu_pcts.setdefault(name, []).append(pct)
        rss = memory_mb_of(mem["usage"], cache)
        return NodeResources(rss_mb=rss, cpu_pct=pct, source="docker-stats")

    def mean_cpu_pct(self) -> dict[str, float]:
        """Mean CPU use of each container over the samples taken, percent of one core."""
        return {name: sum(v) / len(v) for name, v in self._cpu_pcts.items() if v}

    def rss_mb(self) -> dict[str, float]:
        """Memory per node container (engine stats), MB."""
        return {name: r.rss_mb for name, r in self.resources().items()}
