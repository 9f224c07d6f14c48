"""Userspace shaping proxy: one TCP link emulated by an asyncio relay (no privileges).

The proxy listens on ``listen_host:listen_port``; each accepted connection is relayed to
``target_host:target_port`` through two *pipes* (up: client -> server, down: server ->
client). Each pipe applies, in this order (see docs/links.md):

1. partition (blackhole): nothing is read or delivered while partitioned;
2. bandwidth: a token bucket per link and direction, shared by all its connections;
3. loss: TCP-equivalent retransmission stalls (head-of-line blocking of the byte stream);
4. latency and jitter: every chunk gets a release time ``now + latency + U(+-jitter)``,
   never earlier than the previous chunk's (order kept), and a writer delivers it then.

Connections start one RTT late (the emulated TCP handshake). Half-close (EOF) is
forwarded with ``shutdown(SHUT_WR)``; a reset on either side resets the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable

from testbed.emulation.link import MSS_BYTES, LinkParams, LinkSchedule

#: Linux's minimum retransmission timeout, in seconds (``TCP_RTO_MIN``).
RTO_MIN_S = 0.2
#: Longest single sleep of a shaper, in seconds: parameter changes take effect within it.
MAX_WAIT_S = 0.02
#: Chunk size in seconds of the current rate (bounded by [MSS, 64 KiB] bytes).
BURST_S = 0.005
#: Token bucket depth in seconds of the current rate (at least two chunks).
DEPTH_S = 0.02
_UNLIMITED_READ = 256 * 1024
_STREAM_LIMIT = 1 << 20
PARTITION_MODES = ("blackhole", "refuse")
UP, DOWN = "up", "down"


class _Bucket:
    """Token bucket in bytes; tokens may go negative (debt) and are paid back by waiting.

    Chunks are ``BURST_S`` of the rate; the depth is ``DEPTH_S`` of the rate (at least two
    chunks), so a late wake-up of the event loop (CPU contention) costs no rate. The
    bucket starts empty: a fresh link has no initial burst.
    """

    def __init__(self, rate_bytes_per_s: float | None, now: float) -> None:
        self.rate: float | None = None
        self.chunk = MSS_BYTES
        self.depth = 2.0 * MSS_BYTES
        self.tokens = 0.0
        self.t = now
        self.set_rate(rate_bytes_per_s, now)

    def _refill(self, now: float) -> None:
        if self.rate is not None:
            self.tokens = min(self.depth, self.tokens + (now - self.t) * self.rate)
        self.t = now

    def set_rate(self, rate_bytes_per_s: float | None, now: float) -> None:
        self._refill(now)
        self.rate = rate_bytes_per_s
        if rate_bytes_per_s is None:
            self.tokens = 0.0
            return
        self.chunk = int(min(max(rate_bytes_per_s * BURST_S, MSS_BYTES), 65536))
        self.depth = max(rate_bytes_per_s * DEPTH_S, 2.0 * self.chunk)
        self.tokens = min(self.tokens, self.depth)

    async def consume(self, n: int, loop: asyncio.AbstractEventLoop) -> None:
        """Take ``n`` bytes; return once the bucket is out of debt at the current rate."""
        self._refill(loop.time())
        if self.rate is None:
            return
        self.tokens -= n
        while self.rate is not None and self.tokens < 0:
            await asyncio.sleep(min(-self.tokens / self.rate, MAX_WAIT_S))
            self._refill(loop.time())

    def read_size(self) -> int:
        return _UNLIMITED_READ if self.rate is None else self.chunk


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close ``writer``'s socket with a TCP reset (SO_LINGER 0)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Pipe:
    """One direction of one relayed connection."""

    def __init__(
        self,
        proxy: ShapingProxy,
        conn: _Conn,
        direction: str,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
    ) -> None:
        self.proxy, self.conn, self.direction = proxy, conn, direction
        self.src, self.dst = src, dst
        self.queue: deque[tuple[float, bytes | None]] = deque()
        self.queued = 0
        self.has_data = asyncio.Event()
        self.has_space = asyncio.Event()
        self.last_release = 0.0
        self.to_next_loss = 0
        self.loss_version = -1
        self.done = False

    # -- loss model ------------------------------------------------------------------
    def _loss_stall_s(self, n_bytes: int, drained: bool, params: LinkParams) -> float:
        """Modelled retransmission time for the segments in one chunk, in seconds."""
        p = params.loss_pct / 100.0
        if p <= 0:
            return 0.0
        rng = self.proxy._rng
        if self.loss_version != self.proxy._version:
            self.loss_version = self.proxy._version
            self.to_next_loss = 0
        n_seg = max(1, math.ceil(n_bytes / MSS_BYTES))
        stall, seg = 0.0, 0
        while True:
            if self.to_next_loss <= 0:
                u = 1.0 - rng.random()
                self.to_next_loss = int(math.log(u) / math.log1p(-p)) + 1
            if seg + self.to_next_loss > n_seg:
                self.to_next_loss -= n_seg - seg
                return stall
            seg += self.to_next_loss
            self.to_next_loss = 0
            rtt = params.rtt_s + params.jitter_ms / 1000.0
            tail = drained and seg == n_seg
            stall += rtt + RTO_MIN_S if tail else max(rtt, 0.001)
            self.proxy._loss_events += 1

    # -- relay -----------------------------------------------------------------------
    async def read_loop(self) -> None:
        proxy, loop = self.proxy, asyncio.get_running_loop()
        bucket = proxy._buckets[self.direction]
        try:
            if self.direction == UP:  # emulated TCP handshake: the client may send after 1 RTT
                await asyncio.sleep(max(0.0, self.conn.t_open + proxy._params.rtt_s - loop.time()))
            while True:
                await proxy._open.wait()
                size = bucket.read_size()
                data = await self.src.read(size)
                if not data:
                    self._push(loop.time(), None)
                    return
                await bucket.consume(len(data), loop)
                await proxy._open.wait()
                params = proxy._params
                now = loop.time()
                # nothing more waiting to be sent: a loss here is a tail loss (no dup-ACKs)
                drained = len(data) < size and not getattr(self.src, "_buffer", b"")
                stall = self._loss_stall_s(len(data), drained, params)
                proxy._stalled_s += stall
                jitter = params.jitter_ms * (2.0 * proxy._rng.random() - 1.0)
                delay = max(0.0, params.latency_ms + jitter) / 1000.0
                # head-of-line blocking: a lost segment arrives one retransmission later;
                # later chunks wait behind it but are not shifted further (SACK recovery)
                release = max(now + delay + stall, self.last_release)
                self.last_release = release
                self._push(release, data)
                while self.queued > proxy._queue_limit():
                    self.has_space.clear()
                    await self.has_space.wait()
        except (ConnectionError, OSError):
            self.conn.reset()

    def _push(self, release: float, data: bytes | None) -> None:
        self.queue.append((release, data))
        self.queued += len(data) if data else 0
        self.has_data.set()

    async def write_loop(self) -> None:
        proxy, loop = self.proxy, asyncio.get_running_loop()
        try:
            while True:
                while not self.queue:
                    self.has_data.clear()
                    await self.has_data.wait()
                release, data = self.queue[0]
                while (wait := release - loop.time()) > 0:
                    await asyncio.sleep(wait)
                await proxy._open.wait()
                self.queue.popleft()
                if data is None:
                    if self.dst.can_write_eof():
                        self.dst.write_eof()
                    self.done = True
                    self.conn.maybe_close()
                    return
                self.queued -= len(data)
                self.has_space.set()
                self.dst.write(data)
                proxy._count(self.direction, len(data))
                await self.dst.drain()
        except (ConnectionError, OSError):
            self.conn.reset()


class _Conn:
    """One relayed connection: two pipes and their four tasks."""

    def __init__(self, proxy: ShapingProxy, t_open: float) -> None:
        self.proxy = proxy
        self.t_open = t_open
        self.writers: list[asyncio.StreamWriter] = []
        self.pipes: list[_Pipe] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.closed = False

    def maybe_close(self) -> None:
        if self.pipes and all(p.done for p in self.pipes):
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for w in self.writers:
            w.close()
        self._finish()

    def reset(self) -> None:
        """Reset both sides (RST) and stop relaying."""
        if self.closed:
            return
        self.closed = True
        self.proxy._resets += 1
        for w in self.writers:
            _rst(w)
        self._finish()

    def _finish(self) -> None:
        self.proxy._conns.discard(self)
        current = asyncio.current_task()
        for t in self.tasks:
            if t is not current:
                t.cancel()


class ShapingProxy:
    """An emulated link between a client and one TCP server, as a userspace relay.

    Parameters
    ----------
    name
        Link name (for counters and logs).
    target_host, target_port
        The server the link leads to.
    params
        Initial link parameters.
    listen_host, listen_port
        Where clients connect; port 0 picks a free port (returned by :meth:`start`).
    seed
        Seed of the link's random source (jitter and loss).
    """

    def __init__(
        self,
        name: str,
        target_host: str,
        target_port: int,
        params: LinkParams,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        seed: int = 0,
    ) -> None:
        if not isinstance(params, LinkParams):
            raise ValueError(f"params: expected LinkParams, got {type(params).__name__}")
        self.name = name
        self.target = (target_host, int(target_port))
        self.listen_host = listen_host
        self.listen_port = int(listen_port)
        self.seed = seed
        self._params = params
        self._version = 0
        self._rng = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._buckets: dict[str, _Bucket] = {}
        self._open: asyncio.Event | None = None  # type: ignore[assignment]
        self._manual_partition: str | None = None
        self._partition_since: float | None = None
        self._partitioned_s = 0.0
        self._stalled_s = 0.0
        self._loss_events = 0
        self._resets = 0
        self._refused = 0
        self._bytes = {UP: 0, DOWN: 0}
        self._connections = 0
        self._t_start = 0.0
        self._schedule_task: asyncio.Task[None] | None = None
        self._schedule_handles: list[asyncio.TimerHandle] = []
        self._changes: list[dict[str, object]] = []

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> int:
        """Start the relay in its own event loop (daemon thread).

        Returns
        -------
        int
            The bound listen port.
        """
        if self._thread is not None:
            raise RuntimeError(f"link {self.name!r}: already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=loop.run_forever, name=f"link-{self.name}", daemon=True
        )
        self._thread.start()
        self.listen_port = self._call(self._astart())
        return self.listen_port

    async def _astart(self) -> int:
        loop = asyncio.get_running_loop()
        self._t_start = loop.time()
        self._open = asyncio.Event()
        self._buckets = {d: _Bucket(self._params.rate_bytes_per_s, loop.time()) for d in (UP, DOWN)}
        await self._listen()
        self._apply(self._params)
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._handle,
            self.listen_host,
            self.listen_port,
            reuse_address=True,
            limit=_STREAM_LIMIT,
            backlog=512,
        )
        self.listen_port = int(self._server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        """Close the listener and every connection, and end the loop thread."""
        if self._loop is None or self._thread is None:
            return
        with contextlib.suppress(Exception):
            self._call(self._astop(), timeout=5.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
        self._loop.close()
        self._loop = None
        self._thread = None

    async def _astop(self) -> None:
        self._cancel_schedule()
        if self._server is not None:
            self._server.close()
            self._server = None
        for conn in list(self._conns):
            conn.close()
        # also the handlers still connecting (not in conn.tasks): a task left pending
        # when the loop closes prints "Task was destroyed but it is pending!"
        others = asyncio.all_tasks() - {asyncio.current_task()}
        for t in others:
            t.cancel()
        if others:
            await asyncio.wait(others, timeout=2.0)

    def __enter__(self) -> ShapingProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- control (thread-safe) -------------------------------------------------------
    def _call(self, coro: object, timeout: float = 10.0):  # noqa: ANN202
        if self._loop is None:
            raise RuntimeError(f"link {self.name!r}: not started")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)  # type: ignore[arg-type]

    def _run_in_loop(self, fn: Callable[[], None]) -> None:
        if self._loop is None:
            raise RuntimeError(f"link {self.name!r}: not started")
        if self._thread is threading.current_thread():
            fn()
            return

        async def run() -> None:
            fn()

        self._call(run())

    def set_params(self, params: LinkParams) -> None:
        """Change the link's parameters; applies to every byte read from now on.

        Thread-safe; returns once the loop applied them (typically < 1 ms). Open
        connections are kept. Chunks already released into the delay line keep their
        release times (they are "in flight").
        """
        if not isinstance(params, LinkParams):
            raise ValueError(f"params: expected LinkParams, got {type(params).__name__}")
        if self._loop is None:
            self._params = params
            return
        self._run_in_loop(lambda: self._apply(params))

    def partition(self, on: bool, mode: str = "blackhole") -> None:
        """Partition the link (``on=True``) or heal it.

        Parameters
        ----------
        on
            Start (``True``) or end (``False``) the partition.
        mode
            ``"blackhole"``: nothing crosses, bytes are held, connections stay open (and
            new ones wait). ``"refuse"``: every open connection is reset (RST on both
            sides) and new connections are refused (ECONNREFUSED) until healed.
        """
        if mode not in PARTITION_MODES:
            raise ValueError(f"mode: must be one of {PARTITION_MODES}, got {mode!r}")
        self._call(self._apartition(on, mode))

    async def _apartition(self, on: bool, mode: str) -> None:
        previous = self._manual_partition
        self._manual_partition = mode if on else None
        if on and mode == "refuse":
            if self._server is not None:
                self._server.close()
                self._server = None
            for conn in list(self._conns):
                conn.reset()
        if previous == "refuse" and (not on or mode != "refuse") and self._server is None:
            await self._listen()
        self._update_open()

    def run_schedule(self, schedule: LinkSchedule, t0: float) -> None:
        """Follow ``schedule`` from origin ``t0`` (a ``time.monotonic()`` value).

        Segment changes are timed by the proxy's loop (``call_at``); a function schedule
        is sampled every ``schedule.poll_s`` and applied when it changes. The lag of each
        change (applied time - due time) is kept in ``counters()["changes"]``. A new call
        replaces the previous schedule.
        """

        async def install() -> None:
            self._cancel_schedule()
            loop = asyncio.get_running_loop()
            if schedule.is_piecewise:
                segments = schedule.segments
                now = loop.time()
                current = schedule.at(now - t0)
                if current != self._params:
                    self._apply(current, due=now)
                for start, params in segments:
                    if t0 + start > now:
                        h = loop.call_at(t0 + start, self._apply, params, t0 + start)
                        self._schedule_handles.append(h)
            else:
                self._schedule_task = loop.create_task(self._poll_schedule(schedule, t0))

        self._call(install())

    async def _poll_schedule(self, schedule: LinkSchedule, t0: float) -> None:
        loop = asyncio.get_running_loop()
        k = max(0, math.ceil((loop.time() - t0) / schedule.poll_s))
        while True:
            due = t0 + k * schedule.poll_s
            await asyncio.sleep(max(0.0, due - loop.time()))
            params = schedule.at(due - t0)
            if params != self._params:
                self._apply(params, due=due)
            k += 1

    def _cancel_schedule(self) -> None:
        for h in self._schedule_handles:
            h.cancel()
        self._schedule_handles.clear()
        if self._schedule_task is not None:
            self._schedule_task.cancel()
            self._schedule_task = None

    # -- counters --------------------------------------------------------------------
    def counters(self) -> dict:
        """Per-link counters.

        Returns
        -------
        dict
            ``bytes_up``/``bytes_down``: payload bytes delivered to the server/client;
            ``connections``: accepted in total; ``active_connections``;
            ``partitioned_s``: time partitioned (manual or scheduled), s;
            ``stalled_s``: modelled retransmission stall time summed over pipes, s;
            ``loss_events``: modelled lost segments; ``resets``: connections reset;
            ``refused``: upstream connects that failed; ``uptime_s``;
            ``partition``: current mode or ``None``; ``params``: current parameters;
            ``changes``: ``[{"t_s", "lag_ms", "params"}]`` of applied schedule changes.
        """
        now = time.monotonic()
        part = self._partitioned_s
        if self._partition_since is not None:
            part += now - self._partition_since
        return {
            "name": self.name,
            "bytes_up": self._bytes[UP],
            "bytes_down": self._bytes[DOWN],
            "connections": self._connections,
            "active_connections": len(self._conns),
            "partitioned_s": part,
            "stalled_s": self._stalled_s,
            "loss_events": self._loss_events,
            "resets": self._resets,
            "refused": self._refused,
            "uptime_s": now - self._t_start if self._t_start else 0.0,
            "partition": self._partition_mode(),
            "params": self._params.to_dict(),
            "changes": list(self._changes),
        }

    # -- internals (loop thread) -----------------------------------------------------
    def _loop_time(self) -> float:
        return self._loop.time() if self._loop is not None else time.monotonic()

    def _partition_mode(self) -> str | None:
        if self._manual_partition is not None:
            return self._manual_partition
        return "blackhole" if self._params.partitioned else None

    def _apply(self, params: LinkParams, due: float | None = None) -> None:
        now = self._loop_time()
        self._params = params
        self._version += 1
        for bucket in self._buckets.values():
            bucket.set_rate(params.rate_bytes_per_s, now)
        self._update_open()
        if due is not None:
            self._changes.append(
                {
                    "t_s": now - self._t_start,
                    "lag_ms": (now - due) * 1e3,
                    "params": params.to_dict(),
                }
            )

    def _update_open(self) -> None:
        if self._open is None:
            return
        now = time.monotonic()
        closed = self._partition_mode() is not None
        if closed and self._partition_since is None:
            self._partition_since = now
        elif not closed and self._partition_since is not None:
            self._partitioned_s += now - self._partition_since
            self._partition_since = None
        if closed:
            self._open.clear()
        else:
            self._open.set()

    def _queue_limit(self) -> float:
        p = self._params
        rate = p.rate_bytes_per_s
        if rate is None:
            return 32.0 * 2**20
        return 2.0 * rate * (p.latency_ms + p.jitter_ms + 50.0) / 1000.0 + 256 * 1024

    def _count(self, direction: str, n: int) -> None:
        self._bytes[direction] += n

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        self._connections += 1
        conn = _Conn(self, loop.time())
        conn.writers.append(writer)
        self._conns.add(conn)
        _nodelay(writer)
        try:
            await self._open.wait()  # blackhole: the handshake waits for the heal
            conn.t_open = loop.time()
            up_reader, up_writer = await asyncio.open_connection(*self.target, limit=_STREAM_LIMIT)
        except (ConnectionError, OSError):
            self._refused += 1
            conn.reset()
            return
        except asyncio.CancelledError:
            conn.close()
            raise
        if conn.closed:  # reset by a refuse partition while connecting
            _rst(up_writer)
            return
        _nodelay(up_writer)
        conn.writers.append(up_writer)
        conn.pipes = [
            _Pipe(self, conn, UP, reader, up_writer),
            _Pipe(self, conn, DOWN, up_reader, writer),
        ]
        for pipe in conn.pipes:
            conn.tasks.append(loop.create_task(pipe.read_loop()))
            conn.tasks.append(loop.create_task(pipe.write_loop()))
