"""netem mode: one link as network namespaces, veth pairs and kernel shaping (root only).

Topology of link ``name`` with index ``k`` (0-255); every address is private and lives
only inside namespaces this module creates (the root namespace is not touched)::

    ct-<name>-c               ct-<name>-r (router)                 ct-<name>-s
    ctc 10.200.k.2/30 <-veth-> ctr0 10.200.k.1/30 | ctr1 10.200.k.5/30 <-veth-> cts<k> 10.200.k.6/30

The server runs in the server namespace and listens on ``server_addr`` (10.200.k.6, or
0.0.0.0); the client runs in the client namespace and connects to ``server_addr``.
Place a process with ``ip netns exec <ns> <cmd>`` (:meth:`NetemLink.exec_prefix`), or, in
Python, create sockets inside ``with in_netns(ns):``. Several links may share one server
namespace (``server_netns=``, e.g. one SuperLink and one link per SuperNode).

Shaping happens in the router namespace, on what it forwards (a packet-level model: real
TCP sees real drops, queues and delays):

- bandwidth: ``tbf`` on each router egress (ctr1 = up, ctr0 = down);
- latency/jitter: ``netem`` under the ``tbf`` when the kernel has ``sch_netem``, else an
  NFQUEUE delay line (:mod:`testbed.emulation.nfqueue`) in this process;
- loss: ``iptables -m statistic --mode random`` DROP per packet, each direction;
- partition: ``blackhole`` = DROP everything, ``refuse`` = REJECT with TCP reset.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

from testbed.emulation.link import MSS_BYTES, LinkParams, LinkSchedule
from testbed.emulation.nfqueue import DelayLine
from testbed.emulation.schedule import ScheduleDriver
from testbed.emulation.state import LinkState, check_params, check_partition_mode

_CLONE_NEWNET = 0x40000000
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,15}$")
_Q_UP, _Q_DOWN = 0, 1
#: Bytes on the wire for one MSS segment: 1448 payload + TCP (32, timestamps) + IPv4 (20)
#: + Ethernet (14) headers. tbf counts these; ``bandwidth_mbps`` means payload rate.
WIRE_BYTES = MSS_BYTES + 32 + 20 + 14
#: TCP buffer autotuning limits set in the client and server namespaces this module
#: creates (min, default, max bytes), so long fat links are not window-limited.
TCP_MEM = "4096 131072 33554432"


class NetemUnavailable(RuntimeError):
    """netem mode cannot run here (not root, or ``ip``/``tc``/``iptables`` missing)."""


def _run(*cmd: str, stdin: str | None = None, check: bool = True) -> str:
    res = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=30)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip() or res.returncode}")
    return res.stdout


@contextlib.contextmanager
def in_netns(netns: str) -> Iterator[None]:
    """Run the body with the calling thread in network namespace ``netns``.

    Sockets created inside stay in that namespace after the block; the thread returns
    to its previous namespace on exit.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            if libc.setns(target, _CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns({netns}): {os.strerror(err)}")
        finally:
            os.close(target)
        try:
            yield
        finally:
            if libc.setns(here, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the original namespace")
    finally:
        os.close(here)


@functools.lru_cache(maxsize=1)
def support() -> dict[str, object]:
    """What netem mode can use on this machine (probed once, in a scratch namespace).

    Returns
    -------
    dict
        ``ok`` (bool) and ``reason`` (why not), plus ``tbf``, ``netem_qdisc`` and
        ``nfqueue`` (bools) and ``delay_engine`` (``"netem"``, ``"nfqueue"`` or ``None``).
    """
    out: dict[str, object] = {"ok": False, "reason": "", "tbf": False, "netem_qdisc": False}
    out.update(nfqueue=False, delay_engine=None)
    if os.geteuid() != 0:
        out["reason"] = "netem mode needs root (CAP_NET_ADMIN)"
        return out
    missing = [b for b in ("ip", "tc", "iptables", "iptables-restore") if shutil.which(b) is None]
    if missing:
        out["reason"] = (
            f"missing binaries: {', '.join(missing)} (apt-get install iproute2 iptables)"
        )
        return out
    ns = f"ct-probe-{os.getpid() % 100000}"
    try:
        _run("ip", "netns", "add", ns)
    except RuntimeError as exc:
        out["reason"] = f"cannot create a network namespace: {exc}"
        return out
    try:
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        tbf = ("tbf", "rate", "1mbit", "burst", "10kb", "limit", "100kb")
        out["tbf"] = _try("tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", *tbf)
        _run("tc", "-n", ns, "qdisc", "del", "dev", "lo", "root", check=False)
        add_netem = ("tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
        out["netem_qdisc"] = _try(*add_netem)
        try:
            with in_netns(ns):
                line = DelayLine((0,))
                line.start()
                line.stop()
            out["nfqueue"] = True
        except OSError:
            out["nfqueue"] = False
    finally:
        _run("ip", "netns", "del", ns, check=False)
    out["delay_engine"] = "netem" if out["netem_qdisc"] else "nfqueue" if out["nfqueue"] else None
    if not out["tbf"]:
        out["reason"] = "kernel has no tbf qdisc (CONFIG_NET_SCH_TBF)"
    else:
        out["ok"] = True
        if out["delay_engine"] is None:
            out["reason"] = "no sch_netem and no NFQUEUE: latency/jitter unavailable"
    return out


def _try(*cmd: str) -> bool:
    return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0


class NetemLink:
    """One emulated link as three network namespaces with kernel shaping in the middle.

    Implements :class:`testbed.emulation.link.Link`.

    Parameters
    ----------
    name
        Link name: lowercase letters, digits and ``-``, at most 16 characters (it names
        the namespaces ``ct-<name>-c``, ``ct-<name>-r`` and ``ct-<name>-s``).
    params
        Initial link parameters.
    index
        0-255; selects the address block ``10.200.<index>.0/29``. Unique per live link.
    seed
        Seed of the jitter source (NFQUEUE engine).
    server_netns
        Existing namespace to put the server end in (shared by several links), or
        ``None`` to create ``ct-<name>-s``.
    """

    def __init__(
        self,
        name: str,
        params: LinkParams,
        index: int = 0,
        seed: int = 0,
        server_netns: str | None = None,
    ) -> None:
        if not _NAME.match(name):
            raise ValueError(f"name: must match {_NAME.pattern}, got {name!r}")
        if not 0 <= index <= 255:
            raise ValueError(f"index: must be in 0..255, got {index!r}")
        self.name, self.index, self.seed = name, index, seed
        self.client_netns = f"ct-{name}-c"
        self.router_netns = f"ct-{name}-r"
        self._own_server = server_netns is None
        self.server_netns = server_netns or f"ct-{name}-s"
        self.client_addr = f"10.200.{index}.2"
        self.server_addr = f"10.200.{index}.6"
        self._srv_if = f"cts{index}"
        self._state = LinkState(check_params(params))
        self._qdisc: dict[str, str | None] = {"ctr0": None, "ctr1": None}
        self._delay: DelayLine | None = None
        self._engine: str | None = None
        self._started = False
        self._lock = threading.RLock()
        self._driver = ScheduleDriver(self, self._state)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> str:
        """Create namespaces, veths, addresses, routes and shaping.

        Returns
        -------
        str
            The server address clients connect to (inside the client namespace).
        """
        info = support()
        if not info["ok"]:
            raise NetemUnavailable(str(info["reason"]))
        self._engine = info["delay_engine"]  # type: ignore[assignment]
        c, r, s, k = self.client_netns, self.router_netns, self.server_netns, self.index
        try:
            for ns in (c, r) + ((s,) if self._own_server else ()):
                _run("ip", "netns", "add", ns)
                _run("ip", "-n", ns, "link", "set", "lo", "up")
            for ns in (c, r) + ((s,) if self._own_server else ()):  # IPv4 only: no ND noise
                _run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
                _run(
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "sysctl",
                    "-qw",
                    "net.ipv6.conf.default.disable_ipv6=1",
                )
            _run("ip", "link", "add", "ctc", "netns", c, "type", "veth", "peer", "ctr0", "netns", r)
            _run("ip", "link", "add", "ctr1", "netns", r, "type", "veth", "peer", self._srv_if,
                 "netns", s)  # fmt: skip
            for ns, dev, addr in (
                (c, "ctc", f"10.200.{k}.2/30"),
                (r, "ctr0", f"10.200.{k}.1/30"),
                (r, "ctr1", f"10.200.{k}.5/30"),
                (s, self._srv_if, f"10.200.{k}.6/30"),
            ):
                _run("ip", "-n", ns, "addr", "add", addr, "dev", dev)
                # one MSS per packet (no GSO super-packets): loss and delay per real segment
                _run("ip", "-n", ns, "link", "set", dev, "gso_max_segs", "1", "up")
            _run("ip", "-n", c, "route", "add", f"10.200.{k}.4/30", "via", f"10.200.{k}.1")
            _run("ip", "-n", s, "route", "add", f"10.200.{k}.0/30", "via", f"10.200.{k}.5")
            _run("ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            if self._engine == "nfqueue":
                self._delay = DelayLine((_Q_UP, _Q_DOWN), seed=self.seed)
                with in_netns(r):
                    self._delay.start()
            self._started = True
            self._state.start()
            self._apply(self._state.params)
        except BaseException:
            self.stop()
            raise
        return self.server_addr

    def stop(self) -> None:
        """Stop the schedule and delay line; delete the namespaces (and the veths)."""
        self._driver.stop()
        if self._delay is not None:
            self._delay.stop()
            self._delay = None
        for ns in (self.client_netns, self.router_netns):
            _run("ip", "netns", "del", ns, check=False)
        if self._own_server:
            _run("ip", "netns", "del", self.server_netns, check=False)
        else:
            _run("ip", "-n", self.server_netns, "link", "del", self._srv_if, check=False)
        self._started = False
        self._state.stop()

    def __enter__(self) -> NetemLink:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def exec_prefix(self, side: str) -> list[str]:
        """Command prefix that runs a program on one side: ``side`` is client or server."""
        if side not in ("client", "server"):
            raise ValueError(f"side: must be 'client' or 'server', got {side!r}")
        ns = self.client_netns if side == "client" else self.server_netns
        return ["ip", "netns", "exec", ns]

    def connect_address(self, server_port: int) -> str:
        """``host:port`` a client in the client namespace dials to reach the server
        listening on ``server_port`` in the server namespace (across the router)."""
        return f"{self.server_addr}:{int(server_port)}"

    # -- control ---------------------------------------------------------------------
    @property
    def params(self) -> LinkParams:
        """The parameters in force."""
        return self._state.params

    def set_params(self, params: LinkParams) -> None:
        """Change shaping (tc change / iptables-restore; open connections are kept)."""
        check_params(params)
        with self._lock:
            if self._started:
                self._apply(params)
            else:
                self._state.set_params(params)

    def partition(self, on: bool, mode: str = "blackhole") -> None:
        """Partition (``on``) or heal; ``blackhole`` drops, ``refuse`` rejects with RST."""
        check_partition_mode(mode)
        with self._lock:
            self._state.set_partition(mode if on else None)
            self._rules()

    def run_schedule(self, schedule: LinkSchedule, t0: float) -> None:
        """Follow ``schedule`` from ``t0`` (``time.monotonic()``) with the shared
        :class:`~testbed.emulation.schedule.ScheduleDriver`; lags recorded."""
        self._driver.start(schedule, t0)

    # -- counters --------------------------------------------------------------------
    def counters(self) -> dict[str, Any]:
        """Per-link counters, measured in the router namespace.

        Returns
        -------
        dict
            ``bytes_up``/``bytes_down``: bytes forwarded towards the server/client
            (IP packets with Ethernet headers); ``packets_up``/``packets_down``;
            ``connections``: TCP SYNs forwarded up; ``dropped_loss_up``/``_down``: packets
            dropped by the loss rule; ``dropped_partition``; ``qdisc_drops_up``/``_down``
            (tbf queue overflow); ``partitioned_s``; ``stalled_s`` (None: real TCP
            retransmissions are not observed here); ``delay_engine``; ``partition``;
            ``params``; ``changes`` (schedule lags).
        """
        r = self.router_netns
        links = {
            d["ifname"]: d for d in json.loads(_run("ip", "-n", r, "-s", "-j", "link", "show"))
        }
        qd: dict[str, int] = {}
        for dev in ("ctr0", "ctr1"):
            rows = json.loads(_run("tc", "-n", r, "-s", "-j", "qdisc", "show", "dev", dev) or "[]")
            qd[dev] = sum(int(q.get("drops", 0)) for q in rows)
        rules = _run("ip", "netns", "exec", r, "iptables", "-w", "-L", "FORWARD", "-v", "-x", "-n")
        counts: dict[str, int] = {}
        for line in rules.splitlines():
            m = re.search(r"/\* (ct:[a-z-]+) \*/", line)
            if m:
                counts[m.group(1)] = counts.get(m.group(1), 0) + int(line.split()[0])
        book = self._state.counters()

        def tx(dev: str, key: str) -> int:
            return int(links[dev]["stats64"]["tx"][key])

        return {
            "name": self.name,
            "bytes_up": tx("ctr1", "bytes"),
            "bytes_down": tx("ctr0", "bytes"),
            "packets_up": tx("ctr1", "packets"),
            "packets_down": tx("ctr0", "packets"),
            "connections": counts.get("ct:syn", 0),
            "dropped_loss_up": counts.get("ct:loss-up", 0),
            "dropped_loss_down": counts.get("ct:loss-down", 0),
            "dropped_partition": counts.get("ct:partition", 0),
            "qdisc_drops_up": qd["ctr1"],
            "qdisc_drops_down": qd["ctr0"],
            "partitioned_s": book["partitioned_s"],
            "stalled_s": None,
            "delay_engine": self._engine,
            "partition": book["partition"],
            "params": book["params"],
            "changes": book["changes"],
        }

    # -- internals -------------------------------------------------------------------
    def _apply(self, params: LinkParams) -> None:
        shaped = params.on_wall_clock(self._state.tdf)  # what tc applies (dilated)
        delayed = params.latency_ms > 0 or params.jitter_ms > 0
        if delayed and self._engine is None:
            raise NetemUnavailable(
                "latency/jitter need sch_netem or NFQUEUE; this kernel has neither"
            )
        for dev in ("ctr1", "ctr0"):
            self._qdiscs(dev, shaped)
        self._state.set_params(params)
        if self._delay is not None:
            for q in (_Q_UP, _Q_DOWN):
                self._delay.set_delay(q, shaped.latency_ms, shaped.jitter_ms)
        self._rules()

    def _qdiscs(self, dev: str, p: LinkParams) -> None:
        """tbf (rate) and, with the netem engine, netem (delay) on one router egress."""
        r = self.router_netns
        use_netem = self._engine == "netem" and (p.latency_ms > 0 or p.jitter_ms > 0)
        netem = ["netem", "delay", f"{p.latency_ms}ms", f"{p.jitter_ms}ms", "limit", "100000"]
        rate = p.rate_bytes_per_s
        if rate is None:
            kind = "netem" if use_netem else None
            if kind is None:
                if self._qdisc[dev] is not None:
                    _run("tc", "-n", r, "qdisc", "del", "dev", dev, "root", check=False)
            else:
                verb = "change" if self._qdisc[dev] == "netem" else "replace"
                _run("tc", "-n", r, "qdisc", verb, "dev", dev, "root", *netem)
            self._qdisc[dev] = kind
            return
        line_rate = rate * WIRE_BYTES / MSS_BYTES  # bandwidth_mbps is the payload rate
        burst = max(int(line_rate * 0.005), 4 * WIRE_BYTES)
        limit = max(int(line_rate * max(0.1, 2 * p.rtt_s)), 64 * 1024)
        tbf = ["tbf", "rate", f"{int(line_rate * 8)}bit", "burst", str(burst), "limit", str(limit)]
        kind = "tbf+netem" if use_netem else "tbf"
        verb = "change" if (self._qdisc[dev] or "").startswith("tbf") else "replace"
        _run("tc", "-n", r, "qdisc", verb, "dev", dev, "root", "handle", "1:", *tbf)
        if use_netem:
            nverb = "change" if self._qdisc[dev] == "tbf+netem" else "replace"
            _run(
                "tc", "-n", r, "qdisc", nverb, "dev", dev, "parent", "1:1", "handle", "10:", *netem
            )
        elif self._qdisc[dev] == "tbf+netem":
            _run("tc", "-n", r, "qdisc", "del", "dev", dev, "parent", "1:1", check=False)
        self._qdisc[dev] = kind

    def _rules(self) -> None:
        """Rewrite the router's FORWARD chain atomically (iptables-restore)."""
        mode, p = self._state.mode, self._state.params
        lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
        lines.append('-A FORWARD -i ctr0 -p tcp --syn -m comment --comment "ct:syn"')
        if mode == "blackhole":
            lines.append('-A FORWARD -m comment --comment "ct:partition" -j DROP')
        elif mode == "refuse":
            lines.append(
                '-A FORWARD -p tcp -m comment --comment "ct:partition" '
                "-j REJECT --reject-with tcp-reset"
            )
            lines.append('-A FORWARD -m comment --comment "ct:partition" -j REJECT')
        if p.loss_pct > 0:
            prob = f"{p.loss_pct / 100.0:.6f}"
            for dev, tag in (("ctr0", "loss-up"), ("ctr1", "loss-down")):
                lines.append(
                    f"-A FORWARD -i {dev} -m statistic --mode random --probability {prob} "
                    f'-m comment --comment "ct:{tag}" -j DROP'
                )
        if self._delay is not None and (p.latency_ms > 0 or p.jitter_ms > 0):
            lines.append(f"-A FORWARD -i ctr0 -j NFQUEUE --queue-num {_Q_UP}")
            lines.append(f"-A FORWARD -i ctr1 -j NFQUEUE --queue-num {_Q_DOWN}")
        lines.append("COMMIT")
        _run("ip", "netns", "exec", self.router_netns, "iptables-restore", "-w",
             stdin="\n".join(lines) + "\n")  # fmt: skip
