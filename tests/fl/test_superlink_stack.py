"""``fast`` protocol timing's SuperLink (nodes/fl/superlink_stack.py): each middleware
only on its own API, and Flower's SuperLink still authenticates and serves nodes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from flwr.proto.fleet_pb2 import ActivateNodeRequest, PullMessagesRequest, RegisterNodeFleetRequest
from flwr.proto.node_pb2 import Node

from nodes.agent import superlink_command
from nodes.fl import superlink_stack
from testbed.procs import free_port, wait_port
from tests.fl.test_register import _client


@pytest.fixture(scope="module")
def fast_superlink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real ``flower-superlink`` started as the server node starts it in ``fast``."""
    port = free_port()
    log = tmp_path_factory.mktemp("link") / "superlink.log"
    cmd = superlink_command(port, isolation="process", protocol_timing="fast")
    assert cmd[1:4] == ["-m", "nodes.fl.timing", "fast"]
    with Path(log).open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "FLWR_HOME": str(log.parent)},
        )  # fmt: skip
    try:
        wait_port(port, 60, proc)
        yield f"http://127.0.0.1:{port}", log
    finally:
        proc.kill()
        proc.wait()


def test_the_fast_superlink_still_authenticates_and_serves_nodes(
    fast_superlink: tuple[str, Path],
) -> None:
    address, log = fast_superlink
    text = log.read_text()
    assert "protocol_timing fast (superlink): " in text
    assert "NodeAuthMiddleware on /v1/fleet/" in text
    client, key = _client(address)
    client.RegisterNode(RegisterNodeFleetRequest(public_key=key))
    node_id = client.ActivateNode(
        ActivateNodeRequest(public_key=key, heartbeat_interval=30)
    ).node_id
    assert client.PullMessages(PullMessagesRequest(node=Node(node_id=node_id))).messages_list == []
    # another key claiming that node: Flower's node authentication still acts on the Fleet API
    other, _key = _client(address)
    with pytest.raises(httpx.HTTPStatusError) as e:
        other.PullMessages(PullMessagesRequest(node=Node(node_id=node_id)))
    assert e.value.response.status_code == 401


def test_each_middleware_runs_only_on_its_own_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's own six path-bound middlewares in Flower's order, scoped: a Runtime API
    request meets none of them, a Fleet request the two Fleet ones, a Control request the four
    Control ones (each of Flower's ``dispatch``es is counted)."""
    from flwr.superlink import main
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    seen: list[str] = []
    for m in main._get_middleware():
        if m.cls.__name__ in superlink_stack.SCOPED:

            async def dispatch(self: Any, request: Request, call_next: Any) -> Any:
                seen.append(type(self).__name__)
                return await call_next(request)

            monkeypatch.setattr(m.cls, "dispatch", dispatch)

    async def ok(_request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    def met(middleware: list[Any], path: str) -> list[str]:
        app = Starlette(routes=[Route(path, ok, methods=["POST"])], middleware=middleware)
        seen.clear()
        assert TestClient(app).post(path).status_code == 200
        return sorted(seen)

    # the six, in Flower's order (the protobuf translator would refuse a plain request)
    flower = [m for m in main._get_middleware() if m.cls.__name__ in superlink_stack.SCOPED]
    every = sorted(superlink_stack.SCOPED)
    assert sorted(m.cls.__name__ for m in flower) == every
    for path in ("/v1/runtime/pull-messages", "/v1/fleet/pull-messages"):
        assert met(flower, path) == every  # Flower's own stack: all six for any request
    scoped = superlink_stack.scoped(flower)
    assert met(scoped, "/v1/runtime/pull-messages") == []
    assert met(scoped, "/v1/fleet/pull-messages") == [
        "FleetEventLogMiddleware",
        "NodeAuthMiddleware",
    ]
    control = [n for n in every if n.startswith("Control")]
    assert met(scoped, "/v1/control/list-runs") == control
