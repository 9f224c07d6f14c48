"""Frames of semantic offload: a JSON header and raw bytes, length-prefixed (TCP)."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

__all__ = ["recv_frame", "send_frame"]

_LENGTHS = struct.Struct("!II")  # header bytes, payload bytes


def send_frame(sock: socket.socket, header: dict[str, Any], payload: bytes = b"") -> int:
    """Send one frame; return the bytes written (prefix, header and payload)."""
    head = json.dumps(header).encode()
    data = _LENGTHS.pack(len(head), len(payload)) + head + payload
    sock.sendall(data)
    return len(data)


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> tuple[dict[str, Any], bytes, int] | None:
    """Receive one frame: (header, payload, bytes read); None when the peer closed."""
    lengths = _exactly(sock, _LENGTHS.size)
    if lengths is None:
        return None
    nh, np_ = _LENGTHS.unpack(lengths)
    head = _exactly(sock, nh)
    payload = _exactly(sock, np_) if np_ else b""
    if head is None or payload is None:
        return None
    header: dict[str, Any] = json.loads(head)
    return header, payload, _LENGTHS.size + nh + np_
