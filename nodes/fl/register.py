"""A SuperNode's registration and activation that survive their own retries (Flower
1.42's HTTP fleet).

A SuperNode registers its public key (``RegisterNode``), then activates it
(``ActivateNode``, which finds the node id by that key). Flower's retry invoker calls
either again when an attempt fails in transport, e.g. a response that did not come back
in time from a SuperLink busy with a fleet starting on two cores. When the first attempt
did reach the SuperLink, the retry is refused and the SuperNode exits (code 305,
"Failed to initialize the connection to the SuperLink"), though the first attempt
succeeded:

* ``RegisterNode``: the key is registered already, ``PUBLIC_KEY_ALREADY_IN_USE`` (code
  23). 48 node containers starting together lost 9 nodes this way here.
* ``ActivateNode``: the node is online already, and a node is activated only from
  registered or offline, ``FLEET_NODE_ACTIVATION_FAILED`` (code 2004). 48 node
  containers on 2 cores lost a node this way (2026-11-29: "Giving up reconnection after
  30.36 seconds and 2 tries", then code 2004).

:func:`install` makes a retry of **this process's own** registration treat that answer
as the registration it is: the key is this process's (a key registered by anyone else,
or on a first attempt, still fails as in Flower), and ``ActivateNode`` then gets the
node id the first attempt created. A retried activation of this process's own key that
gets code 2004 is checked with Flower's own heartbeat for the node id the registration
returned: if the SuperLink acknowledges it (the node exists, and is online now), that
is the activation the first attempt made; otherwise Flower's error stands. The protocol
and every message stay Flower's; the SuperNode logs a line when either happens.
Installed for every SuperNode the testbed runs, in both protocol timings
(:func:`nodes.fl.timing.main`).
"""

from __future__ import annotations

import sys
from typing import Any

_attempted: set[bytes] = set()  # public keys this process tried to register
_activating: set[bytes] = set()  # public keys this process tried to activate
_node_ids: dict[bytes, int] = {}  # public key -> the node id its registration returned
_installed = False


def _flower_error(exc: BaseException, code: str) -> bool:
    """Whether ``exc`` is the SuperLink's answer with Flower's ``ApiErrorCode.<code>``."""
    import httpx
    from flwr.supercore.error import ApiErrorCode, FlowerError

    if not isinstance(exc, httpx.HTTPStatusError):
        return False
    err = FlowerError.from_json(exc.response.text)
    return err is not None and err.code == getattr(ApiErrorCode, code)


def already_registered(exc: BaseException) -> bool:
    """Whether ``exc`` is the SuperLink's ``PUBLIC_KEY_ALREADY_IN_USE`` answer."""
    return _flower_error(exc, "PUBLIC_KEY_ALREADY_IN_USE")


def activation_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is the SuperLink's ``FLEET_NODE_ACTIVATION_FAILED`` answer."""
    return _flower_error(exc, "FLEET_NODE_ACTIVATION_FAILED")


def install() -> None:
    """Wrap ``FleetHttpClient.RegisterNode`` and ``ActivateNode`` (once per process)."""
    global _installed
    if _installed:
        return
    from flwr.proto.fleet_pb2 import ActivateNodeResponse, RegisterNodeFleetResponse
    from flwr.proto.heartbeat_pb2 import SendNodeHeartbeatRequest
    from flwr.proto.node_pb2 import Node
    from flwr.supernode.fleet_http_client import FleetHttpClient

    register = FleetHttpClient.RegisterNode
    activate = FleetHttpClient.ActivateNode

    def RegisterNode(self: Any, request: Any) -> Any:  # noqa: N802 (Flower's name)
        key = bytes(request.public_key)
        retry = key in _attempted
        _attempted.add(key)
        try:
            got = register(self, request)
        except Exception as exc:
            if retry and already_registered(exc):
                print(
                    "testbed: RegisterNode retried after an attempt that had registered "
                    "this SuperNode's key; activating that registration",
                    file=sys.stderr,
                    flush=True,
                )
                return RegisterNodeFleetResponse()
            raise
        if got.node_id:
            _node_ids[key] = int(got.node_id)
        return got

    def ActivateNode(self: Any, request: Any) -> Any:  # noqa: N802 (Flower's name)
        key = bytes(request.public_key)
        retry = key in _activating
        _activating.add(key)
        try:
            return activate(self, request)
        except Exception as exc:
            node_id = _node_ids.get(key)
            if not (retry and node_id and activation_failed(exc)):
                raise
            beat = self.SendNodeHeartbeat(
                SendNodeHeartbeatRequest(
                    node=Node(node_id=node_id), heartbeat_interval=request.heartbeat_interval
                )
            )
            if not beat.success:
                raise
            print(
                f"testbed: ActivateNode retried after an attempt that had activated node "
                f"{node_id}; the SuperLink acknowledged its heartbeat",
                file=sys.stderr,
                flush=True,
            )
            return ActivateNodeResponse(node_id=node_id)

    FleetHttpClient.RegisterNode = RegisterNode  # type: ignore[method-assign]
    FleetHttpClient.ActivateNode = ActivateNode  # type: ignore[method-assign]
    _installed = True
