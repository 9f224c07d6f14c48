"""A SuperNode's registration survives its own retry (nodes/fl/register.py), against a
real SuperLink: a second ``RegisterNode`` of a key this process already sent is the
registration it is (``ActivateNode`` then finds the node), while a key that someone
else registered still gets Flower's ``PUBLIC_KEY_ALREADY_IN_USE``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from flwr.proto.fleet_pb2 import ActivateNodeRequest, RegisterNodeFleetRequest
from flwr.supercore.interceptors.http.runtime_version import RuntimeVersionHttpInterceptor
from flwr.supercore.primitives.asymmetric import generate_key_pairs, public_key_to_bytes
from flwr.supernode.fleet_http_client import FleetHttpClient
from flwr.supernode.node_auth_http_interceptor import NodeAuthHttpInterceptor

from nodes.agent import superlink_command
from nodes.fl import register
from testbed.procs import free_port, wait_port


@pytest.fixture(scope="module")
def superlink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("link") / "superlink.log"
    with Path(log).open("wb") as out:
        proc = subprocess.Popen(
            superlink_command(port, isolation="process"), stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "FLWR_HOME": str(log.parent)},
        )  # fmt: skip
    try:
        wait_port(port, 60, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def _client(superlink: str) -> tuple[FleetHttpClient, bytes]:
    """A Fleet API client as a SuperNode makes it (its own key pair, Flower's
    interceptors), and its public key."""
    private, public = generate_key_pairs()
    interceptors: list[Any] = [
        RuntimeVersionHttpInterceptor(component_name="SuperNode"),
        NodeAuthHttpInterceptor(private, public),
    ]
    client = FleetHttpClient.from_server_address(
        superlink.removeprefix("http://"), True, None, interceptors=interceptors
    )
    return client, public_key_to_bytes(public)


def test_a_retried_registration_of_its_own_key_activates_that_node(superlink: str) -> None:
    original = FleetHttpClient.RegisterNode
    theirs, their_key = _client(superlink)
    mine, my_key = _client(superlink)
    try:
        theirs.RegisterNode(RegisterNodeFleetRequest(public_key=their_key))  # (unwrapped)
        register.install()
        request = RegisterNodeFleetRequest(public_key=my_key)
        mine.RegisterNode(request)  # reached the SuperLink (its answer lost, say)
        mine.RegisterNode(request)  # Flower's retry: the registration it is
        got = mine.ActivateNode(ActivateNodeRequest(public_key=my_key, heartbeat_interval=30))
        assert got.node_id > 0
        with pytest.raises(httpx.HTTPStatusError) as e:  # a first try of a taken key
            theirs.RegisterNode(RegisterNodeFleetRequest(public_key=their_key))
        assert register.already_registered(e.value)
    finally:
        FleetHttpClient.RegisterNode = original  # type: ignore[method-assign]
        register._installed = False


def test_a_retried_activation_of_its_own_node_is_that_activation(superlink: str) -> None:
    """The first ``ActivateNode`` reached the SuperLink (its answer lost, say): Flower's
    retry is refused with code 2004, and the wrapped client answers with the node it
    activated, which the SuperLink holds online. An activation of a key this process
    did not try to activate before still fails as in Flower."""
    originals = FleetHttpClient.RegisterNode, FleetHttpClient.ActivateNode
    theirs, their_key = _client(superlink)
    mine, my_key = _client(superlink)
    try:
        theirs.RegisterNode(RegisterNodeFleetRequest(public_key=their_key))  # (unwrapped)
        theirs.ActivateNode(ActivateNodeRequest(public_key=their_key, heartbeat_interval=30))
        with pytest.raises(httpx.HTTPStatusError) as e:  # Flower's own answer to a retry
            theirs.ActivateNode(ActivateNodeRequest(public_key=their_key, heartbeat_interval=30))
        assert register.activation_failed(e.value)
        register.install()
        registered = mine.RegisterNode(RegisterNodeFleetRequest(public_key=my_key))
        request = ActivateNodeRequest(public_key=my_key, heartbeat_interval=30)
        first = mine.ActivateNode(request)
        again = mine.ActivateNode(request)  # Flower's retry: the activation it is
        assert first.node_id == again.node_id == registered.node_id > 0
        with pytest.raises(httpx.HTTPStatusError) as e:  # not this process's retry
            theirs.ActivateNode(ActivateNodeRequest(public_key=their_key, heartbeat_interval=30))
        assert register.activation_failed(e.value)
    finally:
        FleetHttpClient.RegisterNode, FleetHttpClient.ActivateNode = originals  # type: ignore[method-assign]
        register._installed = False
