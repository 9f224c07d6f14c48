"""One node container of the Docker backend as the fault kinds see it (``NodeHandle``),
and how a device profile becomes container limits."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docker.errors import APIError, NotFound

from nodes.device_control import NodeControl, write_control

if TYPE_CHECKING:
    from docker.models.containers import Container

    from testbed.backends.docker import DockerBackend
    from testbed.planner import PlannedNode
    from testbed.spec.models import Experiment

PERIOD_US = 100_000  # CFS period of a CPU quota, microseconds


def container_limits(
    node: PlannedNode,
    index: int,
    host_cpus: list[int],
    host_memory_mb: int | None = None,
    oversubscribe: bool = False,
) -> dict[str, Any]:
    """Container limits from the node's device profile.

    Parameters
    ----------
    node : PlannedNode
        The node; its profile gives ``cpu_cores`` and ``memory_mb``.
    index : int
        The node's position among the clients (for round-robin cpusets).
    host_cpus : list of int
        The CPUs this process may use.
    host_memory_mb : int, optional
        This host's memory: the memory limit is at most that unless ``oversubscribe``
        (:mod:`testbed.backends.host_limits` refuses or records it before the start).
    oversubscribe : bool
        Give the engine the profile's memory even above the host's.

    Returns
    -------
    dict
        ``containers.run`` keyword arguments: ``cpu_period``/``cpu_quota`` (the
        profile's cores, at most the host's, microseconds per period), ``cpuset_cpus``
        (only when the profile has fewer cores than the host, as the local backend pins)
        and ``mem_limit``/``memswap_limit`` (``memory_mb``, at most the host's unless
        ``oversubscribe``; no swap on top).
    """
    k = node.profile.cpu_cores
    cores = min(k, len(host_cpus))
    memory = node.profile.memory_mb
    if host_memory_mb is not None and not oversubscribe:
        memory = min(memory, host_memory_mb)
    mem = f"{int(memory)}m"
    out: dict[str, Any] = {
        "cpu_period": PERIOD_US,
        "cpu_quota": cores * PERIOD_US,
        "mem_limit": mem,
        "memswap_limit": mem,
    }
    if k < len(host_cpus):
        pins = {host_cpus[(index * k + j) % len(host_cpus)] for j in range(k)}
        out["cpuset_cpus"] = ",".join(str(c) for c in sorted(pins))
    return out


def in_image(cmd: list[str]) -> list[str]:
    """``cmd`` as a container of the image runs it: this interpreter (``sys.executable``,
    a path of this host) becomes the image's ``python``."""
    return ["python", *cmd[1:]] if cmd and cmd[0] == sys.executable else list(cmd)


def input_dirs(exp: Experiment, run_dir: Path) -> tuple[str, ...]:
    """Folders a node container needs from the host, mounted read-only at the runner's
    paths: those of the experiment's function modules (``workload.functions``, imported
    by path) and of every file or folder the resolved spec names (datasets, traces,
    apps: absolute after loading, :data:`kernel.frozen.SpecPath`). Those under the run
    folder are there already."""
    from nodes.functions.workloads import module_path

    spec = getattr(exp.workload, "functions", None)
    fns = spec.functions if spec is not None else ()
    dirs = {str(module_path(fn.module).resolve().parent) for fn in fns}
    for value in _strings(exp.model_dump(mode="json")):
        path = Path(value)
        if path.is_absolute() and path != Path("/") and path.exists():
            dirs.add(str(path if path.is_dir() else path.parent))
    return tuple(sorted(d for d in dirs if d != "/" and not Path(d).is_relative_to(run_dir)))


def _strings(value: Any) -> list[str]:
    """Every string in a dumped spec (nested dicts and lists)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def memory_mb_of(usage: int, cache: int) -> float:
    """A container's memory as ``docker stats`` shows it: usage less inactive page
    cache, bytes -> MB."""
    return max(0, int(usage) - int(cache)) / 2**20


class ContainerProcess:
    """A container as a ``Process`` (``poll``: None while it runs or is paused)."""

    def __init__(self, container: Container) -> None:
        self.container = container
        self.returncode: int | None = None

    def poll(self) -> int | None:
        try:
            self.container.reload()
        except NotFound:
            self.returncode = -9
            return self.returncode
        state = self.container.attrs["State"]
        if state.get("Status") in ("running", "paused", "restarting", "created"):
            return None
        self.returncode = int(state.get("ExitCode", -1))
        return self.returncode


class DockerNode:
    """A client node of a :class:`~testbed.backends.docker.DockerBackend` (``NodeHandle``).

    Parameters
    ----------
    backend : DockerBackend
        The fleet the node belongs to.
    name : str
        The node's name.
    """

    def __init__(self, backend: DockerBackend, name: str) -> None:
        self.backend, self.name = backend, name

    @property
    def container(self) -> Container:
        return self.backend.containers[self.name]

    def kill(self) -> None:
        """Crash: ``docker kill`` (SIGKILL to the container's init, no goodbye)."""
        if self.name in self.backend.paused:
            self.resume()
        self.backend.downed.add(self.name)
        self._ignore_gone(self.container.kill)

    def stop(self) -> None:
        """Clean stop: ``docker stop`` (SIGTERM, SIGKILL after 5 s)."""
        if self.name in self.backend.paused:
            self.resume()
        self.backend.downed.add(self.name)
        self._ignore_gone(lambda: self.container.stop(timeout=5))

    def start(self) -> None:
        """Start the same container again (same command, port and name)."""
        self.backend.start_node(self.name)

    def pause(self) -> None:
        """Freeze every process of the container (``docker pause``, cgroup freezer)."""
        self.container.pause()
        self.backend.paused.add(self.name)

    def resume(self) -> None:
        """Thaw the container (``docker unpause``)."""
        self._ignore_gone(self.container.unpause)
        self.backend.paused.discard(self.name)

    def update_limits(
        self, *, cpus: float | None = None, memory_mb: int | None = None
    ) -> dict[str, Any]:
        """Change the container's CPU quota (cores, may be fractional) and/or memory
        limit (MB) live with ``docker update``; return what was applied."""
        if cpus is not None and cpus <= 0:
            raise ValueError(f"cpus must be > 0, got {cpus}")
        if memory_mb is not None and memory_mb <= 0:
            raise ValueError(f"memory_mb must be > 0, got {memory_mb}")
        kw: dict[str, Any] = {}
        applied: dict[str, Any] = {}
        if cpus is not None:
            quota = max(1000, int(cpus * PERIOD_US))
            kw.update(cpu_period=PERIOD_US, cpu_quota=quota)
            applied["cpus"] = f"docker cpu_quota={quota} per {PERIOD_US}"
        if memory_mb is not None:
            kw.update(mem_limit=f"{memory_mb}m", memswap_limit=f"{memory_mb}m")
            applied["memory"] = f"docker memory={int(memory_mb) * 2**20}"
        if kw:
            self.container.update(**kw)
        return applied

    def throttle(self, factor: float) -> dict[str, Any]:
        """Straggler: cut the container's CPU quota to its profile's cores / ``factor``
        live (``docker update``); return the quotas (before, now) and the engine's
        throttling counters at this instant (kept for :meth:`unthrottle`)."""
        if factor <= 0:
            raise ValueError(f"factor must be > 0, got {factor}")
        base = self.backend.base_cpus.get(self.name, 1.0)
        applied = self.update_limits(cpus=base / factor)
        self.backend.throttled[self.name] = self._throttling()
        return {
            "factor": factor,
            "cpus_before": base,
            "cpus": round(base / factor, 4),
            "applied": applied["cpus"],
        }

    def unthrottle(self) -> dict[str, Any]:
        """Give the container its profile's CPU quota back; return what was applied and
        the throttling the engine counted since :meth:`throttle` (``throttled_periods``
        of ``periods``, ``throttled_s``)."""
        base = self.backend.base_cpus.get(self.name, 1.0)
        before = self.backend.throttled.pop(self.name, {})
        now = self._throttling()
        applied = self.update_limits(cpus=base)
        out: dict[str, Any] = {"cpus": base, "applied": applied["cpus"]}
        if now.get("periods", 0) < before.get("periods", 0):
            before = {}  # the container was started again meanwhile: its counters restarted
        for key in ("periods", "throttled_periods"):
            out[key] = now.get(key, 0) - before.get(key, 0)
        out["throttled_s"] = (now.get("throttled_time", 0) - before.get("throttled_time", 0)) / 1e9
        return out

    def _throttling(self) -> dict[str, int]:
        """The container's CFS counters from the engine's stats (``periods``,
        ``throttled_periods``, ``throttled_time`` ns); empty if it is not running."""
        try:
            stats: Any = self.container.stats(stream=False)
        except (NotFound, APIError):
            return {}
        data = ((stats or {}).get("cpu_stats") or {}).get("throttling_data") or {}
        return {k: int(v) for k, v in data.items()}

    def set_control(self, control: NodeControl) -> None:
        """Write the node's live fault controls (a file in the run folder, which the
        container sees at the same path)."""
        write_control(self.backend.control_path(self.name), control)

    def alive(self) -> bool:
        """True while the container runs (or is paused)."""
        return self.backend.proc(self.name).poll() is None

    def _ignore_gone(self, action: Any) -> None:
        """Run an engine action; a container already gone (or not running) is fine."""
        try:
            action()
        except NotFound:
            pass
        except APIError as e:
            if "is not running" not in str(e) and "is not paused" not in str(e):
                raise
