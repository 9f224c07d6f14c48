"""Link kinds by name (``links.mode``): factories that build an unstarted :class:`Link`.

A backend builds every node's link the same way, whatever the kind::

    from testbed.emulation.kinds import LINK_KINDS

    link = LINK_KINDS[mode](
        node.name, node.uplink.params(),
        index=i, seed=seed, server_host="127.0.0.1", server_port=superlink_port,
        server_netns=netns, run_tag=tag,
    )
    link.start()
    address = link.connect_address(superlink_port)  # what the node dials

A factory has the signature of :class:`LinkFactory`. To add a kind (a container's
namespace, an mmWave channel, a virtual clock), write one module with a class that
satisfies :class:`~testbed.emulation.link.Link` (use
:class:`~testbed.emulation.state.LinkState` and
:class:`~testbed.emulation.schedule.ScheduleDriver` for the bookkeeping and schedules)
and register its factory::

    @LINK_KINDS.register("mmwave")
    def make_mmwave(node_name, params, *, index, seed, server_host, server_port,
                    server_netns=None, run_tag=""):
        return MmwaveLink(node_name, params, seed=seed, ...)

The factories import their module when called, so importing this one is cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from nodes.registry import Registry
from testbed.emulation.link import Link, LinkParams

if TYPE_CHECKING:
    from radio.config import MmwaveLinkSpec


class LinkFactory(Protocol):
    """Builds one unstarted link from a node to the server it reaches.

    Parameters
    ----------
    node_name
        The node whose link this is; the link's ``name`` where the kind allows it.
    params
        Initial link parameters.
    index
        0-255, unique per live link of the run (netem: the address block
        ``10.200.<index>.0/29``).
    seed
        Seed of the link's random source (jitter, loss).
    server_host, server_port
        The server the link leads to, as seen by the backend (proxy: the relay's target).
    server_netns
        Network namespace the server runs in, shared by the run's links (netem), or
        ``None`` (netem creates one per link; other kinds ignore it).
    run_tag
        Short run id (``[a-z0-9]``, at most 8 characters) for kinds that create
        host-wide objects: netem names its namespaces after ``<run_tag>n<index>``
        (without a tag, after ``node_name``).

    Returns
    -------
    Link
        Not started: the caller calls ``start()`` and then ``connect_address``.
    """

    def __call__(
        self,
        node_name: str,
        params: LinkParams,
        *,
        index: int,
        seed: int,
        server_host: str,
        server_port: int,
        server_netns: str | None = None,
        run_tag: str = "",
    ) -> Link: ...


#: Link kinds by ``links.mode`` name.
LINK_KINDS: Registry[LinkFactory] = Registry("link kind")


@LINK_KINDS.register("proxy")
def make_proxy(
    node_name: str,
    params: LinkParams,
    *,
    index: int,
    seed: int,
    server_host: str,
    server_port: int,
    server_netns: str | None = None,
    run_tag: str = "",
) -> Link:
    """A userspace :class:`~testbed.emulation.proxy.ShapingProxy` on 127.0.0.1 (a free
    port) relaying to ``server_host:server_port``."""
    from testbed.emulation.proxy import ShapingProxy

    return ShapingProxy(node_name, server_host, server_port, params, seed=seed)


@LINK_KINDS.register("netem")
def make_netem(
    node_name: str,
    params: LinkParams,
    *,
    index: int,
    seed: int,
    server_host: str,
    server_port: int,
    server_netns: str | None = None,
    run_tag: str = "",
) -> Link:
    """A kernel-shaped :class:`~testbed.emulation.netem.NetemLink` (namespaces, veths,
    tbf/netem); the server end goes into ``server_netns``."""
    from testbed.emulation.netem import NetemLink

    name = f"{run_tag}n{index}" if run_tag else node_name
    return NetemLink(name, params, index=index, seed=seed, server_netns=server_netns)


@LINK_KINDS.register("mmwave")
def make_mmwave(
    node_name: str,
    params: LinkParams,
    *,
    index: int,
    seed: int,
    server_host: str,
    server_port: int,
    server_netns: str | None = None,
    run_tag: str = "",
    radio: MmwaveLinkSpec | None = None,
) -> Link:
    """An :class:`~testbed.emulation.mmwave.MmwaveLink`: the userspace proxy whose rate
    follows a Sionna channel (``radio``: the link's ``mmwave:`` parameters; default
    :data:`~testbed.emulation.mmwave.DEFAULT_MMWAVE`)."""
    from testbed.emulation.mmwave import DEFAULT_MMWAVE, MmwaveLink

    spec = radio or DEFAULT_MMWAVE
    return MmwaveLink(node_name, server_host, server_port, params, spec, seed=seed)
