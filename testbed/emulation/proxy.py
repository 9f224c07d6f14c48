"""Userspace shaping proxy: one TCP link emulated by an asyncio relay (no privileges).

The proxy listens on ``listen_host:listen_port``; each accepted connection is relayed to
``target_host:target_port`` by :mod:`testbed.emulation.relay` (partition, bandwidth,
loss, latency and jitter per direction; see docs/links.md). Connections start one RTT
late (the emulated TCP handshake). Half-close (EOF) is forwarded with
``shutdown(SHUT_WR)``; a reset on either side resets the other.

Schedules are played by the shared :class:`~testbed.emulation.schedule.ScheduleDriver`
(its ``set_params`` calls hop onto the proxy's loop); partitions and partitioned time are
kept by the shared :class:`~testbed.emulation.state.LinkState`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from testbed.emulation.link import LinkParams, LinkSchedule
from testbed.emulation.relay import DOWN, RTO_MIN_S, STREAM_LIMIT, UP, Shaper, relay
from testbed.emulation.schedule import ScheduleDriver
from testbed.emulation.state import PARTITION_MODES, LinkState, check_params, check_partition_mode

__all__ = ["PARTITION_MODES", "RTO_MIN_S", "ShapingProxy"]

_T = TypeVar("_T")


async def _served(handler: Coroutine[Any, Any, None]) -> None:
    """Run a connection's handler; its cancellation (the link stopping while the
    connection is held, e.g. by a partition) ends it quietly. Python 3.11's
    ``start_server`` callback asks a cancelled handler task for its exception and logs
    the CancelledError as an error with a traceback (fixed in 3.12)."""
    with contextlib.suppress(asyncio.CancelledError):
        await handler


class ShapingProxy:
    """An emulated link between a client and one TCP server, as a userspace relay.

    Implements :class:`testbed.emulation.link.Link`.

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
        self.name = name
        self.target = (target_host, int(target_port))
        self.listen_host = listen_host
        self.listen_port = int(listen_port)
        self.seed = seed
        self._state = LinkState(check_params(params))
        self._shaper = Shaper(self._state, seed)
        self._driver = ScheduleDriver(self, self._state)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._routes: list[tuple[tuple[str, int], int]] = []  # (target, listen port)
        self._route_servers: list[asyncio.Server] = []

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
        self._state.start()
        self._shaper.start(asyncio.get_running_loop().time())
        await self._listen()
        return self.listen_port

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._handle,
            self.listen_host,
            self.listen_port,
            reuse_address=True,
            limit=STREAM_LIMIT,
            backlog=512,
        )
        self.listen_port = int(self._server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _served(relay(self._shaper, reader, writer, self.target))

    def add_route(self, target_port: int, target_host: str = "127.0.0.1") -> int:
        """Relay another server on the link's client side through this same link (its
        buckets, loss, latency, schedule and partitions): another workload on the same
        node. What the route's clients send crosses the link downwards (towards the
        node), the server's replies upwards, sharing the bandwidth of the link's own
        traffic.

        Returns
        -------
        int
            The 127.0.0.1 port the route's clients dial.
        """
        target = (target_host, int(target_port))
        port = self._call(self._aroute(target, 0))
        self._routes.append((target, port))
        return port

    async def _aroute(self, target: tuple[str, int], port: int) -> int:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _served(relay(self._shaper, reader, writer, target, reverse=True))

        server = await asyncio.start_server(
            handle, self.listen_host, port, reuse_address=True, limit=STREAM_LIMIT, backlog=512
        )
        self._route_servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def _close_routes(self) -> None:
        for server in self._route_servers:
            server.close()
        self._route_servers = []

    def stop(self) -> None:
        """Stop the schedule, close the listener and every connection, end the loop."""
        self._driver.stop()
        if self._loop is None or self._thread is None:
            return
        with contextlib.suppress(Exception):
            self._call(self._astop(), timeout=5.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
        self._loop.close()
        self._loop = None
        self._thread = None
        self._state.stop()

    async def _astop(self) -> None:
        await self._close_routes()
        if self._server is not None:
            self._server.close()
            self._server = None
        for conn in list(self._shaper.conns):
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

    def connect_address(self, server_port: int) -> str:
        """``host:port`` a client dials to reach the server through this link (the
        proxy's listen address; ``server_port`` is where the proxy itself connects)."""
        host = "127.0.0.1" if self.listen_host in ("", "0.0.0.0") else self.listen_host
        return f"{host}:{self.listen_port}"

    # -- control (thread-safe) -------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, _T], timeout: float = 10.0) -> _T:
        if self._loop is None:
            coro.close()
            raise RuntimeError(f"link {self.name!r}: not started")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _run_in_loop(self, fn: Callable[[], None]) -> None:
        if self._thread is threading.current_thread():
            fn()
            return

        async def run() -> None:
            fn()

        self._call(run())

    @property
    def params(self) -> LinkParams:
        """The parameters in force."""
        return self._state.params

    def set_params(self, params: LinkParams) -> None:
        """Change the link's parameters; applies to every byte read from now on.

        Thread-safe; returns once the loop applied them (typically < 1 ms). Open
        connections are kept. Chunks already released into the delay line keep their
        release times (they are "in flight").
        """
        check_params(params)
        if self._loop is None:
            self._state.set_params(params)
            return
        self._run_in_loop(lambda: self._apply(params))

    def _apply(self, params: LinkParams) -> None:
        assert self._loop is not None
        self._state.set_params(params)
        self._shaper.apply(self._loop.time())

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
        check_partition_mode(mode)
        self._call(self._apartition(on, mode))

    async def _apartition(self, on: bool, mode: str) -> None:
        previous = self._state.manual
        self._state.set_partition(mode if on else None)
        if on and mode == "refuse":
            if self._server is not None:
                self._server.close()
                self._server = None
            await self._close_routes()
            for conn in list(self._shaper.conns):
                conn.reset()
        if previous == "refuse" and (not on or mode != "refuse") and self._server is None:
            await self._listen()
            for target, port in self._routes:
                await self._aroute(target, port)
        self._shaper.update_open()

    def run_schedule(self, schedule: LinkSchedule, t0: float) -> None:
        """Follow ``schedule`` from origin ``t0`` (a ``time.monotonic()`` value).

        Played by the shared :class:`~testbed.emulation.schedule.ScheduleDriver`; the lag
        of each change (applied time - due time) is kept in ``counters()["changes"]``. A
        new call replaces the previous schedule.
        """
        self._driver.start(schedule, t0)

    # -- counters --------------------------------------------------------------------
    def counters(self) -> dict[str, Any]:
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
        shaper, book = self._shaper, self._state.counters()
        return {
            "name": self.name,
            "bytes_up": shaper.bytes[UP],
            "bytes_down": shaper.bytes[DOWN],
            "connections": shaper.connections,
            "active_connections": len(shaper.conns),
            "partitioned_s": book["partitioned_s"],
            "stalled_s": shaper.stalled_s,
            "loss_events": shaper.loss_events,
            "resets": shaper.resets,
            "refused": shaper.refused,
            "uptime_s": self._state.uptime_s(),
            "partition": book["partition"],
            "params": book["params"],
            "changes": book["changes"],
        }
