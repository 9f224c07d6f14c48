"""netem links whose client end is a container's own network namespace (``--backend
docker`` with ``links.mode: netem``).

The topology is :mod:`testbed.emulation.netem`'s, with the two end namespaces being the
containers' own (``network_mode: none``: the engine gives each container an empty
namespace with only ``lo``)::

    node container           ct-<tag>n<k>-r (router,           SuperLink container
    (ct-<tag>n<k>-c)         owned by the testbed)             (ct-<tag>-srv)
    ctc 10.200.k.2 <-veth-> ctr0 10.200.k.1 | ctr1 10.200.k.5 <-veth-> cts<k> 10.200.k.6

A container's namespace is given a name with ``ip netns attach NAME PID`` (a bind mount
of ``/proc/PID/ns/net`` under ``/run/netns``), so every ``ip -n``/``tc -n`` of the netem
link works on it unchanged. Shaping (tbf rate, netem or the NFQUEUE delay line, loss,
partition = blackhole) happens in the router namespace, which only the testbed sees.

A container that is killed and started again (an outage) gets a NEW namespace from the
engine: :meth:`ContainerNetemLink.attach` plumbs the client side again (the old veth
pair is deleted, its byte counters carried over, the qdisc re-applied), so the link's
schedule, partition and counters go on across the restart.

Needs root on the engine's host (the runner and the engine share ``/proc``): see
:func:`container_netem_problem` for what is checked before a run chooses it.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from testbed.emulation.link import LinkParams
from testbed.emulation.netem import NetemLink, _run, support

#: Counters of the client-side router interface (``ctr0``) that restart at 0 when the
#: veth pair is made again; summed across re-plumbs.
_CARRIED = ("bytes_down", "packets_down", "qdisc_drops_down")


@runtime_checkable
class InContainer(Protocol):
    """A link whose client end is a container's own network namespace (what a link
    kind's ``build_in_container`` returns): the docker backend calls :meth:`attach` with
    the container's PID once it runs, and again after each restart."""

    client_netns: str

    def attach(self, pid: int) -> None: ...


def attach_netns(name: str, pid: int) -> None:
    """Name the network namespace of process ``pid`` (``ip netns attach``), replacing a
    name left from an earlier process."""
    _run("ip", "netns", "del", name, check=False)
    _run("ip", "netns", "attach", name, str(pid))


def container_netem_problem(docker_host: str | None) -> str | None:
    """Why ``links.mode: netem`` cannot shape containers here (None when it can).

    Parameters
    ----------
    docker_host : str or None
        ``DOCKER_HOST`` (None or ``unix://...``: an engine on this host).

    Returns
    -------
    str or None
        The reason: not root, an engine on another host, or no ``ip netns``/``tc``/
        ``iptables`` or no tbf in the kernel, or namespaces cannot be made here (a
        runner in a container without privileges): :func:`testbed.emulation.netem.support`.
        None when it can.
    """
    if docker_host and not docker_host.startswith("unix://"):
        return f"the engine is not on this host (DOCKER_HOST={docker_host})"
    info = support()
    if not info["ok"]:
        return str(info["reason"])
    return None


class ContainerNetemLink(NetemLink):
    """A :class:`~testbed.emulation.netem.NetemLink` whose client end is a container.

    ``start()`` builds the router and the server side (in ``server_netns``, the
    SuperLink container's attached namespace) and a placeholder client namespace;
    :meth:`attach` moves the client end into the node container's namespace once the
    container runs, and again after each restart.

    Parameters
    ----------
    name, params, index, seed, server_netns
        As for :class:`~testbed.emulation.netem.NetemLink`; ``server_netns`` is
        required (the server container's namespace).
    """

    def __init__(
        self, name: str, params: LinkParams, index: int, seed: int, server_netns: str
    ) -> None:
        super().__init__(name, params, index=index, seed=seed, server_netns=server_netns)
        self.pid: int | None = None  # the container process whose namespace is the client
        self.attaches = 0  # how many times the client side was plumbed
        self._carried = dict.fromkeys(_CARRIED, 0)

    def attach(self, pid: int) -> None:
        """Plumb the client side into the network namespace of container process
        ``pid``: veth ``ctc`` (10.200.k.2) there, ``ctr0`` (10.200.k.1) in the router,
        route to the server, the router's downlink qdisc re-applied."""
        c, r, k = self.client_netns, self.router_netns, self.index
        with self._lock:
            self._carry_counters()
            _run("ip", "-n", r, "link", "del", "ctr0", check=False)  # (and its peer ctc)
            attach_netns(c, pid)
            _run("ip", "netns", "exec", c, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
            _run("ip", "-n", c, "link", "set", "lo", "up")
            _run("ip", "link", "add", "ctc", "netns", c, "type", "veth", "peer", "ctr0", "netns", r)
            for ns, dev, addr in ((c, "ctc", f"10.200.{k}.2/30"), (r, "ctr0", f"10.200.{k}.1/30")):
                _run("ip", "-n", ns, "addr", "add", addr, "dev", dev)
                _run("ip", "-n", ns, "link", "set", dev, "gso_max_segs", "1", "up")
            _run("ip", "-n", c, "route", "add", f"10.200.{k}.4/30", "via", f"10.200.{k}.1")
            self._qdisc["ctr0"] = None
            self._qdiscs("ctr0", self.params)
            self.pid, self.attaches = pid, self.attaches + 1

    def counters(self) -> dict[str, Any]:
        """:meth:`NetemLink.counters`, with the downlink counters of client sides that a
        restart replaced added in; ``attaches`` (client side plumbings) and ``pid``."""
        with self._lock:
            out = super().counters()
            for key in _CARRIED:
                out[key] += self._carried[key]
        out.update(attaches=self.attaches, pid=self.pid)
        return out

    def _carry_counters(self) -> None:
        """Add the current ``ctr0`` counters to the carried totals (before it goes)."""
        if self.attaches == 0:
            return
        r = self.router_netns
        shown = _run("ip", "-n", r, "-s", "-j", "link", "show", "ctr0", check=False)
        rows = json.loads(shown or "[]")
        if not rows:
            return
        tx = rows[0]["stats64"]["tx"]
        qd = json.loads(_run("tc", "-n", r, "-s", "-j", "qdisc", "show", "dev", "ctr0") or "[]")
        self._carried["bytes_down"] += int(tx["bytes"])
        self._carried["packets_down"] += int(tx["packets"])
        self._carried["qdisc_drops_down"] += sum(int(q.get("drops", 0)) for q in qd)
