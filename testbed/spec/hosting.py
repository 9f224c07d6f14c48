"""Several workloads in one spec: which nodes each runs on, and what each holds.

A spec's ``workload:`` may set several sections (``fl``, ``functions``, a registered
workload's own). Each fleet workload's section accepts ``nodes`` (names, or node ids
meaning all their replicas; default: every node) and ``gpu_slots`` (slots it holds on a
node for the whole run); see :class:`nodes.hosting.Hosted`. This module resolves them
and finds the problems that span sections, one ``path: message`` line each (the loader
adds the YAML line).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from nodes.hosting import Hosted

if TYPE_CHECKING:
    from testbed.spec.models import Experiment, FleetSpec

#: A GPU slot claim: (YAML path of the claim, section, node, slots).
Claim = tuple[str, str, str, int]


def section_models(exp: Experiment) -> dict[str, BaseModel]:
    """The sections ``exp.workload`` sets, in the spec's order, by name."""
    return {name: exp.workload.model_for(name) for name in exp.workload.sections}


def expand_names(refs: list[str], fleet: FleetSpec) -> list[str]:
    """Node names that ``refs`` (names, or ids of replicated nodes) stand for."""
    out: list[str] = []
    for n in fleet.nodes:
        for name in n.names():
            if (name in refs or n.id in refs) and name not in out:
                out.append(name)
    return out


def hosts(exp: Experiment) -> dict[str, tuple[str, ...]]:
    """Node name -> the sections that run on it (a section without ``nodes``: all)."""
    if exp.fleet is None:
        return {}
    every = [name for n in exp.fleet.nodes for name in n.names()]
    out: dict[str, list[str]] = {name: [] for name in every}
    for section, model in section_models(exp).items():
        if not isinstance(model, Hosted):
            continue
        on = every if model.nodes is None else expand_names(model.nodes, exp.fleet)
        for name in on:
            out[name].append(section)
    return {k: tuple(v) for k, v in out.items()}


def nodes_of(exp: Experiment, section: str) -> list[str]:
    """Node names ``section`` runs on."""
    return [name for name, secs in hosts(exp).items() if section in secs]


def links_lead_to(exp: Experiment) -> str:
    """The tier every node's link leads to: the FL server's (a node has one emulated
    link; beside FL every workload's traffic crosses it), else the functions' origin
    (default ``edge``), else ``cloud``."""
    fns = exp.workload.functions
    if fns is not None and exp.workload.fl is None:
        return fns.origin or "edge"  # requests come from the origin
    if exp.fleet is None:
        return "cloud"
    several = len(exp.workload.sections) > 1
    on = hosts(exp) if several else {}  # (one workload: on every node, no lookup)
    return next(
        (
            n.tier
            for n in exp.fleet.nodes
            if n.fl_role == "server" and (not several or "fl" in on[n.names()[0]])
        ),
        "cloud",
    )


def origin_errors(exp: Experiment) -> list[str]:
    """``workload.functions.origin`` beside FL other than the FL server's tier: the
    nodes' links lead there, so requests from elsewhere cannot be emulated."""
    fns, fl = exp.workload.functions, exp.workload.fl
    if fns is None or fl is None or fns.origin is None:
        return []
    tier = links_lead_to(exp)
    if fns.origin == tier:
        return []
    return [
        f"workload.functions.origin: {fns.origin!r}, but beside workload.fl every node's "
        f"link leads to the FL server's tier ({tier!r}): a node has one emulated link, so "
        f"requests can only enter from {tier!r}; set origin: {tier} (or leave it out)"
    ]


def own_link_errors(exp: Experiment) -> list[str]:
    """A node whose link a section makes its own (``own_link_nodes()``: semantic
    offload's devices, linked to their fog) that another section runs on too (its link
    leads elsewhere; a node has one emulated link)."""
    owned: list[tuple[str, str, str]] = []
    for s, m in section_models(exp).items():
        own: Any = getattr(m, "own_link_nodes", None)
        owned += [(s, path, node) for path, node in (own() if callable(own) else [])]
    on = hosts(exp) if owned else {}  # (every node's sections: only when asked)
    errors: list[str] = []
    for s, path, node in owned:
        others = [o for o in on.get(node, ()) if o != s]
        errors += [
            f"workload.{s}.{path}: node {node!r} also runs {others}; its link leads to "
            f"this workload's peer, and a node has one emulated link: give {s} nodes of "
            f"its own (leave {node!r} out of the other workloads' nodes)"
        ] if others else []
    return errors


def hosting_errors(exp: Experiment, names: list[str]) -> list[str]:
    """Unknown nodes in ``nodes``/``gpu_slots``, in-process workloads beside others,
    GPU slots claimed beyond a node's, a functions origin or a node's own link that
    cannot be shared, ``path: message`` each."""
    models = section_models(exp)
    errors: list[str] = []
    if len(models) > 1:
        errors += [
            f"workload.{s}: runs in the runner process, not on the fleet, so it cannot share "
            f"a run with other workloads (fleet workloads: {_fleet_sections(models)})"
            for s, m in models.items()
            if not isinstance(m, Hosted)
        ]
    ids = {n.id for n in exp.fleet.nodes} if exp.fleet else set()
    for s, m in models.items():
        if not isinstance(m, Hosted):
            continue
        errors += [
            f"workload.{s}.nodes.{i}: node {ref!r} is not defined in fleet.nodes "
            f"(defined: {sorted(names)})"
            for i, ref in enumerate(m.nodes or [])
            if ref not in names and ref not in ids
        ]
        pinned: list[tuple[str, str]] = getattr(m, "pinned_nodes", list)()
        refs = [(f"gpu_slots.{node}", node) for node in m.gpu_slots] + pinned
        if not refs:  # (nothing pinned: no node set to build)
            continue
        mine = set(names)
        if m.nodes is not None and exp.fleet is not None:
            mine = set(expand_names(m.nodes, exp.fleet))
        errors += [
            f"workload.{s}.{path}: node {node!r} is not one of this workload's "
            f"nodes ({sorted(mine)})"
            for path, node in refs
            if node in names and node not in mine
        ]
    errors += origin_errors(exp) + own_link_errors(exp) if exp.fleet is not None else []
    return errors + claim_errors(exp, models, names)


def _fleet_sections(models: dict[str, BaseModel]) -> list[str]:
    return [s for s, m in models.items() if isinstance(m, Hosted)]


def claims(models: dict[str, BaseModel]) -> list[Claim]:
    """Every GPU slot claim of the sections: ``gpu_slots`` and what a section's model
    claims itself (``gpu_claims()``: a function pinned to a node in ``gpu`` mode)."""
    out: list[Claim] = []
    for s, m in models.items():
        if not isinstance(m, Hosted):
            continue
        out += [(f"workload.{s}.gpu_slots.{n}", s, n, k) for n, k in m.gpu_slots.items()]
        own: Any = getattr(m, "gpu_claims", None)
        if callable(own):
            out += [(f"workload.{s}.{path}", s, n, k) for path, n, k in own()]
    return out


def claim_errors(exp: Experiment, models: dict[str, BaseModel], names: list[str]) -> list[str]:
    """A node's GPU slots claimed more times than it has, by two or more workloads (or
    reserved with ``gpu_slots`` on a node without a GPU): an error at the claim that
    overflows, naming every claim."""
    if exp.fleet is None:
        return []
    from testbed.spec.catalog import CATALOG

    known = {**CATALOG, **exp.profiles}
    claimed = claims(models)
    wanted = {c[2] for c in claimed}  # (the slots of the claimed nodes only)
    slots = {
        name: exp.profile_of(n).usable_gpu_slots
        for n in exp.fleet.nodes
        if wanted and (not isinstance(n.profile, str) or n.profile in known)
        for name in n.names()
        if name in wanted
    }
    by_node: dict[str, list[Claim]] = defaultdict(list)
    for c in claimed:
        if c[2] in slots:
            by_node[c[2]].append(c)
    errors: list[str] = []
    for node, cs in by_node.items():
        total, held = slots[node], 0
        for i, (path, _s, _n, k) in enumerate(cs):
            held += k
            multi = len({c[1] for c in cs[: i + 1]}) > 1 or path.split(".")[2] == "gpu_slots"
            if held > total and multi:
                listed = ", ".join(f"{p} ({n_})" for p, _x, _y, n_ in cs[: i + 1])
                errors.append(
                    f"{path}: {held} GPU slots of node {node!r} claimed ({listed}) but it has "
                    f"{total}; a GPU slot is held by one workload at a time"
                )
                break
    return errors
