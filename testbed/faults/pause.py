"""Fault kind ``pause``: the node is frozen (every process of it stopped) for
``duration_s``, then thawed. Unlike an outage it keeps its connections and state: a
frozen node answers late (or after the round's deadline), it does not re-register.
On the simulation's virtual clock its compute and its link stop for ``duration_s``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from testbed.faults.base import FaultContext, FaultKind, FaultParams, register_fault

if TYPE_CHECKING:
    from testbed.simulation.vfaults import VirtualFaults


class PauseParams(FaultParams):
    """How long the node stays frozen."""

    duration_s: float = Field(gt=0, description="seconds the node stays frozen")


@register_fault("pause")
class Pause(FaultKind):
    """Freeze the node (``NodeHandle.pause``) and thaw it ``duration_s`` later."""

    Params = PauseParams
    label = "pause (node frozen for a while, keeps its state)"
    marker = "triangle-right"
    effects = ("node_paused", "node_resumed")

    def apply(self, ctx: FaultContext, name: str | None) -> None:
        assert name is not None
        ctx.backend.node(name).pause()
        ctx.event("node_paused", name, duration_s=self.params.duration_s)

    def undo_after_s(self) -> float:
        return float(self.params.duration_s)

    def undo(self, ctx: FaultContext, name: str | None, state: Any) -> None:
        assert name is not None
        ctx.backend.node(name).resume()
        ctx.event("node_resumed", name)

    def apply_virtual(self, vf: VirtualFaults, name: str, t: float, rnd: int) -> None:
        """Compute and link stopped during ``[t, t + duration_s)`` (nothing lost)."""
        end = t + float(self.params.duration_s)
        vf.freeze(name, t, end)
        vf.change_link(name, t, end, {"partitioned": True})  # nothing sent meanwhile
        vf.later(t, "node_paused", name, duration_s=self.params.duration_s)
        vf.later(end, "node_resumed", name)
