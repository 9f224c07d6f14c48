"""Links and start-up budget of the Docker backend.

``links.mode: netem`` with containers: every node container (and the SuperLink's) gets
its own network namespace (``network_mode: none``) and its link is what its kind builds
in a container (netem: a
:class:`~testbed.emulation.container_net.ContainerNetemLink`): a veth pair from the
container's namespace to a router namespace the testbed owns, shaped there with tbf and
netem (or the NFQUEUE delay line where the kernel has no ``sch_netem``), as
``links.mode: netem`` does for local processes. Where that cannot work (not root, an
engine on another host, a runner inside a container) the userspace shaping proxy on the
host network is used instead, and the run records why (:func:`choose_link_mode`).
"""

from __future__ import annotations

import os
from pathlib import Path

from testbed.emulation.container_net import container_netem_problem
from testbed.emulation.kinds import LinkEnds, Refused, link_kind
from testbed.emulation.link import Link
from testbed.planner import Plan, link_kind_path

#: Start-up budget of a fleet of node containers (:func:`start_timeout_s`): a base, and
#: seconds per node container (each imports torch and Flower, ~3 s of CPU, all at once
#: on the host's cores; 32 warm containers took 242.5 s on 2 cores, docs/benchmarks.md).
START_BASE_S = 60.0
START_PER_NODE_S = 8.0


def start_timeout_s(clients: int, cpus: int | None = None) -> float:
    """How long a fleet of ``clients`` node containers may take to start, s.

    Parameters
    ----------
    clients : int
        Node containers started together.
    cpus : int, optional
        CPUs of this host (default: those this process may use); the per-node share
        is :data:`START_PER_NODE_S` on 2 CPUs, scaled by ``2 / cpus`` (never below
        a quarter of it).

    Returns
    -------
    float
        ``START_BASE_S + clients * per_node``, s.
    """
    n = cpus if cpus is not None else len(os.sched_getaffinity(0))
    per_node = START_PER_NODE_S * max(0.25, 2.0 / max(1, n))
    return START_BASE_S + clients * per_node


def net_gate(run_dir: Path, name: str) -> Path:
    """The file node ``name``'s container waits for before its command runs (netem:
    written once its link is plumbed into the container's namespace)."""
    return run_dir / "nodes" / name / "net-ready"


def choose_link_mode(mode: str) -> tuple[str, str | None]:
    """The links a docker fleet uses for ``links.mode: mode``, and why it differs.

    Parameters
    ----------
    mode : str
        ``links.mode`` of the spec (``proxy``, ``netem`` or ``none``).

    Returns
    -------
    (str, str or None)
        The mode in force and, when netem cannot shape containers here
        (:func:`~testbed.emulation.container_net.container_netem_problem`), ``proxy``
        with the reason, which the run records (a ``links_fallback`` event and the
        summary's ``links:`` line, :func:`testbed.workloads.base.record_links`).
    """
    if mode != "netem":
        return mode, None
    why = container_netem_problem(os.environ.get("DOCKER_HOST"))
    if why is None:
        return "netem", None
    note = (
        f"links.mode: netem cannot shape the containers' own namespaces here ({why}); "
        "falling back to the userspace shaping proxy on the host network (links.mode: "
        "proxy: same bandwidth, latency, jitter, loss, schedules and partitions)"
    )
    return "proxy", note


def container_links(plan: Plan, run_tag: str, server_netns: str) -> dict[str, Link]:
    """One started link per client node of ``plan`` whose client end is the node
    container's own namespace, built by the link's kind (``links.mode`` or its own
    ``kind``: :meth:`~testbed.emulation.kinds.LinkKind.build_in_container`; netem's is a
    :class:`~testbed.emulation.container_net.ContainerNetemLink`), index = the node's
    position, server side in ``server_netns``; the client sides are attached when the
    containers run. A kind that cannot is a ValueError naming its YAML path."""
    exp = plan.experiment
    links: dict[str, Link] = {}
    try:
        for i, node in enumerate(plan.clients):
            name = node.uplink.kind_in(exp.links.mode)
            ends = LinkEnds(i, plan.seed * 1000 + i, server_netns=server_netns, run_tag=run_tag)
            try:
                link = link_kind(name).build_in_container(
                    node.name, node.uplink.params(), ends, **node.uplink.link_options()
                )
            except Refused as e:
                where = link_kind_path(exp, node.name)
                raise ValueError(
                    f"{where}: kind: {name} cannot shape node {node.name}'s link inside its "
                    f"container: {e}"
                ) from None
            link.start()
            links[node.name] = link
    except BaseException:
        for link in links.values():
            link.stop()
        raise
    return links
