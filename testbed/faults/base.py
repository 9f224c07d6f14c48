"""What a fault kind is: its parameters, its action on a target, its undo, its label.

A fault kind is one small class registered by name in :data:`FAULT_KINDS`::

    @register_fault("pause")
    class Pause(FaultKind):
        Params = PauseParams          # its own frozen pydantic model
        target = "node"               # "node", "link" or "server"
        label = "pause (node frozen for a while)"
        marker = "triangle-down"      # Vega-Lite point shape on the event timeline
        effects = ("node_paused", "node_resumed")

        def apply(self, ctx, name): ...        # through ctx.backend (Backend protocol)
        def undo(self, ctx, name, state): ...  # when undo_after_s() is not None
        def apply_virtual(self, vf, name, t, rnd): ...  # --backend simulation's clock

The spec (:class:`testbed.spec.models.FaultSpec`), the chaos engine, ``testbed
inject``, the controller's ``GET /faults`` and the dashboard all read the registry; a
new kind is one class in one file (see docs/faults.md), its effect on the
simulation's virtual clock (:meth:`FaultKind.apply_virtual`) included. A kind in a
user's own package needs no registration: ``kind: mypkg.faults:Leave`` in the YAML
imports and checks it (``self.spec.kind`` is then that path; ``name`` is set by
``register_fault`` only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from kernel.frozen import Frozen
from kernel.registry import Registry

if TYPE_CHECKING:
    from testbed.backends.base import Backend
    from testbed.simulation.vfaults import VirtualFaults
    from testbed.spec.models import FaultSpec

Target = Literal["node", "link", "server"]


class FaultParams(Frozen):
    """Base of every kind's parameters: frozen, unknown keys are errors."""


class FaultContext(Protocol):
    """What the chaos engine offers a fault kind while it acts."""

    backend: Backend
    round: int

    def event(self, name: str, node: str | None, round: int | None = None, **data: Any) -> None:
        """Record an event of the run (``round`` defaults to the current one)."""
        ...

    def later(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` ``delay_s`` seconds from now (from the engine's loop)."""
        ...

    def node_down(self, node: str, reason: str, kind: str) -> None:
        """Book ``node`` as down (``node_down`` event; rejoin tracking)."""
        ...

    def release(self, node: str, kind: str) -> bool:
        """A fault of ``kind`` that took ``node`` down ends: True when no other fault
        still holds it down (the kind restarts it, then calls :meth:`node_restarted`);
        False: it stays down (``node_held`` event)."""
        ...

    def node_restarted(self, node: str) -> None:
        """Book ``node`` as back (``node_restarted`` event; ``node_rejoined`` follows)."""
        ...


class FaultKind:
    """One kind of fault, bound to one :class:`FaultSpec` (its trigger and target).

    Class attributes
    ----------------
    name : str
        Registered name (set by :func:`register_fault`).
    Params : type[FaultParams]
        The kind's parameters (fields of the fault's YAML entry).
    target : {"node", "link", "server"}
        What it acts on: a client node, a client node's link, or the SuperLink.
    label : str
        One line for the dashboard's kind picker and the fleet view.
    marker : str
        Vega-Lite point shape of its events on the timeline.
    effects : tuple of str
        Names of the events its action records (what the fault did).
    not_simulated : str
        Why ``--backend simulation`` refuses the kind while it keeps the base's
        :meth:`apply_virtual` (a kind that overrides it is simulated).
    """

    name: ClassVar[str] = ""
    Params: ClassVar[type[FaultParams]] = FaultParams
    target: ClassVar[Target] = "node"
    label: ClassVar[str] = ""
    marker: ClassVar[str] = "diamond"
    effects: ClassVar[tuple[str, ...]] = ()
    not_simulated: ClassVar[str] = "it has no effect on the virtual clock (apply_virtual)"

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec
        self.params: Any = spec.params

    def apply(self, ctx: FaultContext, name: str | None) -> Any:
        """Act on target ``name`` (None for the server) now; return what ``undo`` needs.

        Raise ``NotImplementedError`` (with the reason) when the backend cannot do it:
        the engine records ``fault_rejected``.
        """
        raise NotImplementedError(f"fault kind {self.name!r} has no action")

    def undo_after_s(self) -> float | None:
        """Seconds after ``apply`` to call ``undo`` (None: the fault is not timed)."""
        return None

    def undo(self, ctx: FaultContext, name: str | None, state: Any) -> None:
        """Reverse ``apply`` (called ``undo_after_s()`` seconds later)."""

    def apply_virtual(self, vf: VirtualFaults, name: str, t: float, rnd: int) -> None:
        """What the fault does to client ``name`` on ``--backend simulation``'s virtual
        clock, from virtual ``t`` (seconds since the fleet was ready); ``rnd`` is the
        round it counts in.

        Book the effect through ``vf`` (:class:`testbed.simulation.vfaults.VirtualFaults`:
        ``down``, ``freeze``, ``change_link``, ``slow``, ``control``) and its events with
        ``vf.later``; the effect and its undo are both decided now, on virtual time.
        The base means "not simulated": the simulation's preflight refuses the kind with
        :attr:`not_simulated` (:meth:`simulated`).
        """
        raise NotImplementedError(f"fault kind {self.name!r}: {self.not_simulated}")

    @classmethod
    def live(cls) -> bool:
        """Whether the kind acts on a running fleet (overrides :meth:`apply`): only those
        are offered for live injection (``GET /faults``, the dashboard's Chaos page)."""
        return cls.apply is not FaultKind.apply

    @classmethod
    def simulated(cls) -> bool:
        """Whether the kind has an effect on the virtual clock (overrides
        :meth:`apply_virtual`)."""
        return cls.apply_virtual is not FaultKind.apply_virtual

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """The kind for the controller's ``GET /faults`` (label, marker, parameters)."""
        schema = cls.Params.model_json_schema()
        return {
            "label": cls.label or cls.name,
            "marker": cls.marker,
            "target": cls.target,
            "effects": list(cls.effects),
            "simulated": cls.simulated(),
            "live": cls.live(),
            "params": schema.get("properties", {}),
            "required": list(schema.get("required", [])),
        }


def _fault_kind_class(obj: object) -> type[FaultKind]:
    """Accept a :class:`FaultKind` subclass named by dotted path (a user's own kind)."""
    if not (isinstance(obj, type) and issubclass(obj, FaultKind)):
        raise TypeError(f"must be a subclass of testbed.faults.FaultKind, got {obj!r}")
    return obj


#: Fault kinds by name; ``kind: package.module:Class`` names a kind outside the testbed.
FAULT_KINDS: Registry[type[FaultKind]] = Registry(
    "fault kind", validate=_fault_kind_class, builtins="testbed.faults"
)


def register_fault(name: str) -> Callable[[type[FaultKind]], type[FaultKind]]:
    """Class decorator: register a :class:`FaultKind` subclass as ``name``."""

    def deco(cls: type[FaultKind]) -> type[FaultKind]:
        cls.name = name
        return FAULT_KINDS.register(name)(cls)

    return deco
