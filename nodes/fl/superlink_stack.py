"""``fast`` protocol timing for the SuperLink: each of its HTTP middlewares only on the
requests it acts on.

Flower's SuperLink (1.41, 1.42) serves every request, whichever API it belongs to,
through eight middlewares (``flwr.superlink.main._get_middleware``), seven of them
Starlette ``BaseHTTPMiddleware``s. Six act on one API only and pass every other request
straight on (``call_next``): the four Control ones (``/v1/control/``: sensitive-response
scrubbing, authentication, licence, event log) and the two Fleet ones (``/v1/fleet/``:
node authentication, event log). A ``BaseHTTPMiddleware`` that passes a request on still
costs a task, two memory streams and a wrapped response: a SuperNode's pull crosses
four Control middlewares that do nothing for it, the ServerApp's requests
(``/v1/runtime/``) six. The SuperLink is one Python process, and at 200 client nodes
it was busy ~100 % of a core for the whole round; ~24 % of its event loop's samples
were in the four Control middlewares (py-spy, 2026-11-29, docs/lean.md "200 nodes").

:func:`install` (``fast`` mode only; ``flower`` runs Flower untouched) wraps each of the
six in :class:`PathScoped`, a plain ASGI middleware that hands a request to Flower's
middleware when its path is under that middleware's prefix and to the next app
otherwise. Every request still meets every middleware that acts on it, in Flower's
order; the other two (error translation, protobuf translation) and any extension's
middleware run for every request as before. The prefixes are the ones each middleware
tests in its own code; :func:`install` refuses a Flower whose middleware list differs
from the one checked.
"""

from __future__ import annotations

import importlib
from typing import Any

#: The module whose ``_get_middleware`` builds the SuperLink's middleware list.
MAIN = "flwr.superlink.main"
#: Flower's middleware class name -> the only path prefix it acts on (checked against
#: Flower 1.41 and 1.42: each passes every other request on unchanged).
SCOPED = {
    "ControlSensitiveResponseMiddleware": "/v1/control/",
    "ControlAuthenticationMiddleware": "/v1/control/",
    "ControlLicenseMiddleware": "/v1/control/",
    "ControlEventLogMiddleware": "/v1/control/",
    "NodeAuthMiddleware": "/v1/fleet/",
    "FleetEventLogMiddleware": "/v1/fleet/",
}
#: Flower's list, outermost first (``BaseHTTPMiddleware`` with ``dispatch=``: the error
#: translator), after any extension's middleware.
EXPECTED = [
    "ControlSensitiveResponseMiddleware",
    "BaseHTTPMiddleware",
    "ControlAuthenticationMiddleware",
    "ControlLicenseMiddleware",
    "ProtobufTranslationMiddleware",
    "ControlEventLogMiddleware",
    "NodeAuthMiddleware",
    "FleetEventLogMiddleware",
]


class PathScoped:
    """Flower's ``middleware`` for the HTTP requests under ``prefix``; every other
    request goes to the next app directly (``middleware`` would pass it on unchanged).

    Parameters
    ----------
    app
        The next ASGI app.
    middleware
        Flower's middleware class.
    prefix : str
        The path prefix ``middleware`` acts on.
    args, kwargs
        ``middleware``'s own options.
    """

    def __init__(self, app: Any, middleware: type, prefix: str, *args: Any, **kwargs: Any) -> None:
        self.app = app
        self.prefix = prefix
        self.inner = middleware(app, *args, **kwargs)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
        else:
            await self.inner(scope, receive, send)


def scoped(middleware: list[Any]) -> list[Any]:
    """``middleware`` (Flower's ``Middleware`` entries) with each of :data:`SCOPED`
    wrapped in :class:`PathScoped`; the others unchanged, in the same order."""
    from starlette.middleware import Middleware

    out = []
    for m in middleware:
        prefix = SCOPED.get(m.cls.__name__)
        if prefix is None:
            out.append(m)
        else:
            wrapped = Middleware(PathScoped, m.cls, prefix, *m.args, **m.kwargs)
            out.append(wrapped)
    return out


def install() -> str:
    """Make this process's SuperLink build its middleware list through :func:`scoped`;
    RuntimeError if Flower's list is not :data:`EXPECTED` (after extensions). Returns a
    line for the SuperLink's log."""
    main = importlib.import_module(MAIN)
    original = getattr(main, "_get_middleware", None)
    if original is None:
        raise RuntimeError(f"protocol_timing fast: {MAIN}._get_middleware not found")
    if getattr(original, "_testbed_scoped", False):
        return "superlink middleware already scoped"
    extensions = importlib.import_module("flwr.superlink.extensions")
    n_ext = len(extensions.get_middleware())
    names = [m.cls.__name__ for m in original()][n_ext:]
    if names != EXPECTED:
        raise RuntimeError(
            f"protocol_timing fast: the SuperLink's middlewares are {names}, not the "
            f"{EXPECTED} nodes/fl/superlink_stack.py was checked against"
        )

    def get_middleware() -> list[Any]:
        return scoped(original())

    get_middleware._testbed_scoped = True  # type: ignore[attr-defined]
    main._get_middleware = get_middleware  # type: ignore[attr-defined]
    return "protocol_timing fast (superlink): " + ", ".join(
        f"{n} on {p} only" for n, p in SCOPED.items()
    )
