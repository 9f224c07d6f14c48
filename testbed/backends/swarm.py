"""Swarm backend: one experiment across several Docker engines in Swarm mode.

The docker backend's fleet (:mod:`testbed.backends.docker`), with every node's
container the task of a one-replica **service** created through the SDK's Swarm API on
the swarm manager at ``DOCKER_HOST``, so the swarm places it on one of its engines:

- **where**: ``fleet.nodes[i].placement`` (every key must match: ``hostname``, ``node``
  a swarm node id, ``role`` manager|worker, or an engine label such as ``tier: edge``)
  becomes the service's constraints. Without one, a node goes to the engines labelled
  with its tier (``tier=<tier>``) when some engine carries that label, else anywhere the
  swarm chooses. The SuperLink runs on the manager (the runner's engine: its links end
  there).
- **reach**: the SuperLink and the shaping proxies listen on the manager's swarm
  address (``TESTBED_SWARM_ADVERTISE`` overrides it), which the nodes dial; node
  containers use the host network of the engine that runs them. ``links.mode: netem``
  as on one engine (:mod:`testbed.emulation.container_net`: each container in a
  namespace of its own, a veth pair to a router namespace shaped with tbf/netem) for
  nodes on engines on the runner's host (a unix socket); validate refuses netem for a
  node that may land elsewhere, naming it.
- **faults through the swarm**: crash = SIGKILL to the container where its engine is
  reachable, and the task removed (service scaled to 0); outage = scale to 0 and back
  to 1 (a new task, placed by the same constraints); SuperLink restart = SIGUSR1 to the
  server's container. Pause, a live CPU/memory update and the straggler act through the
  engine that runs the node: the runner reaches the engines listed in
  ``TESTBED_SWARM_ENGINES`` (comma-separated engine URLs, the user's configuration, not
  the spec's) besides the manager; such a fault on a node that may land on an engine
  the runner cannot reach is refused at validate, naming it.
- **images**: an engine the runner reaches that lacks the image gets it from the
  manager (``docker save | docker load``, recorded with its time); others must have it
  (a registry).
- **observations**: every container's CPU and memory from the engine that runs it;
  each node's engine (``placed``: swarm node id and hostname) in the summary.

Every service and container carries ``testbed.run`` and ``testbed.node`` labels; the
services are removed on success, error and Ctrl-C, then any container of the run left on
any reachable engine. The run folder must be at the same path on every engine's host
(a shared filesystem): logs, ready files and live fault controls are files in it.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import docker
from docker.errors import APIError, DockerException, NotFound
from docker.types import Mount, Resources, RestartPolicy, ServiceMode
from requests import RequestException

from nodes.agent import BIND_ENV
from testbed.backends import register_backend
from testbed.backends.base import NotStarted, NotSupported
from testbed.backends.docker import (
    PING_TIMEOUT_S,
    RUN_LABEL,
    DockerBackend,
    check_image,
    image_name,
    remove_containers,
)
from testbed.backends.docker_net import net_gate
from testbed.backends.docker_node import PERIOD_US, DockerNode, container_limits
from testbed.backends.host_limits import check_limits
from testbed.backends.swarm_engines import (
    ENGINES_ENV,
    Engines,
    check_netem,
    check_placements,
    constraints,
    engine_urls,
    placements,
    refuse_server_placement,
)
from testbed.planner import PlannedNode
from testbed.procs import log_tail
from testbed.spec.models import Experiment

if TYPE_CHECKING:
    from docker.models.containers import Container
    from docker.models.services import Service

TASK_TIMEOUT_S = 120.0  # a service's task must run within this (s)


class TaskContainer:
    """A task's container on an engine the runner cannot reach, as far as the swarm tells
    (its state): enough for ``poll`` and teardown; engine actions are refused."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.id: str | None = None  # (no engine to sample)
        self.attrs: dict[str, Any] = {"State": {"Status": "running"}}

    def reload(self) -> None:
        try:
            tasks = self.service.tasks(filters={"desired-state": "running"})  # type: ignore[no-untyped-call]
        except NotFound:
            tasks = []
        state = tasks[0]["Status"]["State"] if tasks else "shutdown"
        code = (
            (tasks[0]["Status"].get("ContainerStatus") or {}).get("ExitCode", -1) if tasks else -9
        )
        running = state in ("running", "starting", "preparing", "assigned", "pending")
        self.attrs = {"State": {"Status": "running" if running else "exited", "ExitCode": code}}

    def remove(self, force: bool = False) -> None:
        del force  # (the service's removal removes it)

    def __getattr__(self, name: str) -> Any:
        raise NotSupported(
            f"{name}: the node's engine is not reachable from the runner (add it to {ENGINES_ENV})"
        )


class SwarmNode(DockerNode):
    """A client node of a swarm fleet: crash and outage through the swarm (the task
    removed, a new one placed), pause and limits through its engine (:class:`DockerNode`)."""

    backend: SwarmBackend

    def kill(self) -> None:
        """Crash: SIGKILL to the container (where its engine is reachable), then remove
        the task (the service scaled to 0)."""
        if self.name in self.backend.paused:
            self.resume()
        self.backend.downed.add(self.name)
        if not isinstance(self.container, TaskContainer):
            self._ignore_gone(self.container.kill)
        self.backend.scale(self.name, 0)

    def update_limits(
        self, *, cpus: float | None = None, memory_mb: int | None = None
    ) -> dict[str, Any]:
        """:meth:`DockerNode.update_limits` through the node's engine, the CPUs as the
        swarm set them (``NanoCpus``: the engine refuses a CFS period beside it)."""
        applied = super().update_limits(memory_mb=memory_mb) if memory_mb is not None else {}
        if cpus is not None:
            if cpus <= 0:
                raise ValueError(f"cpus must be > 0, got {cpus}")
            nano = max(10**7, int(cpus * 1e9))
            api: Any = self.container.client.api  # type: ignore[union-attr]  # (no NanoCpus in update_container)
            url = api._url("/containers/{0}/update", self.container.id)
            api._result(api._post_json(url, data={"NanoCpus": nano}), True)
            applied["cpus"] = f"swarm nano_cpus={nano}"
        return applied

    def stop(self) -> None:
        """Clean stop: the task removed (the swarm stops it: SIGTERM, SIGKILL after 5 s)."""
        if self.name in self.backend.paused:
            self.resume()
        self.backend.downed.add(self.name)
        self.backend.scale(self.name, 0)


@register_backend("swarm")
class SwarmBackend(DockerBackend):
    """One one-replica service per node of the plan, placed by a Docker swarm.

    Parameters
    ----------
    As :class:`~testbed.backends.docker.DockerBackend`.
    """

    name = "swarm"
    places_nodes = True
    #: Every workload: a workload's own servers (function runtimes, LLM stages, the
    #: semantic fog) listen on 0.0.0.0 in their containers and the runner reaches them
    #: at their engine's address (:meth:`service_host`).
    workloads: ClassVar[frozenset[str] | None] = None
    options: ClassVar[frozenset[str]] = DockerBackend.options | {"advertise"}

    def __init__(
        self,
        plan: Any,
        run_dir: Path,
        warm: bool = True,
        image: str | None = None,
        oversubscribe: bool = False,
        advertise: str | None = None,
    ) -> None:
        super().__init__(plan, run_dir, warm, image, oversubscribe)
        # the address the nodes dial (--advertise-addr, else TESTBED_SWARM_ADVERTISE,
        # else the manager's swarm address)
        self.engines = Engines(self.client, engine_urls(), advertise)
        self.listen_host = self.engines.address
        self.host = self.engines.host()
        self.services: dict[str, Service] = {}
        self.placed: dict[str, str] = {}  # node -> swarm node id its task runs on
        self.image_loads: dict[str, float] = {}  # engine hostname -> seconds to load
        self._distributed: set[str] = set()  # images loaded into the engines this run
        self._placement = placements(plan.experiment, self.engines.ready())
        server = next((n.name for n in plan.nodes if n.role == "server"), None)
        if server is not None:  # (a fleet without FL has none)
            self._placement[server] = {"node": self.engines.manager_id}

    # -- what it supports ---------------------------------------------------------------
    @classmethod
    def unavailable(cls) -> str | None:
        """No manager answers at ``DOCKER_HOST``, it is not a swarm manager, an engine of
        :data:`ENGINES_ENV` does not answer, or the manager lacks the image."""
        try:
            engines = Engines.from_env(PING_TIMEOUT_S)
            check_image(engines.clients[engines.manager_id], image_name())
            engines.close()
        except (ValueError, DockerException, RequestException) as e:
            return str(e)
        return None

    @classmethod
    def preflight(
        cls, experiments: Sequence[Experiment], options: Mapping[str, Any] | None = None
    ) -> None:
        """The declarations; with a manager answering: every placement matches a ready
        engine, the profiles fit the largest engine (unless ``oversubscribe``), an engine
        fault (:data:`ENGINE_FAULTS`) targets only nodes whose engines the runner
        reaches, and netem links only nodes on engines on this host
        (:func:`~testbed.backends.swarm_engines.check_netem`)."""
        super(DockerBackend, cls).preflight(experiments, options)  # (not this host's limits)
        for exp in experiments:
            refuse_server_placement(exp)
        try:
            engines = Engines.from_env(PING_TIMEOUT_S)
        except (ValueError, DockerException, RequestException):
            return  # (`unavailable` says why: validate prints it, run refuses)
        try:
            over = bool((options or {}).get("oversubscribe"))
            for exp in experiments:
                check_placements(exp, engines)
                check_netem(exp, engines)
                check_limits(exp, engines.host(), over)
        finally:
            engines.close()

    # -- services -----------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> None:
        """:meth:`DockerBackend.start`, the image first loaded into every reachable engine
        that lacks it."""
        self._distribute(self.image)
        super().start(timeout_s)

    def _distribute(self, image: str) -> None:
        """``docker save | docker load`` of ``image`` from the manager into each reachable
        engine that lacks it, once per run; the seconds each took are recorded
        (``image_loads``)."""
        if image in self._distributed:
            return
        check_image(self.client, image)
        self._distributed.add(image)
        for node_id, client in self.engines.clients.items():
            if node_id == self.engines.manager_id:
                continue
            try:
                client.images.get(image)
                continue
            except docker.errors.ImageNotFound:
                pass
            t0 = time.monotonic()
            client.api.load_image(self.client.api.get_image(image))  # type: ignore[no-untyped-call]
            self.image_loads[self.engines.hostname(node_id)] = time.monotonic() - t0

    def _create(
        self,
        name: str,
        command: list[str],
        volumes: dict[str, dict[str, str]],
        limits: dict[str, Any],
        network: str,
    ) -> Container:
        """A one-replica service for node ``name`` (host network, the node's placement as
        constraints, no restart: a crash stays a crash), and its task's container once it
        runs."""
        # the image on every engine, also for a workload's own servers without a fleet
        # start (start_services): a derived image is built on the manager
        self._distribute(app.image if (app := self.app_image) else self.image)
        mounts = [
            Mount(bind["bind"], source, type="bind", read_only=bind["mode"] == "ro")
            for source, bind in volumes.items()
        ]
        cpus = limits.get("cpu_quota", 0) / limits.get("cpu_period", PERIOD_US)
        memory = _bytes(limits.get("mem_limit"))
        service = self.client.services.create(  # type: ignore[no-untyped-call]
            self.image,
            command=command,
            name=self._container_name(name),
            labels=self._labels(name),
            container_labels=self._labels(name),
            env=[f"{k}={v}" for k, v in self._env(name).items()],
            mounts=mounts,
            workdir=str(self.run_dir / "nodes" / name),
            user=f"{os.getuid()}:{os.getgid()}",
            networks=[network] if network != "none" else [],
            constraints=constraints(self._placement.get(self._service_of.get(name, name), {})),
            mode=ServiceMode("replicated", replicas=1),
            restart_policy=RestartPolicy(condition="none"),
            resources=Resources(cpu_limit=int(cpus * 1e9) or None, mem_limit=memory or None),
            init=True,
            stop_grace_period=5 * 10**9,
        )
        self.services[name] = service
        return self._task_container(name, limits)

    def _task_container(self, name: str, limits: Mapping[str, Any] | None = None) -> Container:
        """Wait for node ``name``'s running task; its container on the engine that runs
        it (its cpuset applied there, as the docker backend pins), or a
        :class:`TaskContainer` where that engine is not reachable."""
        service = self.services[name]
        deadline = time.monotonic() + TASK_TIMEOUT_S
        last = "no task yet"
        while time.monotonic() < deadline:
            for task in service.tasks(filters={"desired-state": "running"}):  # type: ignore[no-untyped-call]
                status = task.get("Status") or {}
                state, last = status.get("State"), status.get("Err") or status.get("Message") or ""
                if state in ("failed", "rejected", "orphaned"):
                    raise RuntimeError(f"node {name}: its swarm task {state}: {last}")
                cid = (status.get("ContainerStatus") or {}).get("ContainerID")
                if state == "running" and cid:
                    node_id = task["NodeID"]
                    self.placed[name] = node_id
                    engine = self.engines.clients.get(node_id)
                    if engine is None:
                        return TaskContainer(service)  # type: ignore[return-value]
                    container = engine.containers.get(cid)
                    self._pin(name, container, engine, limits)
                    return container
                last = f"{state}: {last}"
            time.sleep(0.2)
        raise RuntimeError(
            f"node {name}: its swarm task did not run within {TASK_TIMEOUT_S:.0f} s "
            f"({last}; placement {self._placement.get(name) or 'any'})"
        )

    def _pin(
        self, name: str, container: Container, engine: docker.DockerClient, limits: Any
    ) -> None:
        """The docker backend's cpuset for node ``name`` on the engine that runs it
        (a service has none of its own): ``docker update`` there."""
        if not limits or "cpuset_cpus" not in limits:
            return
        node = self._planned(name)
        if node is None:
            return
        ncpu = int(engine.info().get("NCPU") or 1)
        index = self.plan.clients.index(node) if node in self.plan.clients else 0
        pins = container_limits(node, index, list(range(ncpu))).get("cpuset_cpus")
        if pins:
            container.update(cpuset_cpus=pins)

    def _planned(self, name: str) -> PlannedNode | None:
        """The planned node of ``name`` (a node, or a workload's process key on it)."""
        name = self._service_of.get(name, name)
        return next((n for n in self.plan.nodes if n.name == name), None)

    def _container_name(self, name: str) -> str:
        """As on one engine, without dots (a service name is a DNS label: ``edge-1.svc``
        becomes ``edge-1-svc``)."""
        return super()._container_name(name).replace(".", "-")

    def _env(self, name: str) -> dict[str, str]:
        """As on one engine, and a workload's own servers listen on every address (the
        runner may be on another host: :meth:`service_host`)."""
        return {**super()._env(name), BIND_ENV: "0.0.0.0"}

    def service_host(self, key: str) -> str:
        """The address of the engine whose task runs process ``key`` (or, given a node's
        name, its latest workload process): loopback on the manager, else the swarm
        node's address."""
        if key not in self.placed:
            keys = [k for k, node in self._service_of.items() if node == key and k in self.placed]
            key = keys[-1] if keys else key
        if key not in self.placed:
            raise NotStarted(key, sorted(self.placed))
        return self.engines.address_of(self.placed[key])

    def scale(self, name: str, replicas: int) -> None:
        """Scale node ``name``'s service (0: its task removed; 1: a new one placed)."""
        service = self.services[name]
        service.reload()
        service.scale(replicas)

    def start_node(self, name: str) -> tuple[int, Any]:
        """A node's first start: its service; again after a crash or stop: the service
        scaled back to 1 (a new task, placed by the same constraints; netem: its new
        namespace plumbed into the node's link, whose schedule and counters go on)."""
        if name not in self.services:
            return super().start_node(name)
        self.downed.discard(name)
        net_gate(self.run_dir, name).unlink(missing_ok=True)  # (netem: plumbed again)
        self.scale(name, 1)
        self._wait_gone_tasks(name)
        node = self._planned(name)
        limits = self._limits(node) if node is not None and node in self.plan.clients else None
        self.containers[name] = self._task_container(name, limits)
        self._plumb(name)  # (netem: the new task's own namespace)
        return self.node_ports[name], self.proc(name)

    def _wait_gone_tasks(self, name: str) -> None:
        """Until the removed task's container is gone, so the running one is the new."""
        deadline = time.monotonic() + 30
        old = self.containers.get(name)
        while old is not None and not isinstance(old, TaskContainer):
            try:
                old.reload()
            except NotFound:
                return
            if old.attrs["State"].get("Status") != "running" or time.monotonic() > deadline:
                return
            time.sleep(0.1)

    def _wait_node(self, name: str, deadline: float) -> None:
        """Its task runs and (warm) its ready file is written: the node's port is on the
        host of the engine that runs it, which the runner may not reach."""
        while self.warm and not self._ready_file(name).exists():
            if time.monotonic() > deadline or self.proc(name).poll() is not None:
                why = self.exit_reason(name) or "still starting"
                log = log_tail(self.node_log(name))
                raise RuntimeError(
                    f"node {name} did not warm up on {self._where(name)} ({why}; the run "
                    f"folder must be at the same path on every engine's host); {log}"
                )
            time.sleep(0.2)

    def _where(self, name: str) -> str:
        node_id = self.placed.get(name, "")
        return f"{self.engines.hostname(node_id)} ({node_id[:12]})"

    def node(self, name: str) -> SwarmNode:  # type: ignore[override]
        """The handle of client node ``name`` (KeyError naming the nodes otherwise)."""
        if name not in self._cmds:
            raise NotStarted(name, sorted(self._cmds))
        return SwarmNode(self, name)

    def node_limits(self) -> dict[str, dict[str, Any]]:
        """The limits each client container holds on its engine (docker inspect there):
        the swarm's ``NanoCpus``, the cpuset the runner applied, the memory."""
        out: dict[str, dict[str, Any]] = {}
        for node in self.plan.clients:
            c = self.containers.get(node.name)
            if c is None or isinstance(c, TaskContainer):
                continue
            c.reload()
            hc = c.attrs["HostConfig"]
            out[node.name] = {
                "cpus": f"swarm nano_cpus={hc.get('NanoCpus') or 0}",
                "cpuset": hc.get("CpusetCpus") or "",
                "memory": f"docker memory={hc['Memory']}",
                "engine": self._where(node.name),
            }
        return out

    def exit_reason(self, name: str) -> str | None:
        c = self.containers[name]
        if isinstance(c, TaskContainer):
            c.reload()
            state = c.attrs["State"]
            return None if state["Status"] == "running" else f"exited {state['ExitCode']}"
        return super().exit_reason(name)

    @functools.cached_property
    def _no_gpu(self) -> str | None:
        return "a swarm service gets no device requests here" if self.plan.nodes else None

    def _engine_url(self, name: str) -> str | None:
        return self.engines.urls.get(self.placed.get(name, ""))

    def _api_client(self, url: str) -> docker.APIClient:
        if url == self.engines.urls[self.engines.manager_id]:
            return super()._api_client(url)
        return docker.APIClient(base_url=url, timeout=30)

    def fleet_info(self) -> dict[str, Any]:
        """The docker backend's, plus where each node ran (``placed``: node -> swarm
        hostname and id), the image loads, and the address nodes dial."""
        out = super().fleet_info()
        out["placed"] = {n: self._where(n) for n in sorted(self.placed)}
        out["advertise"] = self.listen_host
        if self.image_loads:
            out["image_loads"] = {h: round(s, 1) for h, s in self.image_loads.items()}
        return out

    def stop(self) -> None:
        """The docker backend's teardown, then every service of the run removed and any
        container of the run left on a reachable engine."""
        try:
            super().stop()
        finally:
            for service in self.client.services.list(filters={"label": RUN_LABEL}):
                if service.attrs["Spec"].get("Labels", {}).get(RUN_LABEL) == self.run_label:
                    try:
                        service.remove()  # type: ignore[no-untyped-call]
                    except (NotFound, APIError):
                        pass
            for node_id, client in self.engines.clients.items():
                if node_id != self.engines.manager_id:
                    remove_containers(client, self.run_label)
            self.engines.close()


def _bytes(mem: str | None) -> int:
    """``"512m"`` -> bytes (the docker backend's ``mem_limit``)."""
    if not mem:
        return 0
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    return int(float(mem[:-1]) * units[mem[-1]]) if mem[-1] in units else int(mem)
