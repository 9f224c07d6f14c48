"""The swarm as the runner sees it (:mod:`testbed.backends.swarm`): its engines, the
placements of a spec's nodes, and what validate refuses before anything starts."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import docker

from testbed.backends.base import NotSupported
from testbed.backends.docker import connect
from testbed.backends.host_limits import Host
from testbed.chaos import fault_targets
from testbed.planner import make_plan
from testbed.spec.models import Experiment

ENGINES_ENV = "TESTBED_SWARM_ENGINES"  # engine URLs the runner reaches, besides the manager
ADVERTISE_ENV = "TESTBED_SWARM_ADVERTISE"  # the address nodes dial (default: the manager's)
#: Fault kinds that act on a node's container through the engine that runs it.
ENGINE_FAULTS = frozenset({"pause", "straggler"})


def constraints(placement: Mapping[str, str]) -> list[str]:
    """Swarm constraints of a placement (``hostname``, ``node``, ``role``, else a label)."""
    field = {"hostname": "node.hostname", "node": "node.id", "role": "node.role"}
    return [f"{field.get(k, f'node.labels.{k}')}=={v}" for k, v in sorted(placement.items())]


def matches(swarm_node: Mapping[str, Any], placement: Mapping[str, str]) -> bool:
    """Whether swarm node ``swarm_node`` (``docker node inspect``) satisfies ``placement``."""
    spec, desc = swarm_node.get("Spec") or {}, swarm_node.get("Description") or {}
    own = {
        "hostname": desc.get("Hostname", ""),
        "node": swarm_node.get("ID", ""),
        "role": spec.get("Role", ""),
    }
    labels = spec.get("Labels") or {}
    return all(own[k] == v if k in own else labels.get(k) == v for k, v in placement.items())


def describe(swarm_node: Mapping[str, Any]) -> str:
    """``hostname (id, labels)`` of a swarm node, for messages."""
    spec = swarm_node.get("Spec") or {}
    labels = ",".join(f"{k}={v}" for k, v in sorted((spec.get("Labels") or {}).items()))
    host = (swarm_node.get("Description") or {}).get("Hostname", "?")
    return f"{host} ({swarm_node.get('ID', '?')[:12]}{', ' + labels if labels else ''})"


def placements(
    exp: Experiment, swarm_nodes: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, str]]:
    """Node name -> its placement: the spec's, else ``{tier: <its tier>}`` when an engine
    carries that tier label, else none (the swarm chooses)."""
    tiers = {((n.get("Spec") or {}).get("Labels") or {}).get("tier") for n in swarm_nodes}
    out: dict[str, dict[str, str]] = {}
    for spec in exp.fleet.nodes if exp.fleet else ():
        chosen = dict(spec.placement) or ({"tier": spec.tier} if spec.tier in tiers else {})
        for name in spec.names():
            out[name] = chosen
    return out


class Engines:
    """The swarm seen from the runner: its nodes, and a client of each engine it reaches.

    Parameters
    ----------
    manager : docker.DockerClient
        The manager's engine (``DOCKER_HOST``).
    urls : sequence of str
        Other engines the runner reaches (:data:`ENGINES_ENV`).
    """

    def __init__(
        self,
        manager: docker.DockerClient,
        urls: Sequence[str] = (),
        advertise: str | None = None,
    ) -> None:
        info = manager.info().get("Swarm") or {}
        if not info.get("ControlAvailable"):
            raise ValueError(
                "--backend swarm: the engine at DOCKER_HOST is not a swarm manager "
                f"(swarm state: {info.get('LocalNodeState', '?')}); run `docker swarm "
                "init` there, or point DOCKER_HOST at a manager"
            )
        self.manager_id: str = info["NodeID"]
        self.address: str = (
            advertise or os.environ.get(ADVERTISE_ENV) or info.get("NodeAddr") or "127.0.0.1"
        )
        self.clients: dict[str, docker.DockerClient] = {self.manager_id: manager}
        self.urls: dict[str, str] = {self.manager_id: os.environ.get("DOCKER_HOST", "")}
        for url in urls:
            client = docker.DockerClient(base_url=url, timeout=60)
            node_id = (client.info().get("Swarm") or {}).get("NodeID")
            if not node_id:
                raise ValueError(f"{ENGINES_ENV}: the engine at {url} is not in a swarm")
            self.clients[node_id], self.urls[node_id] = client, url
        self.nodes: list[dict[str, Any]] = [n.attrs for n in manager.nodes.list()]

    @classmethod
    def from_env(cls, timeout_s: int = 60) -> Engines:
        return cls(connect(timeout_s), engine_urls())

    def ready(self) -> list[dict[str, Any]]:
        """The swarm nodes that are ready and active (where tasks can go)."""
        return [
            n
            for n in self.nodes
            if (n.get("Status") or {}).get("State") == "ready"
            and (n.get("Spec") or {}).get("Availability") == "active"
        ]

    def host(self) -> Host:
        """The largest ready engine's CPUs and memory (what one container can get)."""
        res = [(n.get("Description") or {}).get("Resources") or {} for n in self.ready()]
        cpus = max((int(r.get("NanoCPUs", 0)) // 10**9 for r in res), default=1)
        mem = max((int(r.get("MemoryBytes", 0)) // 2**20 for r in res), default=0)
        return Host(max(cpus, 1), mem)

    def hostname(self, node_id: str) -> str:
        for n in self.nodes:
            if n.get("ID") == node_id:
                return str((n.get("Description") or {}).get("Hostname", "?"))
        return "?"

    def address_of(self, node_id: str) -> str:
        """Where the runner reaches a server a task of swarm node ``node_id`` listens on
        (host network): this host's loopback on the manager (the runner's host), else
        the node's swarm address (``Status.Addr``)."""
        if node_id == self.manager_id:
            return "127.0.0.1"
        for n in self.nodes:
            if n.get("ID") == node_id:
                addr = str((n.get("Status") or {}).get("Addr") or "")
                if addr and addr != "0.0.0.0":
                    return addr
        raise ValueError(f"swarm node {node_id[:12]}: no address the runner can reach")

    def close(self) -> None:
        for node_id, client in self.clients.items():
            if node_id != self.manager_id:
                client.close()


def engine_urls() -> list[str]:
    return [u.strip() for u in os.environ.get(ENGINES_ENV, "").split(",") if u.strip()]


def netem_nodes(exp: Experiment) -> tuple[str, list[str]]:
    """The YAML field that makes netem links, and the client nodes they shape."""
    mode = exp.links.mode
    netem = [
        n.name
        for n in make_plan(exp).clients
        if mode != "none" and n.uplink.kind_in(mode) == "netem"
    ]
    field = "links.mode" if mode == "netem" or not netem else f"links.nodes.{netem[0]}.kind"
    return field, netem


def local_engine(url: str) -> bool:
    """Whether an engine URL is on this host (a unix socket; empty: the default one)."""
    return not url or url.startswith("unix://")


def check_netem(exp: Experiment, engines: Engines) -> None:
    """netem shapes each node container's own namespace from this host, as on one engine
    (:mod:`testbed.emulation.container_net`): it needs what it needs there (root,
    ``ip``/``tc``), the manager (the SuperLink's side of the links) on this host, and
    every netem node placed only on engines the runner reaches through a socket on this
    host (its container's namespace is then this host's to plumb)."""
    field, netem = netem_nodes(exp)
    if not netem:
        return
    from testbed.emulation.container_net import container_netem_problem

    why = container_netem_problem(engines.urls[engines.manager_id] or None)
    if why is not None:
        raise NotSupported(f"{field}: netem cannot shape the swarm's containers here: {why}")
    chosen = placements(exp, engines.ready())
    for name in netem:
        away = [
            n
            for n in engines.ready()
            if matches(n, chosen[name]) and not local_engine(engines.urls.get(n["ID"], "tcp:"))
        ]
        if away:
            raise NotSupported(
                f"{field}: netem shapes node {name}'s container namespace from this host, "
                f"and {name} may run on {', '.join(describe(n) for n in away)}, which is "
                f"not an engine on this host the runner reaches (a unix socket in "
                f"{ENGINES_ENV}): pin {name} with fleet.nodes[].placement, or use "
                "links.mode: proxy (the same shaping, in the runner's proxies)"
            )


def refuse_server_placement(exp: Experiment) -> None:
    for i, spec in enumerate(exp.fleet.nodes if exp.fleet else ()):
        if spec.placement and spec.fl_role == "server":
            raise NotSupported(
                f"fleet.nodes[{i}].placement: node {spec.id} runs the SuperLink, which "
                "runs on the swarm manager (the runner's engine, where the links end)"
            )


def check_placements(exp: Experiment, engines: Engines) -> None:
    """Every placement matches a ready engine; every engine fault's nodes land only on
    engines the runner reaches."""
    ready = engines.ready()
    chosen = placements(exp, ready)
    for i, spec in enumerate(exp.fleet.nodes if exp.fleet else ()):
        if spec.placement and not any(matches(n, spec.placement) for n in ready):
            raise NotSupported(
                f"fleet.nodes[{i}].placement: no ready swarm node matches "
                f"{dict(spec.placement)} (nodes: {'; '.join(describe(n) for n in ready)})"
            )
    plan = make_plan(exp)
    for i, fault in enumerate(exp.faults):
        if fault.kind not in ENGINE_FAULTS:
            continue
        for name in fault_targets(plan, fault):
            away = [n for n in ready if matches(n, chosen[name]) and n["ID"] not in engines.clients]
            if away:
                raise NotSupported(
                    f"faults[{i}].kind: {fault.kind} acts through the engine that runs node "
                    f"{name}, and it may run on {', '.join(describe(n) for n in away)}, "
                    f"which the runner cannot reach: list that engine in {ENGINES_ENV}, "
                    f"or pin {name} with fleet.nodes[].placement"
                )
