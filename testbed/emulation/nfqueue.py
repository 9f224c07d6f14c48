"""Packet delay line on Linux NFQUEUE (raw netlink, no extra packages).

Used by :mod:`testbed.emulation.netem` when the kernel has no ``sch_netem``: iptables
sends forwarded packets to queue ``n``; this thread gives each packet a release time
``now + latency + U(+-jitter)`` (never earlier than the previous packet of the same queue,
so order is kept) and accepts it then with one batch verdict. Packets stay in the kernel;
only their ids cross to userspace (``NFQNL_COPY_META``).
"""

from __future__ import annotations

import contextlib
import errno
import random
import select
import socket
import struct
import threading
import time
from collections import deque

NETLINK_NETFILTER = 12
_SUBSYS_QUEUE = 3
_MSG_PACKET, _MSG_CONFIG, _MSG_VERDICT_BATCH = 0, 2, 3
_CFG_CMD, _CFG_PARAMS, _CFG_QUEUE_MAXLEN, _CFG_MASK, _CFG_FLAGS = 1, 2, 3, 4, 5
_CMD_BIND = 1
_COPY_META = 1
_F_GSO = 4
_PACKET_HDR, _VERDICT_HDR = 1, 2
_NLM_F_REQUEST, _NLM_F_ACK = 1, 4
_NLMSG_ERROR = 2
_NF_ACCEPT = 1


def _attr(kind: int, data: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(data), kind) + data
    return raw + b"\0" * (-len(raw) % 4)


def _message(kind: int, queue: int, attrs: bytes, flags: int, seq: int) -> bytes:
    body = struct.pack("!BBH", socket.AF_INET, 0, queue) + attrs
    return struct.pack("=IHHII", 16 + len(body), (_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


class DelayLine:
    """Per-queue packet delay with order kept, on NFQUEUE queues of the current netns.

    Parameters
    ----------
    queues
        Queue numbers to bind (one per direction).
    seed
        Seed of the jitter source.
    max_queue_packets
        Kernel queue length per queue; beyond it packets are dropped (a full buffer).

    Notes
    -----
    Create it (``start``) while the calling thread is in the target network namespace:
    the netlink socket belongs to the namespace it was opened in.
    """

    def __init__(self, queues: tuple[int, ...], seed: int = 0, max_queue_packets: int = 65536):
        self.queues = queues
        self._rng = random.Random(seed)
        self._delay: dict[int, tuple[float, float]] = {q: (0.0, 0.0) for q in queues}
        self._pending: dict[int, deque[tuple[float, int]]] = {q: deque() for q in queues}
        self._last: dict[int, float] = dict.fromkeys(queues, 0.0)
        self._max = max_queue_packets
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.packets = dict.fromkeys(queues, 0)
        self.error: BaseException | None = None

    def set_delay(self, queue: int, latency_ms: float, jitter_ms: float) -> None:
        """Delay for packets entering ``queue`` from now on (thread-safe)."""
        with self._lock:
            self._delay[queue] = (latency_ms / 1000.0, jitter_ms / 1000.0)

    def start(self) -> None:
        """Bind the queues (raises ``OSError`` if the kernel refuses) and start the thread."""
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
        sock.bind((0, 0))
        self._sock = sock
        for seq, q in enumerate(self.queues, start=1):
            attrs = (
                _attr(_CFG_CMD, struct.pack("!BBH", _CMD_BIND, 0, socket.AF_INET))
                + _attr(_CFG_PARAMS, struct.pack("!IB", 0, _COPY_META))
                + _attr(_CFG_QUEUE_MAXLEN, struct.pack("!I", self._max))
                + _attr(_CFG_MASK, struct.pack("!I", _F_GSO))
                + _attr(_CFG_FLAGS, struct.pack("!I", _F_GSO))
            )
            sock.send(_message(_MSG_CONFIG, q, attrs, _NLM_F_REQUEST | _NLM_F_ACK, seq))
            reply = sock.recv(65536)
            _, kind = struct.unpack_from("=IH", reply)
            if kind == _NLMSG_ERROR:
                (code,) = struct.unpack_from("=i", reply, 16)
                if code:
                    sock.close()
                    raise OSError(-code, f"NFQUEUE bind of queue {q} refused")
        sock.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="nfqueue-delay", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close the socket (the kernel drops still-queued packets)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _receive(self, buf: bytearray, now: float) -> None:
        assert self._sock is not None
        while True:
            try:
                n = self._sock.recv_into(buf)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    continue
                raise
            off = 0
            while off + 16 <= n:
                length, kind = struct.unpack_from("=IH", buf, off)
                if length < 16:
                    break
                if kind == (_SUBSYS_QUEUE << 8) | _MSG_PACKET:
                    self._packet(buf, off, length, now)
                off += (length + 3) & ~3

    def _packet(self, buf: bytearray, off: int, length: int, now: float) -> None:
        """Queue the packet of the NFQUEUE message at ``buf[off:off + length]``."""
        (queue,) = struct.unpack_from("!H", buf, off + 18)
        a = off + 20
        while a + 4 <= off + length:
            alen, atype = struct.unpack_from("=HH", buf, a)
            if alen < 4:
                return
            if atype & 0x3FFF == _PACKET_HDR:
                (pid,) = struct.unpack_from("!I", buf, a + 4)
                self._enqueue(queue, pid, now)
                return
            a += (alen + 3) & ~3

    def _enqueue(self, queue: int, pid: int, now: float) -> None:
        if queue not in self._pending:
            return
        with self._lock:
            latency, jitter = self._delay[queue]
        delay = latency + (jitter * (2.0 * self._rng.random() - 1.0) if jitter else 0.0)
        release = max(now + max(delay, 0.0), self._last[queue])
        self._last[queue] = release
        self._pending[queue].append((release, pid))
        self.packets[queue] += 1

    def _release(self, now: float) -> float | None:
        assert self._sock is not None
        nxt: float | None = None
        for q, pending in self._pending.items():
            last = None
            while pending and pending[0][0] <= now:
                last = pending.popleft()[1]
            if last is not None:
                verdict = _attr(_VERDICT_HDR, struct.pack("!II", _NF_ACCEPT, last))
                self._sock.send(_message(_MSG_VERDICT_BATCH, q, verdict, _NLM_F_REQUEST, 0))
            if pending and (nxt is None or pending[0][0] < nxt):
                nxt = pending[0][0]
        return nxt

    def _run(self) -> None:
        buf = bytearray(1 << 18)
        nxt: float | None = None
        sock = self._sock
        assert sock is not None
        try:
            while not self._stop.is_set():
                timeout = 0.05 if nxt is None else min(max(nxt - time.monotonic(), 0.0), 0.05)
                ready, _, _ = select.select([sock], [], [], timeout)
                if ready:
                    self._receive(buf, time.monotonic())
                nxt = self._release(time.monotonic())
        except BaseException as exc:  # noqa: BLE001 - kept for the owner to report
            self.error = exc
