"""The wire format between pipeline stages, and a keep-alive HTTP client.

A step message is ``4-byte big-endian header length | JSON header | raw tensor bytes``
(POST ``/step``). The header says which request, the absolute position of its first
token, the tensor's dtype and shape, the units this hop runs and the hops after it::

    {"request": "r17", "pos": 0, "dtype": "int64", "shape": [32], "start": 0, "stop": 4,
     "next": [[port, start, stop], ...], "final": false}

The answer is JSON: the next token and one record per hop (times in ms).
"""

from __future__ import annotations

import http.client
import json
import struct
import threading
from typing import Any

import numpy as np
import torch

__all__ = ["Client", "decode", "encode"]

DTYPES = {"int64": torch.int64, "float32": torch.float32}


def encode(header: dict[str, Any], x: torch.Tensor) -> bytes:
    """One step message carrying ``x``."""
    header = {**header, "dtype": str(x.dtype).removeprefix("torch."), "shape": list(x.shape)}
    head = json.dumps(header).encode()
    return struct.pack(">I", len(head)) + head + x.contiguous().numpy().tobytes()


def decode(body: bytes) -> tuple[dict[str, Any], torch.Tensor]:
    """The header and tensor of a step message (ValueError if malformed)."""
    if len(body) < 4:
        raise ValueError("step message shorter than its length prefix")
    (n,) = struct.unpack(">I", body[:4])
    header: dict[str, Any] = json.loads(body[4 : 4 + n])
    dtype = DTYPES.get(str(header.get("dtype")))
    if dtype is None:
        raise ValueError(f"dtype {header.get('dtype')!r} not one of {sorted(DTYPES)}")
    arr = np.frombuffer(body[4 + n :], dtype=str(header["dtype"])).copy()
    return header, torch.from_numpy(arr).reshape(header["shape"])


class Client:
    """POSTs over one kept-alive connection per (thread, port) to 127.0.0.1."""

    def __init__(self, timeout_s: float = 120.0) -> None:
        self.timeout_s = timeout_s
        self._local = threading.local()

    def post(self, port: int, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """``(HTTP status, JSON answer)``; OSError/HTTPException when the hop is down."""
        conns: dict[int, http.client.HTTPConnection] = self._local.__dict__.setdefault("conns", {})
        for attempt in (0, 1):  # a kept-alive connection the server closed: retry once
            conn = conns.get(port) or http.client.HTTPConnection(
                "127.0.0.1", port, timeout=self.timeout_s
            )
            conns[port] = conn
            try:
                conn.request("POST", path, body, {"Content-Type": "application/octet-stream"})
                resp = conn.getresponse()
                data = resp.read()
                return resp.status, json.loads(data or b"{}")
            except (http.client.HTTPException, ConnectionError, OSError):
                conn.close()
                conns.pop(port, None)
                if attempt:
                    raise
        raise AssertionError("unreachable")
