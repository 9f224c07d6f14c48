"""Guards of the controller's HTTP API: size limits and names checked before use.

- :class:`BodyLimit`: an ASGI middleware that refuses a request body over
  :data:`MAX_BODY_BYTES` with 413 before any route reads it (with or without a
  ``Content-Length`` header).
- Identifiers in URLs and bodies (run ids, artifact and experiment file names) must match
  :data:`RUN_ID_PATTERN` / :data:`FILE_NAME_PATTERN`: no ``/``, no ``..``, no SQL
  ``LIKE`` wildcards; a file is served only when its resolved path lies inside the run
  store (:func:`inside`).
- Spec texts sent to ``/validate``, ``/plan`` and ``/launches`` (the uploads) are limited
  to :data:`MAX_UPLOAD_CHARS`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 1 << 20  # a request body, bytes
MAX_UPLOAD_CHARS = 256 * 1024  # a spec text in a body; experiments/reference.yaml is ~10 KB
MAX_ID_CHARS = 128
# a run id: letters/digits and '-' (what testbed.runner.new_run_id makes), or a prefix
RUN_ID_PATTERN = r"^[^\W_](?:[^\W_]|-){0,127}$"
# a file of a run folder or of the experiments folder: no path, not hidden
FILE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_OVERRIDES = 100  # ``set`` items in one body


def inside(root: Path, candidate: Path) -> bool:
    """True when ``candidate`` (symlinks resolved) is ``root`` or lies under it."""
    try:
        return candidate.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        return False


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413 (ASGI middleware).

    Parameters
    ----------
    app : ASGI app
        The wrapped application.
    max_bytes : int
        Largest body accepted, bytes.
    """

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await _too_large(send, self.max_bytes)
            return
        chunks: list[bytes] = []
        size = 0
        while True:  # read the whole (bounded) body first, then replay it to the app
            msg = await receive()
            if msg["type"] != "http.request":
                break
            chunks.append(msg.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await _too_large(send, self.max_bytes)
                return
            if not msg.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _too_large(send: Send, max_bytes: int) -> None:
    body: dict[str, Any] = {"detail": f"request body over {max_bytes} bytes"}
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": data})
