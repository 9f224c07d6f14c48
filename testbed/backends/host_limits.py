"""Node limits against the host: a profile above this machine is refused or capped, and
said, never silently passed on.

A node container gets its device profile's cores and memory as engine limits
(:func:`testbed.backends.docker_node.container_limits`). The host is this machine: the
engine runs here (containers share its loopback), so its CPUs and memory bound what a
container can have. Where a profile asks for more:

- **cores**: a container gets at most the host's CPUs (the engine refuses a larger
  quota). CPU time is shared anyway, and a device's speed is emulated by its
  ``cpu_speed_factor``, not by its core count; the run records every node so capped
  (``limits_capped`` in its summary) and ``testbed validate`` prints them.
- **memory** of a **built-in** profile (:data:`testbed.spec.catalog.CATALOG`, not
  redefined by the spec's ``profiles:``), a documented MODEL of a real device (a 256 GB
  H100 VM, a 64 GB fog server): the container gets the host's memory, recorded the
  same way.
- **memory** of a profile **the spec defines** (inline or under ``profiles:``) is a
  request for that memory: above the host it is refused before anything starts, naming
  the node, the profile and the host's figure, unless ``testbed run --oversubscribe``;
  oversubscribed, the engine gets the profile's memory (recorded).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from testbed.backends.base import NotSupported
from testbed.planner import Plan
from testbed.spec.catalog import CATALOG, DeviceProfile
from testbed.spec.models import Experiment

OVERSUBSCRIBE = "--oversubscribe"


@dataclass(frozen=True)
class Host:
    """What this machine can give one container: CPUs (this process's affinity) and
    total memory, MB."""

    cpus: int
    memory_mb: int

    @classmethod
    def measure(cls) -> Host:
        import psutil

        return cls(len(os.sched_getaffinity(0)), psutil.virtual_memory().total // 2**20)

    def __str__(self) -> str:
        return f"this host's {self.cpus} CPUs and {self.memory_mb} MB"


def above_host(profile: DeviceProfile, host: Host) -> list[str]:
    """What of ``profile`` exceeds ``host`` ("32 cores > 2", ...); empty if it fits."""
    out = []
    if profile.cpu_cores > host.cpus:
        out.append(f"{profile.cpu_cores} cores > {host.cpus}")
    if profile.memory_mb > host.memory_mb:
        out.append(f"{profile.memory_mb} MB > {host.memory_mb} MB")
    return out


def is_modelled(exp: Experiment, profile_name: str) -> bool:
    """Whether ``profile_name`` is a built-in device model (not the spec's own)."""
    return profile_name in CATALOG and profile_name not in exp.profiles


def check_limits(exp: Experiment, host: Host, oversubscribe: bool = False) -> None:
    """Refuse a node whose spec-defined profile has more memory than ``host`` (unless
    ``oversubscribe``).

    Raises
    ------
    NotSupported
        ``fleet.nodes.<i>.profile: node 'x' (profile 'p': 1048576 MB > 24105 MB) is
        above this host ...`` with what to do.
    """
    if oversubscribe or exp.fleet is None:
        return
    for i, spec in enumerate(exp.fleet.nodes):
        names = sorted(spec.profile_mix) or [
            spec.profile if isinstance(spec.profile, str) else f"{spec.id}-inline"
        ]
        for name in names:
            if is_modelled(exp, name):
                continue
            profile = exp.profile_of(
                spec.model_copy(update={"profile": name}) if spec.profile_mix else spec
            )
            if profile.memory_mb > host.memory_mb:
                field = "profile_mix" if spec.profile_mix else "profile"
                raise NotSupported(
                    f"fleet.nodes.{i}.{field}: node {spec.id!r} (profile {name!r}: "
                    f"{', '.join(above_host(profile, host))}) is above {host}: its "
                    "container cannot have that memory; lower the profile's memory_mb, or "
                    f"pass {OVERSUBSCRIBE} to give the engine the profile's memory anyway "
                    "(recorded in the run)"
                )


def capped(plan: Plan, host: Host, oversubscribe: bool = False) -> dict[str, str]:
    """Node -> what its container gets instead of its profile, for every node above
    ``host`` (empty when all fit): the run's ``limits_capped`` summary entry."""
    out: dict[str, str] = {}
    for node in plan.nodes:
        over = above_host(node.profile, host)
        if not over:
            continue
        p = node.profile
        cores = min(p.cpu_cores, host.cpus)
        memory = p.memory_mb if oversubscribe else min(p.memory_mb, host.memory_mb)
        how = (
            "oversubscribed"
            if oversubscribe
            else (
                "modelled device" if is_modelled(plan.experiment, node.profile_name) else "capped"
            )
        )
        out[node.name] = (
            f"{node.profile_name} ({', '.join(over)}): {cores} cores, {memory} MB ({how})"
        )
    return out


def grouped(capped_nodes: dict[str, str], shown: int = 3) -> list[str]:
    """:func:`capped`'s entries as lines, nodes with the same outcome on one line
    (``edge-1, edge-2, ... (40 nodes): jetson-orin-nano (6 cores > 2): ...``)."""
    by_why: dict[str, list[str]] = {}
    for node, why in capped_nodes.items():
        by_why.setdefault(why, []).append(node)
    out = []
    for why, nodes in by_why.items():
        names = ", ".join(nodes[:shown]) + (", ..." if len(nodes) > shown else "")
        count = f" ({len(nodes)} nodes)" if len(nodes) > 1 else ""
        out.append(f"{names}{count}: {why}")
    return out
