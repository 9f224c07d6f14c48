"""Emulated links: shaping proxy (always) and netem mode (root with ip/tc/iptables).

Real sockets on loopback (proxy) or inside network namespaces this file creates (netem).
Each test stays under 10 s on a quiet host; tolerances are named constants.

A verdict here must not depend on the host's speed or its neighbours (docs/ci.md): times
are judged against what the run recorded (the link's own change times and lags, its
counters, stamps the test takes just before and after each action), and against the
physics of the feature, one-sided: a shaped transfer is never faster than its cap allows,
an emulated delay never shorter than configured, a partition's counted seconds lie
between the stamps around its start and its end. Accuracy and lag figures (how close to
ideal, how soon) are printed; they are bench/links.py's figures of merit
(docs/benchmarks.md), not verdicts. Waits for something to happen are liveness waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from testbed.emulation.kinds import LINK_KINDS, LinkEnds, link_kind
from testbed.emulation.link import Link, LinkParams, LinkSchedule, satellite_pass
from testbed.emulation.proxy import RTO_MIN_S, ShapingProxy
from testbed.emulation.relay import Bucket
from testbed.emulation.schedule import ScheduleDriver
from testbed.emulation.state import LinkState

LIVENESS_S = 30.0  # a wait for what takes well under a second on a quiet host
LAG_LIVENESS_S = 5.0  # a schedule change later than this is stuck, not slow
CLOCK_SLACK_S = 0.002  # clock/timer granularity allowed below a physical floor
FLOAT_TOL = 1e-6  # float noise of a time recomputed from a change's t_s and lag_ms (s)
NETEM_RATE_SLACK = 0.03  # relative: tbf's 5 ms burst, and headers per segment (netem.py)


# -- helpers ---------------------------------------------------------------------------
class Server:
    """Threaded TCP server: ``handler(conn)`` per connection; records per-read timeline."""

    def __init__(self, handler: Callable[[socket.socket], None], sock: socket.socket | None = None):
        self.sock = sock or socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.handler = handler
        self.errors: list[BaseException] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            with conn:
                self.handler(conn)
        except BaseException as exc:  # noqa: BLE001
            self.errors.append(exc)

    def close(self) -> None:
        self.sock.close()


class Sink:
    """Handler: read to EOF (timeline of (t, total bytes)), answer the SHA-256 digest."""

    def __init__(self) -> None:
        self.timeline: list[tuple[float, int]] = []

    def __call__(self, conn: socket.socket) -> None:
        h, total = hashlib.sha256(), 0
        while data := conn.recv(1 << 16):
            h.update(data)
            total += len(data)
            self.timeline.append((time.monotonic(), total))
        conn.sendall(h.digest())


def echo(conn: socket.socket) -> None:
    while data := conn.recv(65536):
        conn.sendall(data)


def payload(n: int, seed: int = 1) -> bytes:
    return (hashlib.sha256(str(seed).encode()).digest() * (n // 32 + 1))[:n]


def send_all(port: int, data: bytes, host: str = "127.0.0.1", sock: socket.socket | None = None):
    """Connect, send ``data``, half-close, wait for the digest. Returns (seconds, digest)."""
    c = sock or socket.socket()
    t0 = time.monotonic()
    with c:
        c.connect((host, port))
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        digest = recv_exact(c, 32)
    return time.monotonic() - t0, digest


def recv_exact(c: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = c.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def assert_rtt_floor(rtts: list[float], rtt_s: float) -> None:
    """No round trip faster than the emulated RTT (load only adds to one). The median is
    printed: closeness to the RTT is a figure of merit, not a verdict."""
    median = sorted(rtts)[len(rtts) // 2]
    print(f"RTT {rtt_s * 1e3:.0f} ms emulated: median {median * 1e3:.1f} ms of {len(rtts)}")
    assert min(rtts) >= rtt_s - CLOCK_SLACK_S, rtts


def wait_for(cond: Callable[[], object], what: str, every_s: float = 0.005) -> None:
    """Poll ``cond`` until it holds; fail after LIVENESS_S (liveness, not speed)."""
    deadline = time.monotonic() + LIVENESS_S
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {LIVENESS_S} s: {what}")
        time.sleep(every_s)


def stamped(action: Callable[[], object]) -> tuple[float, float]:
    """Monotonic times just before and just after ``action()``: it took effect between."""
    before = time.monotonic()
    action()
    return before, time.monotonic()


def burst_bytes(params: LinkParams) -> float:
    """Most bytes one direction of a proxy passes beyond ``rate x time`` from an idle
    start: a full token bucket plus one chunk of debt (:class:`relay.Bucket`)."""
    bucket = Bucket(params.rate_bytes_per_s, 0.0)
    return bucket.depth + bucket.chunk


def switch_window(change: dict) -> tuple[float, float]:
    """``(due, applied)`` of a recorded schedule change, in seconds since the link's start:
    the driver waits for ``due`` before ``set_params`` and stamps ``applied`` after it
    returned, so the link's state switched in between."""
    return change["t_s"] - change["lag_ms"] / 1e3, change["t_s"]


def union_s(*spans: tuple[float, float]) -> float:
    """Length of the union of the intervals ``(start, end)`` (empty ones ignored)."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def partitioned_bounds(changes: list[dict], end_s: float | None = None) -> tuple[float, float]:
    """Least and most partitioned seconds a link partitioned only by its schedule can have
    counted, from its recorded changes (:func:`switch_window`); a partition still on at the
    end counts until ``end_s`` (seconds since the start, e.g. a stopped link's uptime)."""
    lo = hi = 0.0
    since: tuple[float, float] | None = None  # window of the change that partitioned it
    for ch in changes:
        due, applied = switch_window(ch)
        if ch["params"]["partitioned"] and since is None:
            since = (due, applied)
        elif not ch["params"]["partitioned"] and since is not None:
            lo, hi, since = lo + max(0.0, due - since[1]), hi + applied - since[0], None
    if since is not None:
        assert end_s is not None, "a partition still on needs the end time"
        lo, hi = lo + max(0.0, end_s - since[1]), hi + end_s - since[0]
    return lo, hi


def heals(changes: list[dict]) -> int:
    """Recorded changes that healed a scheduled partition."""
    pairs = zip(changes, changes[1:], strict=False)
    return sum(a["params"]["partitioned"] and not b["params"]["partitioned"] for a, b in pairs)


@contextlib.contextmanager
def proxied(
    handler: Callable[[socket.socket], None], params: LinkParams, resets_expected: bool = False
) -> Iterator:
    server = Server(handler)
    proxy = ShapingProxy("t", "127.0.0.1", server.port, params, seed=3)
    port = proxy.start()
    try:
        yield proxy, port, server
    finally:
        proxy.stop()
        server.close()
    if resets_expected:
        assert server.errors and all(isinstance(e, ConnectionResetError) for e in server.errors)
    else:
        assert not server.errors, server.errors


# -- parameters and schedules ----------------------------------------------------------
def test_link_params_validation_names_the_field() -> None:
    for kwargs, field in [
        ({"bandwidth_mbps": 0}, "bandwidth_mbps"),
        ({"latency_ms": -1}, "latency_ms"),
        ({"jitter_ms": float("nan")}, "jitter_ms"),
        ({"loss_pct": 100}, "loss_pct"),
    ]:
        with pytest.raises(ValueError, match=field):
            LinkParams(**kwargs)  # type: ignore[arg-type]
    p = LinkParams(bandwidth_mbps=8, latency_ms=25)
    assert p.rate_bytes_per_s == 1e6 and p.rtt_s == 0.05
    assert p.replace(loss_pct=1.0).loss_pct == 1.0
    with pytest.raises(ValueError, match="unknown"):
        p.replace(speed=3)


def test_schedule_piecewise_and_function() -> None:
    a, b = LinkParams(bandwidth_mbps=1), LinkParams(bandwidth_mbps=2, partitioned=True)
    s = LinkSchedule([(5.0, b), (0.0, a)])
    assert [s.at(t) for t in (-1, 0, 4.99, 5, 100)] == [a, a, a, b, b]
    with pytest.raises(ValueError, match="duplicate"):
        LinkSchedule([(0, a), (0, b)])
    sat = satellite_pass(100, 40, 5, 25, 100, 10, offset_s=10)
    assert sat.at(0).partitioned and sat.at(60).partitioned
    rise, zenith = sat.at(10.0), sat.at(30.0)
    assert not zenith.partitioned and zenith.latency_ms == 5 and zenith.bandwidth_mbps == 100
    assert rise.latency_ms == 25 and rise.bandwidth_mbps == 10


# -- the Link protocol, its kinds, the shared schedule driver and bookkeeping --------
class MemoryLink:
    """A minimal in-memory :class:`Link` (a test double of the protocol, not of a real
    link): ``set_params`` takes ``apply_s`` seconds, like a link that shells out."""

    def __init__(self, params: LinkParams, apply_s: float = 0.0) -> None:
        self.name = "mem"
        self.state = LinkState(params)
        self.driver = ScheduleDriver(self, self.state)
        self.apply_s = apply_s

    def start(self) -> None:
        self.state.start()

    def stop(self) -> None:
        self.driver.stop()
        self.state.stop()

    @property
    def params(self) -> LinkParams:
        return self.state.params

    def set_params(self, params: LinkParams) -> None:
        time.sleep(self.apply_s)
        self.state.set_params(params)

    def partition(self, on: bool, mode: str = "blackhole") -> None:
        self.state.set_partition(mode if on else None)

    def run_schedule(self, schedule: LinkSchedule, t0: float) -> None:
        self.driver.start(schedule, t0)

    def counters(self) -> dict:
        return {"name": self.name, **self.state.counters()}

    def connect_address(self, server_port: int) -> str:
        return f"127.0.0.1:{server_port}"


def _due(link: MemoryLink, change: dict) -> float:
    """Monotonic time a recorded change was due."""
    return link.state.t_start + change["t_s"] - change["lag_ms"] / 1e3


def assert_played_on_boundaries(
    link: MemoryLink, segments: list[tuple[float, LinkParams]], t0: float
) -> list[dict]:
    """The recorded changes are the segments after the first, in order, each applied no
    earlier than its boundary and recorded as due exactly then; only a driver that joined
    after a boundary (its thread descheduled at the start) may instead apply the segment
    in force at its join, due then, and skip the boundaries before. Returns the changes."""
    changes = link.state.changes()
    got = [LinkParams.from_dict(ch["params"]) for ch in changes]
    later = [p for _, p in segments[1:]]
    assert got and got == later[len(later) - len(got) :], got
    first = len(segments) - len(got)  # the segment of changes[0]
    for i, ch in enumerate(changes):
        due, boundary = _due(link, ch), t0 + segments[first + i][0]
        assert ch["lag_ms"] >= 0, ch  # never before it was due
        if i == 0 and due > boundary + FLOAT_TOL:  # joined late, inside this segment
            nxt = first + 1
            assert nxt == len(segments) or due < t0 + segments[nxt][0] + FLOAT_TOL, ch
        else:
            assert abs(due - boundary) < FLOAT_TOL, (ch, boundary)
    return changes


def test_both_link_kinds_satisfy_the_link_protocol() -> None:
    from testbed.emulation.netem import NetemLink

    assert {"proxy", "netem"} <= set(LINK_KINDS)
    ends = LinkEnds(index=7, seed=1, server_host="127.0.0.1", server_port=9092)
    proxy = link_kind("proxy").build("edge-1", LinkParams(), ends)
    netem = link_kind("netem").build(
        "edge-1", LinkParams(latency_ms=5), replace(ends, server_netns="ct-x-srv", run_tag="ab12")
    )
    assert isinstance(proxy, ShapingProxy) and isinstance(proxy, Link)
    assert isinstance(netem, NetemLink) and isinstance(netem, Link)
    assert isinstance(MemoryLink(LinkParams()), Link) and not isinstance(object(), Link)
    assert proxy.name == "edge-1" and proxy.target == ("127.0.0.1", 9092)
    assert netem.name == "ab12n7" and netem.server_netns == "ct-x-srv"  # nothing created yet
    assert netem.params == LinkParams(latency_ms=5)
    assert netem.connect_address(9092) == "10.200.7.6:9092"
    assert link_kind("netem").build("edge-1", LinkParams(), ends).name == "edge-1"  # no run tag
    with pytest.raises(ValueError, match="link kind 'tc'.*netem.*proxy"):
        LINK_KINDS["tc"]
    for kind in ("proxy", "netem"):
        with pytest.raises(ValueError, match="params"):
            link_kind(kind).build("x", {"latency_ms": 5}, ends)  # type: ignore[arg-type]


def test_proxy_from_the_registry_is_reached_at_its_connect_address() -> None:
    server = Server(echo)
    ends = LinkEnds(index=0, seed=1, server_host="127.0.0.1", server_port=server.port)
    link = link_kind("proxy").build("n0", LinkParams(latency_ms=5), ends)
    link.start()
    try:
        host, port = link.connect_address(server.port).rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) != server.port  # through the relay
        with socket.create_connection((host, int(port))) as c:
            c.sendall(b"hi")
            assert recv_exact(c, 2) == b"hi"
        link.set_params(LinkParams(latency_ms=1))
        counters = link.counters()
        assert link.params == LinkParams(latency_ms=1) and counters["params"]["latency_ms"] == 1
        assert counters["bytes_up"] == counters["bytes_down"] == 2
    finally:
        link.stop()
        server.close()
    assert not server.errors, server.errors


def test_link_state_partition_bookkeeping() -> None:
    state = LinkState(LinkParams(partitioned=True))
    time.sleep(0.05)
    assert state.mode == "blackhole" and state.partitioned_s() == 0.0  # not started
    state.start()
    assert state.set_partition("refuse") == "refuse"  # a manual partition wins
    assert state.set_partition(None) == "blackhole"  # the scheduled one stays on
    time.sleep(0.1)
    t_open = time.monotonic()
    assert state.set_params(LinkParams()) is None
    t_opened = time.monotonic()
    time.sleep(0.1)
    t_manual = time.monotonic()
    assert state.set_partition("blackhole") == "blackhole"
    t_manualed = time.monotonic()
    time.sleep(0.1)
    state.stop()
    frozen = state.partitioned_s()
    time.sleep(0.05)
    assert state.partitioned_s() == frozen  # stopped: no longer counting
    # from the start to the heal, and from the manual partition to the stop (the state's
    # own t_start and t_stop); each switch happened between the stamps around its call
    lo = (t_open - state.t_start) + (state.t_stop - t_manualed)
    hi = (t_opened - state.t_start) + (state.t_stop - t_manual)
    assert state.t_stop is not None and lo - FLOAT_TOL <= frozen <= hi + FLOAT_TOL, (lo, frozen)
    with pytest.raises(ValueError, match="mode"):
        state.set_partition("drop")
    with pytest.raises(ValueError, match="params"):
        state.set_params({"latency_ms": 1})  # type: ignore[arg-type]


def test_schedule_driver_plays_segments_on_time() -> None:
    a, b, cut = LinkParams(latency_ms=1), LinkParams(latency_ms=2), LinkParams(partitioned=True)
    segments = [(0.0, a), (0.1, b), (0.2, cut)]
    link = MemoryLink(a)
    link.start()
    t0 = time.monotonic()
    link.run_schedule(LinkSchedule(segments), t0)
    wait_for(
        lambda: any(ch["params"] == cut.to_dict() for ch in link.state.changes()),
        "the partition segment applied",
    )
    applied_cut = link.state.t_start + link.state.changes()[-1]["t_s"]
    time.sleep(max(0.0, applied_cut + 0.15 - time.monotonic()))  # partitioned >= 0.15 s
    link.stop()
    changes = assert_played_on_boundaries(link, segments, t0)  # a was in force
    print("segment lags (ms):", [round(ch["lag_ms"], 2) for ch in changes])
    assert all(ch["lag_ms"] < LAG_LIVENESS_S * 1e3 for ch in changes)
    counters = link.counters()
    assert counters["partition"] == "blackhole"
    # counted from the switch (between the cut's due and applied times) to the stop
    lo, hi = partitioned_bounds(changes, end_s=link.state.uptime_s())
    assert lo >= 0.15 - FLOAT_TOL and lo - FLOAT_TOL <= counters["partitioned_s"] <= hi + FLOAT_TOL

    # joined late: the segment in force now is applied at once, past boundaries skipped;
    # a new schedule replaces the previous one (whose cut never fires afterwards)
    link = MemoryLink(a)
    link.start()
    t_old = time.monotonic()
    link.run_schedule(LinkSchedule([(0.0, a), (0.1, cut)]), t_old)
    t1 = time.monotonic()
    link.run_schedule(LinkSchedule([(0.0, a), (0.5, b), (60.0, cut)]), t1 - 1.0)
    t_replaced = time.monotonic()
    wait_for(lambda: any(ch["params"] == b.to_dict() for ch in link.state.changes()), "b")
    time.sleep(0.2)  # room for a wrong extra change (a replayed boundary, the old cut)
    changes = link.state.changes()
    link.stop()
    old = [ch for ch in changes if ch["params"] == cut.to_dict()]
    new = [ch for ch in changes if ch["params"] != cut.to_dict()]
    # the old cut fires only if this thread was descheduled past it before replacing
    assert all(link.state.t_start + ch["t_s"] <= t_replaced for ch in old), (old, t_replaced)
    assert len(old) <= 1 and [ch["params"] for ch in new] == [b.to_dict()], changes
    assert _due(link, new[0]) >= t1 and 0 <= new[0]["lag_ms"] < LAG_LIVENESS_S * 1e3


def test_schedule_driver_samples_functions_without_falling_behind() -> None:
    poll_s, apply_s, play_s = 0.01, 0.03, 0.6
    # a new value at every sample, and applying one takes 3 sampling periods
    sched = LinkSchedule(lambda t: LinkParams(latency_ms=round(t / poll_s)), poll_s=poll_s)
    link = MemoryLink(LinkParams(), apply_s=apply_s)
    link.start()
    t0 = time.monotonic()
    link.run_schedule(sched, t0)
    wait_for(
        lambda: len(link.state.changes()) >= 5 and time.monotonic() >= t0 + play_s,
        "5 changes and the play time",
    )
    link.stop()
    t_end = time.monotonic()
    changes = link.state.changes()
    assert 5 <= len(changes) <= (t_end - t0) / apply_s + 1  # each apply takes apply_s
    previous_applied = t0
    for ch in changes:  # each value is the schedule's at its due time on the poll grid
        due = _due(link, ch)
        k = (due - t0) / poll_s
        assert abs(k - round(k)) < 1e-6 and ch["params"]["latency_ms"] == round(k)
        assert ch["lag_ms"] >= apply_s * 1e3 - FLOAT_TOL  # the lag includes the apply
        # not falling behind: the next sample is one due after the previous apply
        # returned; a driver that replays the missed samples has it due before
        assert due >= previous_applied - FLOAT_TOL, (ch, previous_applied)
        previous_applied = link.state.t_start + ch["t_s"]
    print("function lags (ms):", [round(ch["lag_ms"], 1) for ch in changes])

    def broken(t_s: float) -> LinkParams:
        return None  # type: ignore[return-value]

    link = MemoryLink(LinkParams())
    link.run_schedule(LinkSchedule(broken, poll_s=poll_s), time.monotonic())
    wait_for(lambda: not link.driver.running, "the driver stopped on the error")
    assert isinstance(link.driver.error, TypeError)


def test_proxy_manual_and_scheduled_partitions_share_one_clock() -> None:
    open_, cut = LinkParams(latency_ms=2), LinkParams(latency_ms=2, partitioned=True)
    with proxied(echo, open_) as (proxy, port, _s):
        c = socket.create_connection(("127.0.0.1", port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.settimeout(LIVENESS_S)
        c.sendall(b"a")
        assert recv_exact(c, 1) == b"a"
        t0 = time.monotonic()
        proxy.run_schedule(LinkSchedule([(0.0, open_), (0.2, cut), (0.5, open_)]), t0)
        wait_for(lambda: len(proxy.counters()["changes"]) >= 1, "the scheduled partition")
        manual_on = stamped(lambda: proxy.partition(True))  # manual, over the scheduled one
        wait_for(lambda: len(proxy.counters()["changes"]) >= 2, "the schedule's heal")
        held = proxy.counters()  # the schedule healed; the manual partition holds
        c.sendall(b"b")
        time.sleep(0.1)
        c.setblocking(False)
        with pytest.raises(BlockingIOError):  # held while partitioned
            c.recv(1)
        c.settimeout(LIVENESS_S)
        manual_off = stamped(lambda: proxy.partition(False))
        assert recv_exact(c, 1) == b"b"
        c.close()
        counters = proxy.counters()
        origin = proxy._state.t_start  # what the changes' t_s count from
    assert held["partition"] == "blackhole" and held["params"]["partitioned"] is False
    assert counters["partition"] is None
    assert [ch["params"]["partitioned"] for ch in counters["changes"]] == [True, False]
    (cut_due, cut_applied), (heal_due, heal_applied) = map(switch_window, counters["changes"])
    on_a, on_b = (t - origin for t in manual_on)
    off_a, off_b = (t - origin for t in manual_off)
    # one clock: the union of the scheduled and the manual partitions (they overlap),
    # not their sum; each switch lies between its due/applied times or call stamps
    lo = union_s((cut_applied, heal_due), (on_b, off_a))
    hi = union_s((cut_due, heal_applied), (on_a, off_b))
    assert lo - FLOAT_TOL <= counters["partitioned_s"] <= hi + FLOAT_TOL, (lo, hi, counters)


# -- proxy: accuracy -------------------------------------------------------------------
@pytest.mark.parametrize("direction", ["up", "down"])
def test_proxy_bandwidth_accuracy(direction: str) -> None:
    params = LinkParams(bandwidth_mbps=20, latency_ms=10)
    size = 1_500_000  # 0.6 s at 20 Mbps
    data = payload(size)
    rate = params.rate_bytes_per_s
    assert rate is not None
    at_cap_s = (size - burst_bytes(params)) / rate  # the bytes, less a full bucket
    if direction == "up":
        with proxied(Sink(), params) as (_, port, _s):
            dt, digest = send_all(port, data)
        assert digest == hashlib.sha256(data).digest()
        # the handshake's RTT, the bytes at the cap, the last byte's and the digest's way
        floor, ideal = params.rtt_s + at_cap_s + params.rtt_s, size / rate + 2 * params.rtt_s
    else:

        def source(conn: socket.socket) -> None:
            conn.sendall(data)

        with proxied(source, params) as (proxy, port, _s):
            t0 = time.monotonic()  # before the connect: the server sends on accept
            c = socket.create_connection(("127.0.0.1", port))
            got = recv_exact(c, size)
            dt = time.monotonic() - t0
            c.close()
            assert got == data and proxy.counters()["bytes_down"] == size
        floor, ideal = at_cap_s + params.latency_ms / 1e3, size / rate + params.latency_ms / 1e3
    print(f"bandwidth {direction}: {dt:.3f} s, {dt / ideal - 1:+.1%} of ideal")
    assert dt >= floor, (dt, floor)  # never faster than the cap allows


def test_proxy_latency_and_handshake() -> None:
    params = LinkParams(latency_ms=40)
    with proxied(echo, params) as (_, port, _s):
        t0 = time.monotonic()
        c = socket.create_connection(("127.0.0.1", port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.settimeout(LIVENESS_S)
        c.sendall(b"ping")
        assert recv_exact(c, 4) == b"ping"
        first = time.monotonic() - t0  # handshake RTT + request RTT
        rtts = []
        for i in range(8):
            t = time.monotonic()
            c.sendall(b"%04d" % i)
            assert recv_exact(c, 4) == b"%04d" % i
            rtts.append(time.monotonic() - t)
        c.close()
    print(f"first exchange {first * 1e3:.1f} ms (2 RTT: {2 * params.rtt_s * 1e3:.0f} ms)")
    assert first >= 2 * params.rtt_s - CLOCK_SLACK_S, first  # the emulated handshake
    assert_rtt_floor(rtts, params.rtt_s)


def test_proxy_jitter_keeps_order_and_spreads_delay() -> None:
    params = LinkParams(latency_ms=30, jitter_ms=20)
    arrivals: list[tuple[float, bytes]] = []

    def record(conn: socket.socket) -> None:
        buf = b""
        while data := conn.recv(4096):
            buf += data
            while len(buf) >= 8:
                arrivals.append((time.monotonic(), buf[:8]))
                buf = buf[8:]

    with proxied(record, params) as (_, port, _s):
        c = socket.create_connection(("127.0.0.1", port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        time.sleep(params.rtt_s + 0.01)  # past the emulated handshake
        sent = []
        for i in range(60):
            sent.append(time.monotonic())
            c.sendall(b"%08d" % i)
            time.sleep(0.01)
        wait_for(lambda: len(arrivals) >= 60, "every message delivered")
        c.close()
    assert [m for _, m in arrivals] == [b"%08d" % i for i in range(60)]  # intact, in order
    delays = [ta - ts for (ta, _), ts in zip(arrivals, sent, strict=True)]
    print(f"jitter: delays {min(delays) * 1e3:.1f}..{max(delays) * 1e3:.1f} ms (10..50)")
    # never under latency - jitter; spread by the jitter (load only adds to a delay)
    assert min(delays) >= (params.latency_ms - params.jitter_ms) / 1e3 - CLOCK_SLACK_S
    assert max(delays) - min(delays) > 0.015  # jitter is there


# -- proxy: partitions -----------------------------------------------------------------
def test_proxy_blackhole_partition_holds_traffic_and_loses_nothing() -> None:
    sink = Sink()
    params = LinkParams(bandwidth_mbps=16)
    data = payload(2_400_000)  # 1.2 s at 16 Mbps, plus a 0.9 s partition
    half = len(data) // 2
    partitioned = threading.Event()
    result: dict[str, object] = {}

    def send(port: int) -> None:  # the second half only once the partition is on
        t_begin = time.monotonic()
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.sendall(data[:half])
            partitioned.wait(LIVENESS_S)
            c.sendall(data[half:])
            c.shutdown(socket.SHUT_WR)
            result["digest"] = recv_exact(c, 32)
        result["dt"] = time.monotonic() - t_begin

    with proxied(sink, params) as (proxy, port, _s):
        sender = threading.Thread(target=send, args=(port,), daemon=True)
        sender.start()
        wait_for(lambda: proxy.counters()["bytes_up"] >= 400_000, "the transfer under way")
        on = stamped(lambda: proxy.partition(True))
        partitioned.set()
        time.sleep(0.1)
        before = proxy.counters()["bytes_up"]
        time.sleep(0.8)
        read = time.monotonic()
        during = proxy.counters()
        read_end = time.monotonic()
        off = stamped(lambda: proxy.partition(False))
        sender.join(LIVENESS_S)
        after = proxy.counters()
    assert not sender.is_alive(), "the transfer did not finish after the heal"
    assert during["bytes_up"] == before >= 400_000  # traffic stopped
    # partitioned from its start (between the stamps around the call) to each reading
    assert during["partition"] == "blackhole" and after["partition"] is None
    assert read - on[1] - FLOAT_TOL <= during["partitioned_s"] <= read_end - on[0] + FLOAT_TOL
    assert off[0] - on[1] - FLOAT_TOL <= after["partitioned_s"] <= off[1] - on[0] + FLOAT_TOL
    # The sink may read late what was forwarded before the partition (its thread waits
    # for the GIL on a loaded host); nothing forwarded after it may arrive before the heal.
    assert all(n <= before for t, n in sink.timeline if t < off[0])
    assert result["digest"] == hashlib.sha256(data).digest()  # nothing lost, same connection
    assert after["connections"] == 1 and after["bytes_up"] == len(data)
    # never faster than the cap over the open time, the partition adding its whole span;
    # the bucket may pass a burst after each idle time (the start, the partition)
    rate = params.rate_bytes_per_s
    assert rate is not None
    dt = result["dt"]
    assert isinstance(dt, float)
    floor = (len(data) - 3 * burst_bytes(params)) / rate + (off[0] - on[1])
    print(f"blackhole: {dt:.3f} s, floor {floor:.3f} s")
    assert dt >= floor, (dt, floor)


def test_proxy_refuse_partition_resets_and_refuses_then_heals() -> None:
    with proxied(echo, LinkParams(), resets_expected=True) as (proxy, port, _s):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(b"hello")
        assert recv_exact(c, 5) == b"hello"
        on = stamped(lambda: proxy.partition(True, mode="refuse"))
        with pytest.raises(ConnectionResetError):  # the client sees the reset
            c.sendall(b"x")
            c.recv(1)
        c.close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=LIVENESS_S)
        off = stamped(lambda: proxy.partition(False))
        with socket.create_connection(("127.0.0.1", port)) as c2:
            c2.sendall(b"again")
            assert recv_exact(c2, 5) == b"again"
        counters = proxy.counters()
    assert counters["resets"] >= 1
    assert off[0] - on[1] - FLOAT_TOL <= counters["partitioned_s"] <= off[1] - on[0] + FLOAT_TOL


# -- proxy: changes over time ----------------------------------------------------------
def test_proxy_schedule_change_mid_transfer() -> None:
    sink = Sink()
    slow, fast = LinkParams(bandwidth_mbps=2), LinkParams(bandwidth_mbps=40)
    data = payload(2_250_000)  # 0.25 MB in the first second, 2 MB at 5 MB/s after
    slow_rate, fast_rate = slow.rate_bytes_per_s, fast.rate_bytes_per_s
    assert slow_rate is not None and fast_rate is not None
    with proxied(sink, slow) as (proxy, port, _s):
        t0 = time.monotonic()
        proxy.run_schedule(LinkSchedule([(0.0, slow), (1.0, fast)]), t0)
        _, digest = send_all(port, data)
        t_done = time.monotonic()
        changes = proxy.counters()["changes"]
    assert digest == hashlib.sha256(data).digest()
    assert [ch["params"] for ch in changes] == [fast.to_dict()]
    assert 0 <= changes[0]["lag_ms"] < LAG_LIVENESS_S * 1e3, changes
    due = t0 + 1.0  # the rate switched no earlier (then, or at a late driver's join)
    print(f"change mid-transfer: done at {t_done - t0:.3f} s, lag {changes[0]['lag_ms']:.1f} ms")
    # before the change, what reached the server never beat the slow cap
    cap = burst_bytes(slow)
    assert all(n <= slow_rate * (t - t0) + cap for t, n in sink.timeline if t <= due)
    # nor the whole transfer the caps: slow until the change, fast after it
    rest = len(data) - slow_rate * 1.0 - burst_bytes(slow) - burst_bytes(fast)
    assert t_done - t0 >= 1.0 + rest / fast_rate, t_done - t0
    # and the 40 Mbps segment was applied: at 2 Mbps throughout it would take 9 s
    assert t_done - t0 < (len(data) - burst_bytes(slow)) / slow_rate, t_done - t0


def test_proxy_function_schedule_partitions_and_records_lag() -> None:
    sat = satellite_pass(period_s=0.6, visible_s=0.3, min_latency_ms=1, max_latency_ms=5,
                         peak_bandwidth_mbps=50, edge_bandwidth_mbps=5, poll_s=0.02)  # fmt: skip
    with proxied(echo, LinkParams()) as (proxy, port, _s):
        proxy.run_schedule(sat, time.monotonic())
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.settimeout(LIVENESS_S)
            for i in range(20):  # every echo completes, partitions only delay
                c.sendall(b"%03d" % i)
                assert recv_exact(c, 3) == b"%03d" % i
                time.sleep(0.05)
        wait_for(lambda: heals(proxy.counters()["changes"]) >= 1, "a pass's partition healed")
    counters = proxy.counters()  # stopped: partitioned_s and uptime_s no longer move
    changes = counters["changes"]
    lags = [ch["lag_ms"] for ch in changes]
    print(f"satellite pass: {len(lags)} changes, lag max {max(lags):.1f} ms")
    assert len(lags) >= 3 and all(0 <= lag < LAG_LIVENESS_S * 1e3 for lag in lags), lags
    # the partitioned time is the recorded partitions' (between their switch windows)
    lo, hi = partitioned_bounds(changes, end_s=counters["uptime_s"])
    assert counters["partitioned_s"] > 0
    assert lo - FLOAT_TOL <= counters["partitioned_s"] <= hi + FLOAT_TOL, (lo, hi, counters)


# -- proxy: loss -----------------------------------------------------------------------
def test_proxy_loss_is_retransmission_stall_not_corruption() -> None:
    params = LinkParams(latency_ms=5, loss_pct=5.0)
    data = payload(1_448_000)  # 1000 segments -> 50 expected losses
    with proxied(Sink(), params) as (proxy, port, _s):
        _, digest = send_all(port, data)
        c = proxy.counters()
    assert digest == hashlib.sha256(data).digest()  # TCP loses nothing
    n = 1000 + 1  # + the digest's segment
    expected, sigma = n * 0.05, (n * 0.05 * 0.95) ** 0.5
    assert abs(c["loss_events"] - expected) < 4 * sigma, c["loss_events"]
    assert c["stalled_s"] >= c["loss_events"] * params.rtt_s * 0.99
    assert c["resets"] == 0


def test_proxy_loss_tail_drop_costs_an_rto() -> None:
    params = LinkParams(latency_ms=5, loss_pct=30.0)
    with proxied(echo, params) as (proxy, port, _s):
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.settimeout(LIVENESS_S)
            times = []
            for i in range(20):
                t = time.monotonic()
                c.sendall(b"%03d" % i)
                assert recv_exact(c, 3) == b"%03d" % i
                times.append(time.monotonic() - t)
        events = proxy.counters()["loss_events"]
    slow = [t for t in times if t > params.rtt_s + RTO_MIN_S - 0.01]
    assert events >= 3
    # single-segment messages: every loss is a tail loss and costs an RTT plus an RTO on
    # top of its exchange's RTT (load only adds), and an exchange holds two segments
    floor = len(times) * params.rtt_s + events * (params.rtt_s + RTO_MIN_S) - CLOCK_SLACK_S
    assert sum(times) >= floor, (times, events)
    assert len(slow) >= math.ceil(events / 2), (times, events)


# -- proxy: HTTP keep-alive and concurrency (the Flower SuperNode -> SuperLink case) ----
def test_proxy_http_keepalive_many_concurrent_connections() -> None:
    httpx = pytest.importorskip("httpx")
    uvicorn = pytest.importorskip("uvicorn")

    async def app(scope, receive, send) -> None:  # noqa: ANN001 - plain ASGI
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": hashlib.sha256(body).digest()})

    sock = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="error", lifespan="off", timeout_keep_alive=30)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    proxy = ShapingProxy("http", "127.0.0.1", sock.getsockname()[1], LinkParams(latency_ms=2))
    port = proxy.start()

    async def run() -> list[bool]:
        limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
        base, timeout = f"http://127.0.0.1:{port}", httpx.Timeout(LIVENESS_S)  # not 5 s
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=timeout) as cl:

            async def one(i: int) -> bool:
                body = payload(1000 + 97 * i, seed=i)
                r = await cl.post("/x", content=body)
                return r.status_code == 200 and r.content == hashlib.sha256(body).digest()

            return await asyncio.gather(*(one(i) for i in range(300)))

    try:
        wait_for(lambda: server.started, "uvicorn started", every_s=0.02)
        ok = asyncio.run(run())
        counters = proxy.counters()
    finally:
        proxy.stop()
        server.should_exit = True
        thread.join(LIVENESS_S)
    assert all(ok) and len(ok) == 300
    assert 2 <= counters["connections"] <= 16  # concurrent, and reused (keep-alive)
    assert counters["resets"] == 0 and counters["bytes_up"] > 300 * 1000


def test_proxy_half_close_and_reset_propagate() -> None:
    def reply_after_eof(conn: socket.socket) -> None:
        got = b""
        while data := conn.recv(1024):
            got += data
        conn.sendall(got[::-1])  # client half-closed; server still sends

    with proxied(reply_after_eof, LinkParams(latency_ms=5)) as (_, port, _s):
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.sendall(b"abcdef")
            c.shutdown(socket.SHUT_WR)
            assert recv_exact(c, 6) == b"fedcba" and c.recv(1) == b""

    def rst(conn: socket.socket) -> None:
        conn.recv(1)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")

    with proxied(rst, LinkParams()) as (proxy, port, _s):
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.sendall(b"x")
            with pytest.raises(ConnectionResetError):
                c.settimeout(LIVENESS_S)
                c.recv(1)
        assert proxy.counters()["resets"] == 1


# -- netem mode ------------------------------------------------------------------------
def _netem_support() -> dict:
    from testbed.emulation.netem import support

    return support()


netem_only = pytest.mark.skipif(
    not _netem_support()["ok"], reason=f"netem mode unavailable: {_netem_support()['reason']}"
)


@contextlib.contextmanager
def netem_link(params: LinkParams, handler: Callable[[socket.socket], None], index: int):
    from testbed.emulation.netem import NetemLink, in_netns

    link = NetemLink(f"t{os.getpid() % 10000}-{index}", params, index=200 + index)
    addr = link.start()
    try:
        with in_netns(link.server_netns):
            sock = socket.create_server((addr, 0))
        server = Server(handler, sock)

        def client() -> socket.socket:
            with in_netns(link.client_netns):
                return socket.socket()

        yield link, addr, server.port, client
        server.close()
        assert not server.errors, server.errors
    finally:
        link.stop()
    import subprocess

    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert link.router_netns not in names and link.client_netns not in names  # cleaned up


def echo_rtts(c: socket.socket, n: int) -> list[float]:
    """``n`` two-byte echoes on ``c``, one at a time; their round-trip times."""
    out = []
    for i in range(n):
        t = time.monotonic()
        c.sendall(b"%02d" % i)
        assert recv_exact(c, 2) == b"%02d" % i
        out.append(time.monotonic() - t)
    return out


def rtts_until_below(c: socket.socket, rtts: list[float], below_s: float) -> list[float]:
    """More echoes until one is faster than ``below_s`` (load may slow a few of them; a
    liveness wait), or LIVENESS_S passed; ``rtts`` with the new ones."""
    deadline = time.monotonic() + LIVENESS_S
    while min(rtts) >= below_s and time.monotonic() < deadline:
        rtts = rtts + echo_rtts(c, 1)
    return rtts


@netem_only
def test_netem_bandwidth_and_counters() -> None:
    data = payload(1_500_000)
    params = LinkParams(bandwidth_mbps=20)
    with netem_link(params, Sink(), 1) as (link, addr, port, client):
        dt, digest = send_all(port, data, host=addr, sock=client())
        c = link.counters()
    assert digest == hashlib.sha256(data).digest()
    rate = params.rate_bytes_per_s
    assert rate is not None
    print(f"netem bandwidth: {dt:.3f} s, {dt / (len(data) / rate) - 1:+.1%} of ideal")
    assert dt >= len(data) / rate * (1 - NETEM_RATE_SLACK), dt  # never faster than the cap
    assert c["bytes_up"] > len(data) and c["connections"] == 1 and c["packets_up"] > 1000


@netem_only
def test_netem_latency_and_change() -> None:
    if _netem_support()["delay_engine"] is None:
        pytest.skip("no sch_netem and no NFQUEUE on this kernel: latency unavailable")
    with netem_link(LinkParams(latency_ms=30), echo, 2) as (link, addr, port, client):
        c = client()
        c.connect((addr, port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.settimeout(LIVENESS_S)
        first = echo_rtts(c, 5)
        link.set_params(LinkParams(latency_ms=10))  # same connection, new delay
        second = rtts_until_below(c, echo_rtts(c, 5), 0.06 - CLOCK_SLACK_S)
        c.close()
    assert_rtt_floor(first, 0.06)
    assert_rtt_floor(second, 0.02)
    assert min(second) < 0.06 - CLOCK_SLACK_S, second  # the shorter delay took effect


@netem_only
def test_netem_loss_partition_and_refuse() -> None:
    sink = Sink()
    data = payload(1_000_000)
    params = LinkParams(bandwidth_mbps=40, loss_pct=2.0)
    with netem_link(params, sink, 3) as (link, addr, port, client):
        result: dict[str, tuple[float, bytes]] = {}
        s = client()
        sender = threading.Thread(
            target=lambda: result.update(r=send_all(port, data, addr, s)), daemon=True
        )
        on = stamped(lambda: link.partition(True))  # blackhole from the start: the SYN waits
        sender.start()
        wait_for(lambda: link.counters()["dropped_partition"] >= 1, "the SYN dropped", 0.05)
        time.sleep(max(0.0, on[1] + 0.6 - time.monotonic()))
        held = link.counters()
        off = stamped(lambda: link.partition(False))
        sender.join(LIVENESS_S)  # SYN retransmissions back off: 1 s, 3 s, 7 s, ...
        c = link.counters()
        link.partition(True, mode="refuse")
        with pytest.raises(ConnectionRefusedError):
            sock = client()
            sock.settimeout(LIVENESS_S)
            sock.connect((addr, port))
        sock.close()
    assert "r" in result, "the transfer did not finish after the heal"
    _, digest = result["r"]
    assert digest == hashlib.sha256(data).digest()  # real drops, TCP retransmitted
    # nothing crossed before the heal began (the sink stamps after its read)
    assert held["dropped_partition"] >= 1 and sink.timeline[0][0] > off[0]
    assert c["dropped_loss_up"] + c["dropped_loss_down"] >= 3
    assert off[0] - on[1] - FLOAT_TOL <= c["partitioned_s"] <= off[1] - on[0] + FLOAT_TOL


@netem_only
def test_netem_follows_a_schedule_through_the_shared_driver() -> None:
    if _netem_support()["delay_engine"] is None:
        pytest.skip("no sch_netem and no NFQUEUE on this kernel: latency unavailable")
    slow, fast = LinkParams(latency_ms=30), LinkParams(latency_ms=5)
    cut = LinkParams(latency_ms=5, partitioned=True)
    with netem_link(slow, echo, 4) as (link, addr, port, client):
        assert isinstance(link, Link) and link.connect_address(port) == f"{addr}:{port}"
        c = client()
        host, p = link.connect_address(port).rsplit(":", 1)
        c.connect((host, int(p)))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.settimeout(LIVENESS_S)

        def recorded() -> int:  # what counters()["changes"] reports, without its ip/tc calls
            return len(link._state.changes())

        before = echo_rtts(c, 4)  # the link's own parameters (slow), no schedule yet
        t0 = time.monotonic()
        link.run_schedule(LinkSchedule([(0.0, slow), (0.6, fast), (1.0, cut), (1.3, fast)]), t0)
        wait_for(lambda: recorded() >= 1, "the 5 ms segment")
        after = echo_rtts(c, 5)
        wait_for(lambda: recorded() >= 2, "the partition")
        held = link.counters()
        wait_for(lambda: recorded() >= 3, "the heal")
        healed = echo_rtts(c, 3)  # the same connection survived the blackhole
        fast_rtts = rtts_until_below(c, after + healed, 0.06 - CLOCK_SLACK_S)
        counters = link.counters()
        c.close()
    assert_rtt_floor(before, 0.06)
    assert_rtt_floor(fast_rtts, 0.01)
    assert min(fast_rtts) < 0.06 - CLOCK_SLACK_S, fast_rtts  # the 5 ms segments took effect
    # read while the cut was the last change: blackholed (a reading after the heal is not)
    assert len(held["changes"]) != 2 or held["partition"] == "blackhole", held
    assert counters["partition"] is None
    changes = counters["changes"]
    assert [ch["params"] for ch in changes] == [p.to_dict() for p in (fast, cut, fast)]
    lags = [ch["lag_ms"] for ch in changes]
    print("netem schedule lags (ms):", [round(lag, 1) for lag in lags])
    assert all(0 <= lag < LAG_LIVENESS_S * 1e3 for lag in lags), lags
    lo, hi = partitioned_bounds(changes)
    assert lo - FLOAT_TOL <= counters["partitioned_s"] <= hi + FLOAT_TOL, (lo, hi, counters)


def test_teardown_of_a_blackholed_link_prints_no_traceback(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Connections held by a partition (waiting in ``wait_open``) are cancelled when the
    link stops; that is the end of a run, not an error: nothing may be logged (issue 31
    saw 16 CancelledError tracebacks before a run's summary)."""
    server = Server(lambda c: None)
    proxy = ShapingProxy("held", "127.0.0.1", server.port, LinkParams(partitioned=True))
    port = proxy.start()
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
    wait_for(lambda: proxy._shaper.connections >= len(clients), "the four accepted")
    assert proxy._shaper.connections == len(clients)  # all four held by the blackhole
    with caplog.at_level("DEBUG", logger="asyncio"):
        proxy.stop()
    for c in clients:
        c.close()
    server.close()
    err = capfd.readouterr().err
    logged = [r.getMessage() for r in caplog.records if r.levelname in ("ERROR", "WARNING")]
    assert "Traceback" not in err and "CancelledError" not in err, err
    assert logged == [], logged
