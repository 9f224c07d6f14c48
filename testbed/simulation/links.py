"""The links of ``--backend simulation``: each link's kind prices it on the virtual clock.

A client's link on the virtual clock is what its link kind (``links.mode``, or the
link's own ``kind``) makes of the link's planned states:
:meth:`testbed.emulation.kinds.LinkKind.price` turns the planned segments (the link's
own parameters at 0, its ``schedule``, satellite passes) into the segments the clock's
:class:`~testbed.simulation.timeline.LinkTimeline` times transfers on. A kind that
cannot be priced (``mmwave``: its rate comes from a live radio simulation) refuses
with its reason, and :func:`check_links` turns that into an error naming the YAML path
before anything is recorded: a link is never silently unlimited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from testbed.emulation.kinds import Refused, link_kind
from testbed.emulation.link import LinkSchedule
from testbed.planner import own_link_replicas
from testbed.simulation.clock import ClientModel
from testbed.spec.hosting import links_lead_to

if TYPE_CHECKING:
    from testbed.planner import PlannedNode
    from testbed.spec.models import Experiment, LinkSpec


def priced(link: LinkSpec, mode: str, passes: LinkSchedule | None = None) -> LinkSchedule:
    """The link over virtual time as its kind prices it (``Refused`` saying why not).

    Parameters
    ----------
    link
        The planned link.
    mode
        ``links.mode``; ``none`` (links not emulated) keeps the planned states as
        they are, as before kinds priced links.
    passes
        Satellite passes (virtual seconds) that replace the link's own ``schedule``.
    """
    planned = link.link_schedule()
    if passes is not None:
        segs = dict([(0.0, link.params()), *passes.segments])
        planned = LinkSchedule(sorted(segs.items()))
    if mode == "none":
        return planned
    out = link_kind(link.kind_in(mode)).price(planned, **link.link_options())
    if not out.is_piecewise:
        raise Refused("its price is a function of time; the virtual clock needs segments")
    return out


def client_model(
    node: PlannedNode, mode: str, passes: LinkSchedule | None = None
) -> ClientModel:
    """The virtual clock's view of one client: stretch, tier and its priced link."""
    (_, first), *later = priced(node.uplink, mode, passes).segments  # (first: from 0)
    return ClientModel(
        stretch=max(1.0, 1.0 / node.profile.cpu_speed_factor),
        params=first,
        schedule=tuple(later),
        tier=node.tier,
    )


def check_links(exp: Experiment) -> None:
    """ValueError naming each client link the virtual clock cannot price, with its
    kind's reason (``links.nodes.edge-1.kind: kind: mmwave cannot be priced on the
    virtual clock: ...``)."""
    mode = exp.links.mode
    if mode == "none" or exp.fleet is None:
        return
    peer = links_lead_to(exp)
    errors: dict[str, str] = {}
    seen: set[int] = set()
    for spec in exp.fleet.nodes:
        if spec.fl_role != "client":
            continue
        # the entry's link (its first replica's, unless that one has its own) and each
        # replica's own: every distinct link once, not a lookup per replica
        own = own_link_replicas(exp, spec)
        plain = next((k for k in range(len(own) + 1) if k not in own), None)
        picks = [k for k in (plain, *own) if k is not None and k < spec.count]
        for k in picks:
            name = spec.id if spec.count == 1 else f"{spec.id}-{k + 1}"
            link = exp.links.for_node(name, spec, peer)
            if id(link) in seen:
                continue
            seen.add(id(link))
            try:
                priced(link, mode)
            except Refused as e:
                path = exp.links.kind_path(name, spec, peer)
                kind = link.kind_in(mode)
                errors[path] = f"{path}: kind: {kind} cannot be priced on the virtual clock: {e}"
    if errors:
        raise ValueError("; ".join(errors.values()))
