"""Fault kinds that act on a client node's link: partition, degrade.

Each acts through the backend's links (:class:`testbed.emulation.link.Link`); a run
without emulated links (``links.mode: none``) rejects them (``fault_rejected``). On the
simulation's virtual clock they change the client's modelled link for a while.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from pydantic import Field, create_model, model_validator
from pydantic.fields import FieldInfo

from testbed.emulation.link import LinkParams
from testbed.faults.base import FaultContext, FaultKind, FaultParams, register_fault
from testbed.spec.models import LinkState

if TYPE_CHECKING:
    from testbed.emulation.link import Link
    from testbed.simulation.vfaults import VirtualFaults

LINK_KEYS = tuple(k for k in LinkParams.field_names() if k != "partitioned")  # a degrade's


def link_of(ctx: FaultContext, name: str | None, what: str) -> Link:
    """The emulated link of node ``name`` (NotImplementedError when links are off)."""
    link = ctx.backend.links.get(name or "")
    if link is None:
        raise NotImplementedError(f"{what} needs emulated links (links.mode: proxy or netem)")
    return link


class PartitionParams(FaultParams):
    """A link blackholed for a while."""

    duration_s: float = Field(gt=0, description="seconds the link stays cut")


class _Degrade(FaultParams):
    """New link properties, for a while or for good."""

    duration_s: float | None = Field(None, gt=0, description="seconds before the link is restored")

    @model_validator(mode="after")
    def _some_change(self) -> _Degrade:
        if not self.changes():
            raise ValueError(f"a degrade fault needs one of {', '.join(LINK_KEYS)}")
        return self

    def changes(self) -> dict[str, float]:
        """The link properties the fault sets."""
        values = {k: getattr(self, k) for k in LINK_KEYS}
        return {k: v for k, v in values.items() if v is not None}


def _new_value(name: str) -> tuple[Any, Any]:
    """A degrade's ``name``: the spec link's field with its bounds, unset by default."""
    field = LinkState.model_fields[name]
    info = FieldInfo.merge_field_infos(field, default=None, description=f"new {name}")
    return Optional[field.annotation], info  # noqa: UP045  (a runtime type expression)


#: A degrade's parameters: every link property (the spec link's fields and bounds, so
#: the list of link fields is declared once) as an optional new value, and duration_s.
_NEW: dict[str, Any] = {k: _new_value(k) for k in LINK_KEYS}
DegradeParams = create_model("DegradeParams", __base__=_Degrade, __module__=__name__, **_NEW)


@register_fault("partition")
class Partition(FaultKind):
    """The node's link holds all traffic (connections kept) for ``duration_s``."""

    Params = PartitionParams
    target = "link"
    label = "partition (link blackholed for a while)"
    marker = "stroke"
    effects = ("link_partitioned", "link_healed")

    def apply(self, ctx: FaultContext, name: str | None) -> None:
        link_of(ctx, name, "partition").partition(True)
        ctx.event("link_partitioned", name, duration_s=self.params.duration_s)

    def undo_after_s(self) -> float:
        return float(self.params.duration_s)

    def undo(self, ctx: FaultContext, name: str | None, state: Any) -> None:
        link_of(ctx, name, "partition").partition(False)
        ctx.event("link_healed", name)

    def apply_virtual(self, vf: VirtualFaults, name: str, t: float, rnd: int) -> None:
        """Link partitioned during ``[t, t + duration_s)`` (traffic held, then sent)."""
        end = t + float(self.params.duration_s)
        vf.change_link(name, t, end, {"partitioned": True})
        vf.later(t, "link_partitioned", name, duration_s=self.params.duration_s)
        vf.later(end, "link_healed", name)


@register_fault("degrade")
class Degrade(FaultKind):
    """The node's link changes bandwidth / latency / jitter / loss now (connections
    kept), and is restored after ``duration_s`` when given."""

    Params = DegradeParams
    target = "link"
    label = "degrade link (bandwidth / latency / loss)"
    marker = "wedge"
    effects = ("link_degraded", "link_restored")

    def apply(self, ctx: FaultContext, name: str | None) -> dict[str, Any]:
        link = link_of(ctx, name, "changing a link")
        changes = self.params.changes()
        before = link.params
        link.set_params(before.replace(**changes))
        ctx.event("link_degraded", name, duration_s=self.params.duration_s, **changes)
        return {k: getattr(before, k) for k in changes}  # what undo puts back

    def undo_after_s(self) -> float | None:
        duration: float | None = self.params.duration_s
        return duration

    def undo(self, ctx: FaultContext, name: str | None, state: Any) -> None:
        link = link_of(ctx, name, "changing a link")
        link.set_params(link.params.replace(**state))
        ctx.event("link_restored", name, **state)

    def apply_virtual(self, vf: VirtualFaults, name: str, t: float, rnd: int) -> None:
        """Link values changed from ``t`` (for ``duration_s``, or to the end)."""
        changes, d = self.params.changes(), self.params.duration_s
        end = None if d is None else t + float(d)
        vf.change_link(name, t, end, changes)
        vf.later(t, "link_degraded", name, duration_s=d, **changes)
        if end is not None:
            vf.later(end, "link_restored", name)
