"""Fault kinds that act on the server: superlink-restart."""

from __future__ import annotations

from testbed.faults.base import FaultContext, FaultKind, register_fault
from testbed.faults.node import NoParams


@register_fault("superlink-restart")
class SuperlinkRestart(FaultKind):
    """SIGKILL of the SuperLink and a restart on the same port and state database (its
    SuperExec and the ServerApp survive; pushes cut by it are pushed again)."""

    Params = NoParams
    target = "server"
    label = "SuperLink restart"
    marker = "circle"
    not_simulated = (
        "there is no SuperLink to restart (Flower's Simulation Engine keeps its LinkState "
        "in memory, in the simulation's own process)"
    )

    def apply(self, ctx: FaultContext, name: str | None) -> None:
        ctx.backend.restart_superlink()
