"""The node entry point: ``testbed node superlink|supernode ...`` (``python -m nodes``).

What runs ON a node is started by this command line, the same in every backend: a
local process, a process forked by the local backend's zygote, a container of the
Docker image. It lives in ``nodes`` (the data plane) so that a node process imports
nothing of the control plane (:mod:`testbed`); the control-plane CLI mounts this app
as its ``node`` sub-command. A mistake on the command line exits 2 with one message.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

node_app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Node entrypoint (used by every backend)."
)


@node_app.command("superlink")
def node_superlink(
    port: Annotated[int, typer.Option(help="port of all SuperLink APIs")] = 9092,
    host: str = "127.0.0.1",
    database: Annotated[str | None, typer.Option(help="SuperLink state file")] = None,
) -> None:
    """Run this node as the SuperLink (server) node."""
    from nodes.agent import run_superlink

    raise typer.Exit(run_superlink(port, host, database))


@node_app.command("supernode")
def node_supernode(
    superlink: Annotated[str, typer.Option(help="SuperLink address host:port")],
    port: Annotated[int, typer.Option(help="this SuperNode's Runtime API port")],
    node_config: Annotated[str, typer.Option(help="node identity as JSON")],
    cold: Annotated[bool, typer.Option(help="Flower's default cold subprocess isolation")] = False,
    ready_file: Annotated[str | None, typer.Option(help="written once warmed up")] = None,
    memory_mb: Annotated[int | None, typer.Option(help="memory cap of the node, MB")] = None,
    cpus: Annotated[str | None, typer.Option(help="pin to these CPUs, e.g. 0,1")] = None,
    nice: Annotated[
        int | None, typer.Option(min=0, max=19, help="scheduling priority of the node")
    ] = None,
) -> None:
    """Run this node as a SuperNode (client) with the warm executor."""
    from nodes.agent import run_supernode

    try:
        cfg = json.loads(node_config)
    except json.JSONDecodeError as e:
        raise typer.BadParameter(f"not JSON: {e}", param_hint="--node-config") from None
    try:
        cpu_list = [int(c) for c in cpus.split(",")] if cpus else None
    except ValueError:
        bad = f"not a list of CPU numbers: {cpus!r}"
        raise typer.BadParameter(bad, param_hint="--cpus") from None
    raise typer.Exit(
        run_supernode(
            superlink,
            port,
            cfg,
            warm=not cold,
            ready_file=ready_file,
            memory_mb=memory_mb,
            cpus=cpu_list,
            nice=nice,
        )
    )


def main() -> None:
    """``python -m nodes``: the node entry point on its own."""
    node_app(prog_name="testbed node")
