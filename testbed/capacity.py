"""Will a planned fleet fit on this machine? Checked before anything starts.

A fleet too large for the machine used to start anyway and end in an out-of-memory
machine. :func:`check_fits` compares what the fleet's nodes are expected to need with
what the machine has and raises :class:`FleetTooLarge` (a ``ValueError`` naming the YAML
path, the node count and the estimate) when it would not fit.

Per-node footprints (:data:`FOOTPRINTS`) are MEASURED on the local backend (2-core
24 GB machine, Flower 1.41, warm executor, digits CNN):

- client node (agent with the warm executor + its forked SuperNode), forked by the
  run's zygote (:mod:`testbed.backends.zygote`), so the imported stack is shared. A
  node's PSS falls with the fleet as the shared pages spread over more nodes:
  ``bench/scale.py`` measured 97.3, 78.3 and 71.8 MB per node at 10, 30 and 60 nodes
  (2026-11-23, docs/benchmarks.md "Scale and node memory"; RSS ~655 MB, most of it
  shared). Fitted as ``PSS(N) = U + S / N``: each node adds U ~ 67 MB of its own and
  the fleet shares S ~ 306 MB once (:data:`SHARED_MB`, counted once). 120 nodes used
  9.5 GB (79 MB per node, issue 30). 200 nodes (2026-11-29, quiet machine, the
  acceptance spec: default links, a shaping proxy per node) completed 3 ``fast``
  rounds; MemAvailable fell from 23.5 to 8.2 GB at the lowest: 15.3 GB for the whole
  run, 68 MB per node beyond the server's 1.6 GB. (The earlier 200-node attempt,
  2026-11-27, ran out of memory after 12 minutes of a start-up that did not end, its
  nodes retrying registration; the start-up now takes ~60 s.) 80 MB per client node is
  used (about 17 % above the largest measured); ``tests/test_capacity.py`` checks
  that the estimate covers each measured fleet, stays under twice it, and refuses
  300 nodes on this machine (not measured: ~25.6 GB by this rule).
- client node started without the zygote (``links.mode: netem``: each node in its own
  namespace): peak RSS 644-705 MB per node, MEASURED before the zygote existed; 705 MB
  is used.
  2 processes and 15 threads once warmed up.
- server node (SuperLink + SuperExec + ServerApp): peak RSS 776 MB (quickstart run,
  2026-11-23); 3 processes and 12 threads before the ServerApp starts; plus the run's
  zygote, whose pages every client node shares (RSS 529 MB, counted once, here).

- docker backend (one container per node, its own Python stack: nothing shared but
  the image's page cache): peak memory as the engine reports it (usage less inactive
  cache) was 360-367 MB per client container and 523 MB for the server container
  (quickstart, 5 rounds, 2026-11-27, `bash docker/with-engine.sh testbed run
  experiments/quickstart.yaml --backend docker`); 400 and 600 MB are used.

Whoever makes nodes leaner updates the
figures here with the new measurement. Only ``fl`` workloads start a fleet of
SuperNodes; other workloads are not checked. Tasks (processes + threads) and the
runner's file descriptors are estimated with headroom over the counts above.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

from testbed.planner import Plan, make_plan
from testbed.spec.models import Experiment


@dataclass(frozen=True)
class Footprint:
    """What one node of a backend is expected to use.

    Attributes
    ----------
    memory_mb : float
        Peak resident memory of the node's process tree, MB (measured; see module doc).
    tasks : int
        Processes plus threads the node runs (a bound on the measured count).
    fds : int
        File descriptors the runner holds for the node (log files, pipes, its link
        proxy's listener and connections).
    """

    memory_mb: float
    tasks: int
    fds: int


#: Pages the client nodes a zygote forked share, counted once per fleet (MB; the fit
#: of bench/scale.py's PSS per node, see the module doc), on the local backend.
SHARED_MB = 310.0

FOOTPRINTS: dict[str, dict[str, Footprint]] = {
    "local": {
        "client": Footprint(memory_mb=80.0, tasks=30, fds=12),  # forked by the zygote
        "client-cold": Footprint(memory_mb=705.0, tasks=30, fds=12),  # started plainly
        # the server, the zygote and the pages its nodes share (counted once)
        "server": Footprint(memory_mb=780.0 + 530.0 + SHARED_MB, tasks=60, fds=12),
    },
    "docker": {  # one container per node, no zygote (measured: see the module doc)
        "client": Footprint(memory_mb=400.0, tasks=30, fds=12),
        "server": Footprint(memory_mb=600.0, tasks=60, fds=12),
    },
}


@dataclass(frozen=True)
class HostCapacity:
    """What this machine has free for a fleet.

    Attributes
    ----------
    available_mb : float
        Memory available to new processes, MB: the kernel's ``MemAvailable``, or less
        where this process's cgroup limit leaves less.
    free_tasks : int
        Processes/threads that may still be created (``pid_max``, ``threads-max`` and,
        for a non-root user, ``RLIMIT_NPROC``, minus the tasks running now).
    free_fds : int
        File descriptors this process may still open (``RLIMIT_NOFILE`` minus open).
    """

    available_mb: float
    free_tasks: int
    free_fds: int

    @classmethod
    def measure(cls) -> HostCapacity:
        """Read the figures from /proc, the cgroup and the resource limits."""
        import psutil

        avail = psutil.virtual_memory().available / 2**20
        cg = _cgroup_free_mb()
        running = sum(p.info["num_threads"] or 1 for p in psutil.process_iter(["num_threads"]))
        limits = [
            _read_int("/proc/sys/kernel/pid_max") or 2**22,
            _read_int("/proc/sys/kernel/threads-max") or 2**22,
        ]
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        if os.geteuid() != 0 and nproc != resource.RLIM_INFINITY:
            limits.append(nproc)
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        open_fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
        return cls(
            available_mb=min(avail, cg) if cg is not None else avail,
            free_tasks=min(limits) - running,
            free_fds=(2**31 if nofile == resource.RLIM_INFINITY else nofile) - open_fds,
        )


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _cgroup_free_mb() -> float | None:
    """Memory left under this process's cgroup limit (v2 or v1), MB; None if unlimited."""
    for line in _read_lines("/proc/self/cgroup"):
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[1] == "":  # cgroup v2
            base, names = Path("/sys/fs/cgroup", parts[2].lstrip("/")), V2_FILES
        elif "memory" in parts[1].split(","):
            base, names = Path("/sys/fs/cgroup/memory", parts[2].lstrip("/")), V1_FILES
        else:
            continue
        limit, usage = (_read_int(str(base / n)) for n in names)
        if limit is not None and usage is not None and limit < 2**60:
            return (limit - usage) / 2**20
    return None


V2_FILES = ("memory.max", "memory.current")
V1_FILES = ("memory.limit_in_bytes", "memory.usage_in_bytes")


def _read_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


@dataclass(frozen=True)
class FleetEstimate:
    """What a fleet (times ``fleets`` run at once) is expected to need."""

    nodes: int
    clients: int
    fleets: int
    memory_mb: float
    tasks: int
    fds: int


def estimate(plan: Plan, backend: str = "local", fleets: int = 1) -> FleetEstimate | None:
    """Expected needs of ``fleets`` copies of the plan's fleet; None when the backend or
    workload has no footprint here (nothing to check)."""
    table = FOOTPRINTS.get(backend)
    if table is None or plan.experiment.workload.fl is None:
        return None
    clients = len(plan.clients)
    servers = len(plan.nodes) - clients  # the server (and role none nodes, as a server)
    c, s = _client_footprint(plan, backend), table["server"]
    return FleetEstimate(
        nodes=len(plan.nodes),
        clients=clients,
        fleets=fleets,
        memory_mb=fleets * (clients * c.memory_mb + servers * s.memory_mb),
        tasks=fleets * (clients * c.tasks + servers * s.tasks),
        fds=fleets * (clients * c.fds + servers * s.fds),
    )


class FleetTooLarge(ValueError):
    """The fleet would not fit on this machine; ``path`` is the YAML path to change."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


def check_fits(
    plan: Plan, backend: str = "local", fleets: int = 1, host: HostCapacity | None = None
) -> FleetEstimate | None:
    """Raise :class:`FleetTooLarge` when the fleet would not fit on this machine.

    Parameters
    ----------
    plan : Plan
        The planned fleet.
    backend : str
        Backend name; only backends in :data:`FOOTPRINTS` are checked.
    fleets : int
        Fleets run at once (``testbed run --parallel``).
    host : HostCapacity, optional
        The machine's free capacity (measured now when not given).

    Returns
    -------
    FleetEstimate or None
        The estimate that fits (None when nothing was checked).
    """
    est = estimate(plan, backend, fleets)
    if est is None:
        return None
    host = host or HostCapacity.measure()
    per = _client_footprint(plan, backend)
    what = f"{est.nodes} nodes ({est.clients} clients)" + (
        f" x {fleets} fleets at once" if fleets > 1 else ""
    )
    path = _largest_count_path(plan)
    if est.memory_mb > host.available_mb:
        server = FOOTPRINTS[backend]["server"].memory_mb
        raise FleetTooLarge(
            path,
            f"{what} need about {est.memory_mb / 1024:.1f} GB on the {backend} backend "
            f"(assumed: ~{per.memory_mb:.0f} MB per client node and {server / 1024:.1f} GB "
            f"per server, measured: testbed/capacity.py), but this machine has "
            f"{host.available_mb / 1024:.1f} GB available; at most "
            f"{_max_clients(plan, backend, fleets, host.available_mb)} client nodes fit "
            "(--oversubscribe starts it anyway, recorded in the run)",
        )
    for need, free, unit in ((est.tasks, host.free_tasks, "processes/threads"),
                             (est.fds, host.free_fds, "open files")):  # fmt: skip
        if need > free:
            raise FleetTooLarge(
                path,
                f"{what} need about {need} {unit} on the {backend} backend, but this "
                f"machine allows {free} more",
            )
    return est


def _client_footprint(plan: Plan, backend: str) -> Footprint:
    """A client node's footprint: forked by the zygote, or started plainly (netem links
    put each node in its own namespace, where the zygote cannot fork it)."""
    table = FOOTPRINTS[backend]
    cold = plan.experiment.links.mode == "netem" and "client-cold" in table
    return table["client-cold" if cold else "client"]


def _max_clients(plan: Plan, backend: str, fleets: int, available_mb: float) -> int:
    t = FOOTPRINTS[backend]
    servers = len(plan.nodes) - len(plan.clients)
    room = available_mb / fleets - servers * t["server"].memory_mb
    return max(0, int(room // _client_footprint(plan, backend).memory_mb))


def _largest_count_path(plan: Plan) -> str:
    """YAML path of the node entry with the largest ``count`` (what to lower)."""
    fleet = plan.experiment.fleet
    if fleet is None:
        return "fleet"
    i = max(range(len(fleet.nodes)), key=lambda j: fleet.nodes[j].count)
    return f"fleet.nodes.{i}.count" if fleet.nodes[i].count > 1 else "fleet.nodes"


def check_sweep(experiments: list[Experiment], backend: str = "local", parallel: int = 1) -> None:
    """:func:`check_fits` for every configuration of a sweep (``parallel`` at once).

    Raises
    ------
    FleetTooLarge
        For the first configuration that would not fit.
    """
    host: HostCapacity | None = None
    fleets = max(1, min(parallel, len(experiments)))
    for exp in experiments:
        if exp.workload.fl is None or backend not in FOOTPRINTS:
            continue
        host = host or HostCapacity.measure()
        check_fits(make_plan(exp), backend, fleets, host)
