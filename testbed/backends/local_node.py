"""One node of the local backend as the fault kinds see it (``NodeHandle``), and its
live CPU / memory limits through the node's cgroups.

The node agent (:func:`nodes.agent.apply_limits`) puts itself in a memory cgroup
``continuum-testbed/node-<agent pid>`` (cgroup v1 here; the process's own cgroup on a
v2 host). :meth:`LocalNode.update_limits` changes that cap live and sets a CPU quota
(v1: a ``cpu`` cgroup of the same name holding the node's process tree; v2: ``cpu.max``
of the node's cgroup); where cgroups are not writable it raises NotImplementedError.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from nodes.agent import cgroup_dir
from nodes.device_control import NodeControl, write_control

if TYPE_CHECKING:
    from testbed.backends.local import LocalBackend

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000  # CFS period of a CPU quota, microseconds


def cgroup_v2() -> bool:
    """True on a host with the unified (v2) cgroup hierarchy."""
    return (CGROUP_ROOT / "cgroup.controllers").exists()


def cpu_cgroup_v1(pid: int) -> Path:
    """The v1 ``cpu`` cgroup of the node whose agent has ``pid``."""
    return CGROUP_ROOT / "cpu" / "continuum-testbed" / f"node-{pid}"


def own_cgroup_v2(pid: int) -> Path:
    """The v2 cgroup process ``pid`` is in (from ``/proc/<pid>/cgroup``)."""
    line = Path(f"/proc/{pid}/cgroup").read_text().splitlines()[0]
    return CGROUP_ROOT / line.split("::", 1)[1].lstrip("/")


def remove_node_cgroups(pid: int) -> None:
    """Remove the (empty) memory and cpu cgroups of the node whose agent had ``pid``."""
    for d in (cgroup_dir(pid), cpu_cgroup_v1(pid)):
        try:
            d.rmdir()
        except OSError:
            pass


def _write(path: Path, value: str, what: str) -> None:
    """Write a cgroup file; NotImplementedError (with the reason) when not writable."""
    try:
        path.write_text(value)
    except PermissionError as e:
        raise NotImplementedError(f"{what}: {path} is not writable ({e.strerror})") from None
    except OSError as e:
        raise RuntimeError(f"{what}: the kernel refused {value!r} in {path} ({e})") from None


def set_memory_cap(pid: int, memory_mb: int) -> str:
    """Set the memory cap of the node whose agent has ``pid``; return what was set."""
    limit = int(memory_mb) * 2**20
    if cgroup_v2():
        _write(own_cgroup_v2(pid) / "memory.max", str(limit), "memory limit")
        return f"cgroup v2 memory.max={limit}"
    d = cgroup_dir(pid)
    if not d.exists():
        raise NotImplementedError(
            "memory limit: the node has no memory cgroup (its agent fell back to RLIMIT_AS, "
            "which cannot change from outside)"
        )
    _write(d / "memory.limit_in_bytes", str(limit), "memory limit")
    return f"cgroup v1 memory.limit_in_bytes={limit}"


def set_cpu_quota(pid: int, pids: list[int], cpus: float) -> str:
    """Cap the node's process tree ``pids`` at ``cpus`` cores; return what was set."""
    quota = max(1000, int(cpus * PERIOD_US))
    if cgroup_v2():
        _write(own_cgroup_v2(pid) / "cpu.max", f"{quota} {PERIOD_US}", "cpu limit")
        return f"cgroup v2 cpu.max={quota} {PERIOD_US}"
    d = cpu_cgroup_v1(pid)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NotImplementedError(f"cpu limit: cannot create {d} ({e.strerror})") from None
    _write(d / "cpu.cfs_period_us", str(PERIOD_US), "cpu limit")
    _write(d / "cpu.cfs_quota_us", str(quota), "cpu limit")
    for p in pids:  # children forked later inherit the cgroup
        try:
            (d / "cgroup.procs").write_text(str(p))
        except ProcessLookupError:
            pass
    return f"cgroup v1 cpu.cfs_quota_us={quota} per {PERIOD_US}"


class LocalNode:
    """A client node of a :class:`~testbed.backends.local.LocalBackend` (``NodeHandle``).

    Parameters
    ----------
    backend : LocalBackend
        The fleet the node belongs to.
    name : str
        The node's name.
    """

    def __init__(self, backend: LocalBackend, name: str) -> None:
        self.backend, self.name = backend, name

    def _pid(self) -> int:
        return self.backend.procs.procs[self.name].pid

    def _keys(self) -> list[str]:
        """The node's processes: its own and every other workload's beside it."""
        return self.backend.processes_of(self.name)

    def _trees(self) -> list[psutil.Process]:
        return [p for k in self._keys() for p in self.backend.procs.tree(k)]

    def kill(self) -> None:
        """Crash: SIGKILL the node's whole process tree (every workload's), no goodbye."""
        pid = self._pid()
        self.backend.paused.discard(self.name)
        keys = self._keys()
        if len(keys) == 1:
            self.backend.procs.stop(self.name, timeout_s=0)
        else:  # every workload's processes at once (each stop waits for its tree)
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(len(keys)) as pool:
                list(pool.map(lambda k: self.backend.procs.stop(k, timeout_s=0), keys))
        remove_node_cgroups(pid)

    def stop(self) -> None:
        """Clean stop: SIGTERM to the tree (SIGKILL after 5 s)."""
        pid = self._pid()
        if self.name in self.backend.paused:
            self.resume()  # a stopped process cannot act on SIGTERM
        for key in self._keys():
            self.backend.procs.stop(key)
        remove_node_cgroups(pid)

    def start(self) -> None:
        """Start the node again with the same identity (command, port, name)."""
        for key in self._keys():
            self.backend.start_node(key)

    def pause(self) -> None:
        """Freeze every process of the node (SIGSTOP, the root first)."""
        for p in self._trees():
            try:
                p.suspend()
            except psutil.NoSuchProcess:
                pass
        self.backend.paused.add(self.name)

    def resume(self) -> None:
        """Thaw every process of the node (SIGCONT)."""
        for p in self._trees():
            try:
                p.resume()
            except psutil.NoSuchProcess:
                pass
        self.backend.paused.discard(self.name)

    def update_limits(
        self, *, cpus: float | None = None, memory_mb: int | None = None
    ) -> dict[str, Any]:
        """Change the node's CPU share (cores, may be fractional) and/or memory cap (MB)
        live; return what was applied (``{"cpus": ..., "memory": ...}``)."""
        if cpus is not None and cpus <= 0:
            raise ValueError(f"cpus must be > 0, got {cpus}")
        if memory_mb is not None and memory_mb <= 0:
            raise ValueError(f"memory_mb must be > 0, got {memory_mb}")
        applied: dict[str, Any] = {}
        if memory_mb is not None:
            applied["memory"] = set_memory_cap(self._pid(), memory_mb)
        if cpus is not None:
            pids = [p.pid for p in self._trees()]
            applied["cpus"] = set_cpu_quota(self._pid(), pids, cpus)
        return applied

    def set_control(self, control: NodeControl) -> None:
        """Write the node's live fault controls (read by its ClientApp at every task)."""
        write_control(self.backend.control_path(self.name), control)

    def alive(self) -> bool:
        """True while the node's agent process runs."""
        p = self.backend.procs.procs.get(self.name)
        return p is not None and p.poll() is None


def cpu_seconds(procs: list[psutil.Process]) -> dict[int, float]:
    """User + system CPU seconds of each live process, by pid."""
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return out
