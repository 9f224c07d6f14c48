"""Fault kinds that act on a client node: crash, outage, flapping, straggler, misconfig.

Each acts through the backend's node handle (:class:`testbed.backends.base.NodeHandle`):
``kill``/``start`` for the node's process (or container), ``set_control`` for the live
controls its ClientApp reads at every task (slowdown, misconfiguration). On the
simulation's virtual clock (``apply_virtual``): down spans, a compute factor per round,
the same control file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from nodes.device_control import NodeControl
from testbed.faults.base import FaultContext, FaultKind, FaultParams, register_fault

if TYPE_CHECKING:
    from testbed.simulation.vfaults import VirtualFaults

DOWN_EFFECTS = ("node_down", "node_held", "node_restarted", "node_rejoined")
RESTORE_POLL_S = 1.0  # how often a throttled straggler checks whether its rounds are over


class NoParams(FaultParams):
    """A kind without parameters of its own."""


class DownParams(FaultParams):
    """A node down for a while."""

    duration_s: float = Field(gt=0, description="seconds the node stays down")


class FlappingParams(DownParams):
    """Repeated outages."""

    repeat: int = Field(3, ge=1, description="down/up cycles")


class StragglerParams(FaultParams):
    """A node that computes slower."""

    factor: float = Field(gt=0, description="slowdown of compute time, e.g. 3.0")
    rounds: int | None = Field(None, ge=1, description="rounds affected (None: to the end)")


class MisconfigParams(FaultParams):
    """A node that sends faulty updates."""

    mode: Literal["lr", "label-flip", "noise", "nan"] = Field(
        description="lr (learning rate x factor), label-flip, noise (std factor), nan"
    )
    factor: float | None = Field(None, gt=0, description="lr multiplier or noise std")
    rounds: int | None = Field(None, ge=1, description="rounds affected (None: to the end)")


def covered(phase: str, rnd: int, rounds: int | None) -> tuple[int, int | None]:
    """First and last round a fault that lasts ``rounds`` rounds applies to (last None:
    to the end) when it fires in round ``rnd`` (``phase`` of its trigger)."""
    first = max(rnd, 1) if phase == "during" else rnd + 1
    return first, None if rounds is None else first + rounds - 1


def until_round(ctx: FaultContext, phase: str, rounds: int | None) -> int | None:
    """Last round a fault that lasts ``rounds`` rounds applies to (None: to the end)."""
    return covered(phase, ctx.round, rounds)[1]


@register_fault("crash")
class Crash(FaultKind):
    """SIGKILL of the node (no goodbye); it never returns."""

    Params = NoParams
    label = "crash (node killed, never returns)"
    marker = "cross"
    effects = ("node_down",)

    def apply(self, ctx: FaultContext, name: str | None) -> None:
        assert name is not None
        ctx.backend.node(name).kill()
        ctx.node_down(name, "crash (never returns)", self.name)

    def apply_virtual(self, vf: VirtualFaults, name: str, t: float, rnd: int) -> None:
        """Down from ``t`` on."""
        vf.down(name, t, None, rnd=rnd, kind=self.spec.kind, why="crash (never returns)")


@register_fault("outage")
class Outage(FaultKind):
    """The node is killed, and started again (same identity) ``duration_s`` later."""

    Params = DownParams
    label = "outage (node down for a while, then rejoins)"
    marker = "square"
    effects = DOWN_EFFECTS

    def apply(self, ctx: FaultContext, name: str | None) -> int:
        assert name is not None
        ctx.backend.node(name).kill()
        ctx.node_down(name, f"{self.name} for {self.params.duration_s} s", self.name)
        return 1

    def undo_after_s(self) -> float:
        return float(self.params.duration_s)

    def undo(self, ctx: FaultContext, name: str | None, state: Any) -> None:
        assert name is not None
        if ctx.release(name, self.name):  # (another fault may still hold it down)
            ctx.backend.node(name).start()
            ctx.node_restarted(name)

    def apply_virtual(self, vf: VirtualFaults, name: str, t: float, rnd: int) -> None:
        """Down during ``[t, t + duration_s)``."""
        self._down_cycles(vf, name, t, rnd, 1)

    def _down_cycles(self, vf: VirtualFaults, name: str, t: float, rnd: int, n: int) -> None:
        """``n`` times down ``duration_s`` then up ``duration_s``, from ``t``."""
        d = float(self.params.duration_s)
        why = f"{self.spec.kind} for {d} s"
        for k in range(n):
            start = t + 2 * k * d
            vf.down(name, start, start + d, rnd=rnd, kind=self.spec.kind, why=why)


@register_fault("flapping")
class Flapping(Outage):
    """``repeat`` outages of ``duration_s`` each, ``duration_s`` apart."""

    Params = FlappingParams
    label = "flapping (repeated outages)"
    marker = "triangle-up"

    def undo(self, ctx: FaultContext, name: str | None, state: Any) -> None:
        super().undo(ctx, name, state)
        cycle = int(state)
        if cycle < self.params.repeat:

            def again() -> None:
                self.apply(ctx, name)
                ctx.later(self.undo_after_s(), lambda: self.undo(ctx, name, cycle + 1))

            ctx.later(self.undo_after_s(), again)

    def apply_virtual(self, vf: VirtualFaults, name: str, t: float, rnd: int) -> None:
        """``repeat`` times down ``duration_s`` then up ``duration_s``, from ``t``."""
        self._down_cycles(vf, name, t, rnd, int(self.params.repeat))


@register_fault("straggler")
class Straggler(FaultKind):
    """The node's compute takes ``factor`` times longer for ``rounds`` rounds.

    Everywhere: the node's control file stretches its measured compute by ``factor``
    (``device_time_s``). On a backend whose node handle can ``throttle`` (docker), the
    container's CPU quota is also cut to its cores / ``factor`` live (``docker update``:
    real CFS throttling, ``cpu_throttled`` event) and given back after the last
    affected round (``cpu_restored``, with the throttled periods and time the engine
    counted meanwhile).
    """

    Params = StragglerParams
    label = "straggler (node computes slower)"
    marker = "triangle-down"
    effects = ("straggler_set", "cpu_throttled", "cpu_restored")

    def apply(self, ctx: FaultContext, name: str | None) -> None:
        assert name is not None
        until = until_round(ctx, self.spec.phase, self.params.rounds)
        control = NodeControl(slowdown=self.params.factor, until_round=until)
        handle = ctx.backend.node(name)
        handle.set_control(control)
        ctx.event("straggler_set", name, factor=self.params.factor, until_round=until)
        throttle = getattr(handle, "throttle", None)
        if callable(throttle):  # docker: a real CPU quota throttle of the container too
            ctx.event("cpu_throttled", name, until_round=until, **throttle(self.params.factor))
            if until is not None:
                self._restore_after(ctx, handle, name, until)

    @staticmethod
    def _restore_after(ctx: FaultContext, handle: Any, name: str, until: int) -> None:
        """Give the container its CPU quota back once round ``until`` is over
        (``cpu_restored`` with the throttling the engine saw meanwhile)."""

        def check() -> None:
            if ctx.round > until:
                ctx.event("cpu_restored", name, **handle.unthrottle())
            else:
                ctx.later(RESTORE_POLL_S, check)

        ctx.later(RESTORE_POLL_S, check)

    def apply_virtual(self, vf: VirtualFaults, name: str, t: float, rnd: int) -> None:
        """Compute x ``factor`` in the rounds it covers."""
        first, last = covered(self.spec.phase, rnd, self.params.rounds)
        vf.slow(name, first, last, float(self.params.factor))
        vf.later(t, "straggler_set", name, factor=self.params.factor, until_round=last)


@register_fault("misconfig")
class Misconfig(FaultKind):
    """The node trains with a bad learning rate, flipped labels, noise or NaN."""

    Params = MisconfigParams
    label = "misconfig (bad learning rate, flipped labels, noise, NaN)"
    marker = "diamond"
    effects = ("misconfig_set",)

    def apply(self, ctx: FaultContext, name: str | None) -> None:
        assert name is not None
        p = self.params
        until = until_round(ctx, self.spec.phase, p.rounds)
        control = NodeControl(misconfig=p.mode, factor=p.factor or 1.0, until_round=until)
        ctx.backend.node(name).set_control(control)
        ctx.event("misconfig_set", name, mode=p.mode, factor=p.factor, until_round=until)

    def apply_virtual(self, vf: VirtualFaults, name: str, t: float, rnd: int) -> None:
        """The ClientApp's control file (as on the local backend) from its first round."""
        p = self.params
        first, last = covered(self.spec.phase, rnd, p.rounds)
        control = NodeControl(misconfig=p.mode, factor=p.factor or 1.0, until_round=last)
        vf.control(name, first, control)
        vf.later(t, "misconfig_set", name, mode=p.mode, factor=p.factor, until_round=last)
