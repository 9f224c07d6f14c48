"""Link kinds by name (``links.mode``, or a link's own ``kind``): one class per kind that
owns everything the kind does, on every backend.

A :class:`LinkKind` says

- how it shapes a node's link on the host (:meth:`LinkKind.build`: the local backend,
  and the docker backend whose containers share the host's network);
- how it shapes a link whose client end is a container's own network namespace
  (:meth:`LinkKind.build_in_container`: the docker backend with ``links.mode: netem``),
  or why it cannot;
- how the virtual clock of ``--backend simulation`` prices it
  (:meth:`LinkKind.price`: the link's :class:`~testbed.emulation.link.LinkParams` over
  virtual time), or why it cannot.

A backend builds every node's link the same way, whatever the kind::

    from testbed.emulation.kinds import LinkEnds, link_kind

    kind = link_kind(node.uplink.kind_in(mode))
    ends = LinkEnds(index=i, seed=seed, server_host="127.0.0.1", server_port=port)
    link = kind.build(node.name, node.uplink.params(), ends, **node.uplink.link_options())
    link.start()
    address = link.connect_address(port)  # what the node dials

To add a kind, write one module with a subclass of :class:`LinkKind` registered with
:func:`register_link_kind`; a new shaping mechanism implements
:class:`~testbed.emulation.link.Link` (use :class:`~testbed.emulation.state.LinkState`
and :class:`~testbed.emulation.schedule.ScheduleDriver` for the bookkeeping and
schedules). The built-in kinds import their module when they build, so importing this
one is cheap.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernel.registry import Registry
from testbed.emulation.link import Link, LinkParams, LinkSchedule

if TYPE_CHECKING:
    from radio.config import MmwaveLinkSpec


class Refused(ValueError):
    """A link kind cannot do what was asked on this backend; the message says why (the
    caller adds the link's YAML path and what was asked)."""


@dataclass(frozen=True)
class LinkEnds:
    """Where one link goes, as the backend sees it.

    Attributes
    ----------
    index
        0-255, unique per live link of the run (netem: the address block
        ``10.200.<index>.0/29``).
    seed
        Seed of the link's random source (jitter, loss).
    server_host, server_port
        The server the link leads to (proxy: the relay's target).
    server_netns
        Network namespace the server runs in, shared by the run's links (netem; in a
        container: the server container's), or ``None`` (netem creates one per link;
        host-side kinds ignore it).
    run_tag
        Short run id (``[a-z0-9]``, at most 8 characters) for kinds that create
        host-wide objects: netem names its namespaces ``ct-<run_tag>n<index>-*``
        (without a tag, after the node).
    listen_host
        Host-side kinds (proxy, mmwave): the address their relay listens on, which the
        node dials (swarm: an address the other engines reach).
    """

    index: int
    seed: int
    server_host: str = "127.0.0.1"
    server_port: int = 0
    server_netns: str | None = None
    run_tag: str = ""
    listen_host: str = "127.0.0.1"


class LinkKind(ABC):
    """One link kind: how it shapes a node's link on every backend, and how the virtual
    clock prices it.

    :meth:`build` is the one duty every kind has. :meth:`build_in_container` and
    :meth:`price` refuse (:class:`Refused`, saying why) unless the kind overrides them;
    a backend that needs them turns the refusal into an error naming the link's YAML
    path, before the run starts where it can (the simulation's preflight:
    :func:`testbed.simulation.links.check_links`). ``options`` are the link's own
    parameters beyond :class:`~testbed.emulation.link.LinkParams`
    (``LinkSpec.link_options()``: mmwave's ``radio``).
    """

    #: The kind's name (set by :func:`register_link_kind`).
    name: str = ""

    @abstractmethod
    def build(self, node_name: str, params: LinkParams, ends: LinkEnds, **options: Any) -> Link:
        """An unstarted link from node ``node_name`` (on this host) to the server at
        ``ends``, in state ``params``; the caller calls ``start()`` and then
        ``connect_address``."""

    def build_in_container(
        self, node_name: str, params: LinkParams, ends: LinkEnds, **options: Any
    ) -> Link:
        """An unstarted link whose client end is a container's own network namespace and
        whose server end is ``ends.server_netns``; it has ``attach(pid)``, called once the
        container runs and again after each restart (docker, ``links.mode: netem``)."""
        raise Refused(
            "it shapes links on the host's network only, and this fleet's containers have "
            "network namespaces of their own (use links.mode: proxy, or kind: netem)"
        )

    def price(self, schedule: LinkSchedule, **options: Any) -> LinkSchedule:
        """The link over virtual time, as piecewise-constant segments from virtual 0, for
        the virtual clock (:class:`testbed.simulation.timeline.LinkTimeline`).

        Parameters
        ----------
        schedule
            The link's planned states (segments: its own parameters at 0, its
            ``schedule``, satellite passes).
        """
        raise Refused(f"link kind {self.name!r} does not say how its traffic is timed")


#: Link kinds by name: ``links.mode`` and a link's ``kind``.
LINK_KINDS: Registry[type[LinkKind]] = Registry("link kind")


def register_link_kind(name: str) -> Callable[[type[LinkKind]], type[LinkKind]]:
    """Class decorator: register a :class:`LinkKind` subclass under ``name``."""

    def deco(cls: type[LinkKind]) -> type[LinkKind]:
        if not (isinstance(cls, type) and issubclass(cls, LinkKind)):
            raise TypeError(f"link kind {name!r}: {cls!r} is not a LinkKind subclass")
        cls.name = name
        return LINK_KINDS.register(name)(cls)

    return deco


def link_kind(name: str) -> LinkKind:
    """The link kind registered as ``name`` (ValueError listing the kinds otherwise)."""
    return LINK_KINDS[name]()


def as_planned(schedule: LinkSchedule) -> LinkSchedule:
    """``schedule`` itself, which must be piecewise (a function schedule cannot be priced)."""
    if not schedule.is_piecewise:
        raise Refused("its schedule is a function of time; the virtual clock needs segments")
    return schedule


@register_link_kind("proxy")
class Proxy(LinkKind):
    """A userspace :class:`~testbed.emulation.proxy.ShapingProxy` on 127.0.0.1 (a free
    port) relaying to the server; on the virtual clock, its planned parameters as they
    are (the clock's transfer model is the proxy's: docs/simulation.md)."""

    def build(self, node_name: str, params: LinkParams, ends: LinkEnds, **options: Any) -> Link:
        from testbed.emulation.proxy import ShapingProxy

        return ShapingProxy(
            node_name,
            ends.server_host,
            ends.server_port,
            params,
            listen_host=ends.listen_host,
            seed=ends.seed,
        )

    def price(self, schedule: LinkSchedule, **options: Any) -> LinkSchedule:
        return as_planned(schedule)


@register_link_kind("netem")
class Netem(LinkKind):
    """A kernel-shaped :class:`~testbed.emulation.netem.NetemLink` (namespaces, veths,
    tbf/netem); the server end goes into ``ends.server_netns``. In a container: a
    :class:`~testbed.emulation.container_net.ContainerNetemLink`. On the virtual clock,
    its planned parameters (the clock models no congestion control: MODELLED)."""

    def build(self, node_name: str, params: LinkParams, ends: LinkEnds, **options: Any) -> Link:
        from testbed.emulation.netem import NetemLink

        name = f"{ends.run_tag}n{ends.index}" if ends.run_tag else node_name
        return NetemLink(
            name, params, index=ends.index, seed=ends.seed, server_netns=ends.server_netns
        )

    def build_in_container(
        self, node_name: str, params: LinkParams, ends: LinkEnds, **options: Any
    ) -> Link:
        from testbed.emulation.container_net import ContainerNetemLink

        if ends.server_netns is None:
            raise Refused("a container link needs the server container's namespace")
        return ContainerNetemLink(
            f"{ends.run_tag}n{ends.index}", params, ends.index, ends.seed, ends.server_netns
        )

    def price(self, schedule: LinkSchedule, **options: Any) -> LinkSchedule:
        return as_planned(schedule)


@register_link_kind("mmwave")
class Mmwave(LinkKind):
    """An :class:`~testbed.emulation.mmwave.MmwaveLink`: the userspace proxy whose rate
    follows a Sionna channel (``radio``: the link's ``mmwave:`` parameters; default
    :data:`~testbed.emulation.mmwave.DEFAULT_MMWAVE`). Not in a container's namespace,
    not on the virtual clock (each says why)."""

    def build(
        self,
        node_name: str,
        params: LinkParams,
        ends: LinkEnds,
        radio: MmwaveLinkSpec | None = None,
        **options: Any,
    ) -> Link:
        from testbed.emulation.mmwave import DEFAULT_MMWAVE, MmwaveLink

        spec = radio or DEFAULT_MMWAVE
        return MmwaveLink(
            node_name,
            ends.server_host,
            ends.server_port,
            params,
            spec,
            seed=ends.seed,
            listen_host=ends.listen_host,
        )

    def build_in_container(
        self, node_name: str, params: LinkParams, ends: LinkEnds, **options: Any
    ) -> Link:
        raise Refused(
            "its radio drives a userspace proxy on the host's network, and this fleet's "
            "containers have network namespaces of their own (use links.mode: proxy)"
        )

    def price(self, schedule: LinkSchedule, **options: Any) -> LinkSchedule:
        raise Refused(
            "its rate is the goodput of a Sionna channel computed live, one window at a "
            "time on the wall clock (radio/link_model.py), which the virtual clock cannot "
            "run ahead of the exchanges it prices; give the link a bandwidth_mbps instead "
            "(kind: proxy), or run it with --backend local"
        )
