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


def hosting_errors(exp: Experiment, names: list[str]) -> list[str]:
    """Unknown nodes in ``nodes``/``gpu_slots``, in-process workloads beside others,
    GPU slots claimed beyond a node's, ``path: message`` each."""
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
        mine = set(names)
        if m.nodes is not None and exp.fleet is not None:
            mine = set(expand_names(m.nodes, exp.fleet))
        pinned: list[tuple[str, str]] = getattr(m, "pinned_nodes", list)()
        refs = [(f"gpu_slots.{node}", node) for node in m.gpu_slots] + pinned
        errors += [
            f"workload.{s}.{path}: node {node!r} is not one of this workload's "
            f"nodes ({sorted(mine)})"
            for path, node in refs
            if node in names and node not in mine
        ]
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
    slots = {
        name: exp.profile_of(n).usable_gpu_slots
        for n in exp.fleet.nodes
        if not isinstance(n.profile, str) or n.profile in known
        for name in n.names()
    }
    by_node: dict[str, list[Claim]] = defaultdict(list)
    for c in claims(models):
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
