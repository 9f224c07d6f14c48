"""The data path of a shaping proxy: token buckets, pipes and relayed connections.

One :class:`Shaper` per link holds what all its connections share (parameters via the
link's :class:`~testbed.emulation.state.LinkState`, the open/partitioned gate, one token
bucket per direction, the random source and the counters). :func:`relay` serves one
accepted connection: it connects upstream and runs two :class:`Pipe` s (up: client ->
server, down: server -> client). Each pipe applies, in this order (see docs/links.md):

1. partition (blackhole): nothing is read or delivered while partitioned;
2. bandwidth: the link's token bucket for its direction;
3. loss: TCP-equivalent retransmission stalls (head-of-line blocking of the byte stream);
4. latency and jitter: every chunk gets a release time ``now + latency + U(+-jitter)``,
   never earlier than the previous chunk's (order kept), and a writer delivers it then.

Everything here runs on the proxy's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import socket
import struct
from collections import deque

from testbed.emulation.link import MSS_BYTES, LinkParams
from testbed.emulation.state import LinkState

#: Linux's minimum retransmission timeout, in seconds (``TCP_RTO_MIN``).
RTO_MIN_S = 0.2
#: Longest single sleep of a shaper, in seconds: parameter changes take effect within it.
MAX_WAIT_S = 0.02
#: Chunk size in seconds of the current rate (bounded by [MSS, 64 KiB] bytes).
BURST_S = 0.005
#: Token bucket depth in seconds of the current rate (at least two chunks).
DEPTH_S = 0.02
#: Read size of an unlimited link, in bytes.
UNLIMITED_READ = 256 * 1024
#: asyncio stream buffer limit, in bytes.
STREAM_LIMIT = 1 << 20
UP, DOWN = "up", "down"


class Bucket:
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
        """Change the rate (bytes/s, ``None`` = unlimited) from time ``now`` (s)."""
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
        """Bytes to read at once: one chunk of the rate, or 256 KiB when unlimited."""
        return UNLIMITED_READ if self.rate is None else self.chunk


class Shaper:
    """What every connection of one proxied link shares (lives on the link's loop).

    Parameters
    ----------
    state
        The link's bookkeeping; its ``params`` and ``mode`` are what the pipes apply.
    seed
        Seed of the random source (jitter and loss).
    """

    def __init__(self, state: LinkState, seed: int) -> None:
        self.state = state
        self.rng = random.Random(seed)
        self.version = 0  # bumped by every parameter change (restarts the loss draws)
        self.buckets: dict[str, Bucket] = {}
        self.open: asyncio.Event | None = None
        self.conns: set[Conn] = set()
        self.bytes = {UP: 0, DOWN: 0}
        self.stalled_s = 0.0
        self.loss_events = 0
        self.resets = 0
        self.connections = 0
        self.refused = 0

    @property
    def params(self) -> LinkParams:
        """The parameters in force, as shaped on the wall clock (dilated: bandwidth /
        TDF, latency and jitter x TDF; :attr:`LinkState.wall_params`)."""
        return self.state.wall_params

    def start(self, now: float) -> None:
        """Create the gate and the buckets (on the loop, at loop time ``now``)."""
        self.open = asyncio.Event()
        rate = self.params.rate_bytes_per_s
        self.buckets = {d: Bucket(rate, now) for d in (UP, DOWN)}
        self.apply(now)

    def apply(self, now: float) -> None:
        """Take the state's current parameters into use from loop time ``now``."""
        self.version += 1
        for bucket in self.buckets.values():
            bucket.set_rate(self.params.rate_bytes_per_s, now)
        self.update_open()

    def update_open(self) -> None:
        """Open or close the gate after the state's partition mode."""
        if self.open is None:
            return
        if self.state.mode is None:
            self.open.set()
        else:
            self.open.clear()

    def queue_limit(self) -> float:
        """Bytes a pipe may hold in its delay line before it stops reading."""
        p = self.params
        rate = p.rate_bytes_per_s
        if rate is None:
            return 32.0 * 2**20
        return 2.0 * rate * (p.latency_ms + p.jitter_ms + 50.0) / 1000.0 + 256 * 1024

    async def wait_open(self) -> None:
        """Return when the link is not partitioned."""
        assert self.open is not None, "shaper not started"
        await self.open.wait()


def rst(writer: asyncio.StreamWriter) -> None:
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


class Pipe:
    """One direction of one relayed connection."""

    def __init__(
        self,
        conn: Conn,
        direction: str,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
    ) -> None:
        self.shaper, self.conn, self.direction = conn.shaper, conn, direction
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
    def _segments_to_next_loss(self, p: float) -> int:
        """Geometric draw: segments up to and including the next lost one."""
        if self.loss_version != self.shaper.version:
            self.loss_version = self.shaper.version
            self.to_next_loss = 0
        if self.to_next_loss <= 0:
            u = 1.0 - self.shaper.rng.random()
            self.to_next_loss = int(math.log(u) / math.log1p(-p)) + 1
        return self.to_next_loss

    def _loss_stall_s(self, n_bytes: int, drained: bool, params: LinkParams) -> float:
        """Modelled retransmission time for the segments in one chunk, in seconds."""
        p = params.loss_pct / 100.0
        if p <= 0:
            return 0.0
        n_seg = max(1, math.ceil(n_bytes / MSS_BYTES))
        stall, seg = 0.0, 0
        while seg + self._segments_to_next_loss(p) <= n_seg:
            seg += self.to_next_loss
            self.to_next_loss = 0
            rtt = params.rtt_s + params.jitter_ms / 1000.0
            tail = drained and seg == n_seg
            stall += rtt + RTO_MIN_S if tail else max(rtt, 0.001)
            self.shaper.loss_events += 1
        self.to_next_loss -= n_seg - seg
        return stall

    # -- relay -----------------------------------------------------------------------
    async def read_loop(self) -> None:
        """Read chunks from ``src`` at the link's rate and queue them with release times."""
        shaper, loop = self.shaper, asyncio.get_running_loop()
        bucket = shaper.buckets[self.direction]
        try:
            if self.direction == UP:  # emulated TCP handshake: the client may send after 1 RTT
                await asyncio.sleep(max(0.0, self.conn.t_open + shaper.params.rtt_s - loop.time()))
            while True:
                await shaper.wait_open()
                size = bucket.read_size()
                data = await self.src.read(size)
                if not data:
                    self._push(loop.time(), None)
                    return
                await bucket.consume(len(data), loop)
                await shaper.wait_open()
                # nothing more waiting to be sent: a loss here is a tail loss (no dup-ACKs)
                drained = len(data) < size and not getattr(self.src, "_buffer", b"")
                self._push(self._release_time(len(data), drained, loop.time()), data)
                while self.queued > shaper.queue_limit():
                    self.has_space.clear()
                    await self.has_space.wait()
        except (ConnectionError, OSError):
            self.conn.reset()

    def _release_time(self, n_bytes: int, drained: bool, now: float) -> float:
        """Loop time at which a chunk read at ``now`` is delivered."""
        shaper = self.shaper
        params = shaper.params
        stall = self._loss_stall_s(n_bytes, drained, params)
        shaper.stalled_s += stall
        jitter = params.jitter_ms * (2.0 * shaper.rng.random() - 1.0)
        delay = max(0.0, params.latency_ms + jitter) / 1000.0
        # head-of-line blocking: a lost segment arrives one retransmission later;
        # later chunks wait behind it but are not shifted further (SACK recovery)
        release = max(now + delay + stall, self.last_release)
        self.last_release = release
        return release

    def _push(self, release: float, data: bytes | None) -> None:
        self.queue.append((release, data))
        self.queued += len(data) if data else 0
        self.has_data.set()

    async def write_loop(self) -> None:
        """Deliver queued chunks to ``dst`` at their release times (EOF forwarded)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                while not self.queue:
                    self.has_data.clear()
                    await self.has_data.wait()
                release, data = self.queue[0]
                while (wait := release - loop.time()) > 0:
                    await asyncio.sleep(wait)
                await self.shaper.wait_open()
                self.queue.popleft()
                if data is None:
                    self._write_eof()
                    return
                self.queued -= len(data)
                self.has_space.set()
                # counted before the write: the peer may read the bytes (and a caller
                # read the counters) before this thread runs again after the send
                self.shaper.bytes[self.direction] += len(data)
                self.dst.write(data)
                await self.dst.drain()
        except (ConnectionError, OSError):
            self.conn.reset()

    def _write_eof(self) -> None:
        if self.dst.can_write_eof():
            self.dst.write_eof()
        self.done = True
        self.conn.maybe_close()


class Conn:
    """One relayed connection: two pipes and their four tasks."""

    def __init__(self, shaper: Shaper, t_open: float) -> None:
        self.shaper = shaper
        self.t_open = t_open
        self.writers: list[asyncio.StreamWriter] = []
        self.pipes: list[Pipe] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.closed = False

    def maybe_close(self) -> None:
        """Close once both directions have ended."""
        if self.pipes and all(p.done for p in self.pipes):
            self.close()

    def close(self) -> None:
        """Close both sides (FIN) and stop relaying."""
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
        self.shaper.resets += 1
        for w in self.writers:
            rst(w)
        self._finish()

    def _finish(self) -> None:
        self.shaper.conns.discard(self)
        current = asyncio.current_task()
        for t in self.tasks:
            if t is not current:
                t.cancel()


async def relay(
    shaper: Shaper,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    target: tuple[str, int],
    reverse: bool = False,
) -> None:
    """Serve one accepted connection: connect to ``target`` once the link is open (a
    blackhole holds the handshake) and start both pipes. ``reverse``: the accepting side
    is the link's server side (what it sends goes down, the target's replies go up)."""
    loop = asyncio.get_running_loop()
    shaper.connections += 1
    conn = Conn(shaper, loop.time())
    conn.writers.append(writer)
    shaper.conns.add(conn)
    _nodelay(writer)
    try:
        await shaper.wait_open()  # blackhole: the handshake waits for the heal
        conn.t_open = loop.time()
        up_reader, up_writer = await asyncio.open_connection(*target, limit=STREAM_LIMIT)
    except (ConnectionError, OSError):
        shaper.refused += 1
        conn.reset()
        return
    except asyncio.CancelledError:
        conn.close()
        raise
    if conn.closed:  # reset by a refuse partition while connecting
        rst(up_writer)
        return
    _nodelay(up_writer)
    conn.writers.append(up_writer)
    first, second = (DOWN, UP) if reverse else (UP, DOWN)
    conn.pipes = [Pipe(conn, first, reader, up_writer), Pipe(conn, second, up_reader, writer)]
    for pipe in conn.pipes:
        conn.tasks.append(loop.create_task(pipe.read_loop()))
        conn.tasks.append(loop.create_task(pipe.write_loop()))
