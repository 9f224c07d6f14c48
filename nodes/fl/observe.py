"""Observe any Flower App from outside its code: the Grid and the ClientApp's messages.

The testbed records what happens to a user's app without touching its strategy. The
two entry points that :func:`nodes.fl.userapp.observed_fab` writes into the app's
observed copy load the user's components and observe them:

* :func:`observed_client_app` (:mod:`nodes.fl.observed_client`) wraps the app's
  ClientApp: the user's code handles every message unchanged; around it the node
  measures and stretches its times and tells the Grid who answered;
* :func:`observed_server_app` wraps the app's ServerApp: the Grid it is handed records
  every message and reply through :class:`nodes.fl.grid_observer.GridObserver` (per
  (round, node) statuses, bytes, durations, the round events and every reply's
  metrics), the same observer that records the testbed's own app
  (:mod:`nodes.fl.own_app`).

The testbed's run config keys (``testbed-*``, :data:`nodes.fl.userapp.TESTBED_PREFIX`)
are removed from the context the user's code sees (:func:`user_context`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from nodes.fl.grid_observer import GridObserver, payload_bytes
from nodes.fl.identity import names_record, node_names
from nodes.fl.observed_client import (
    OBSERVED,
    UserAppError,
    load_component,
    message_round,
    observed_client_app,
    user_context,
)
from nodes.fl.telemetry import Telemetry
from nodes.fl.userapp import TESTBED_PREFIX

__all__ = [
    "FACTORIES",
    "OBSERVED",
    "ON_ATTACH",
    "GridObserver",
    "UserAppError",
    "message_round",
    "observed_client_app",
    "observed_server_app",
    "payload_bytes",
    "user_context",
]

#: Called with each GridObserver once it is attached, before the user's ServerApp runs
#: (the simulation backend arms its virtual clock there).
ON_ATTACH: list[Callable[[GridObserver], None]] = []


def observed_server_app(ref: str, app_name: str) -> ServerApp:
    """A ServerApp running the app's ServerApp ``ref`` on an observed Grid."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        rc = context.run_config
        tel = Telemetry(str(rc.get(f"{TESTBED_PREFIX}telemetry-path", "")) or None)
        names = node_names(str(rc.get(f"{TESTBED_PREFIX}node-names", "[]")))
        if rc.get(f"{TESTBED_PREFIX}protocol-timing") == "fast":
            from nodes.fl.timing import SERVERAPP, fleet_scale, install

            install(SERVERAPP, fleet_scale(len(names)))
        cap = float(str(rc.get(f"{TESTBED_PREFIX}round-timeout-s", 0))) or None
        observer = GridObserver(
            tel,
            names,
            json.loads(str(rc.get(f"{TESTBED_PREFIX}hold-rounds", "[]"))),
            str(rc.get(f"{TESTBED_PREFIX}hold-path", "")),
            cap,
        )
        inner: ServerApp = load_component(ref, ServerApp, app_name, "serverapp")
        _wait_fleet(grid, len(names), cap or 60.0, tel)
        tel.event("run_start", app=app_name, **names_record(names))
        observer.attach(grid)
        for hook in list(ON_ATTACH):
            hook(observer)
        try:
            inner(grid, user_context(context))
        except Exception as e:
            observer.finish()
            tel.event("app_error", app=app_name, error=f"{type(e).__name__}: {e}"[:500])
            raise UserAppError(
                f"app {app_name!r}: ServerApp raised: {type(e).__name__}: {e}"
            ) from e
        observer.finish()
        tel.event("run_end", rounds=max(observer.rounds, default=0), app=app_name)

    return app


def _wait_fleet(grid: Grid, expected: int, timeout_s: float, tel: Telemetry) -> None:
    """Wait until every client node is connected (at most ``timeout_s``), as the
    testbed's own ServerApp does: the app then samples the whole fleet."""
    deadline = time.time() + timeout_s
    while len(list(grid.get_node_ids())) < expected and time.time() < deadline:
        time.sleep(0.2)
    tel.event("fleet_connected", connected=len(list(grid.get_node_ids())), expected=expected)


#: (what a test may call to check the module is wired) the two factories by component.
FACTORIES: dict[str, Callable[[str, str], Any]] = {
    "serverapp": observed_server_app,
    "clientapp": observed_client_app,
}
