"""Node agent: what runs ON a node, for every backend (local process or container).

``testbed node superlink ...`` and ``testbed node supernode ...`` call these functions.
A node learns its role and identity from its command line only.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

FLOWER_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}


#: The address a node's own servers (function runtime, LLM stage, semantic fog) listen on:
#: 127.0.0.1 unless the backend sets it (swarm: 0.0.0.0, so the runner on another host
#: reaches them at their engine's address).
BIND_ENV = "TESTBED_BIND_HOST"


def bind_host() -> str:
    """Where a node's own server listens (:data:`BIND_ENV`, default 127.0.0.1)."""
    return os.environ.get(BIND_ENV) or "127.0.0.1"


def flower_bin(name: str) -> str:
    """Path of a Flower console script, preferring the running interpreter's env."""
    cand = Path(sys.executable).parent / name
    return str(cand) if cand.exists() else (shutil.which(name) or name)


def node_config_arg(config: dict[str, object]) -> str:
    """Format a SuperNode ``--node-config`` string (strings quoted, TOML style)."""
    parts = []
    for k, v in config.items():
        parts.append(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}")
    return " ".join(parts)


#: ``fast``: the server node's SuperLink runs through the protocol-timing shim
#: (:mod:`nodes.fl.superlink_stack`); unset or ``flower``: Flower's own, untouched.
SUPERLINK_TIMING_ENV = "TESTBED_SUPERLINK_TIMING"


def superlink_command(
    port: int,
    host: str = "127.0.0.1",
    database: str | None = None,
    isolation: str = "subprocess",
    protocol_timing: str = "flower",
) -> list[str]:
    """Command line of a real ``flower-superlink`` serving all APIs on ``host:port``.

    ``isolation="process"`` leaves ServerApp execution to an external SuperExec (the node
    agent's), so a SuperLink restart does not take the running ServerApp with it.
    ``protocol_timing="fast"`` starts it through :func:`nodes.fl.timing.main`.
    """
    from nodes.fl.timing import shim_command

    args = [
        "--insecure",
        "--host",
        host,
        "--port",
        str(port),
        "--disable-runtime-dependency-installation",
        "--isolation",
        isolation,
    ]
    if database:
        args += ["--database", database]
    return shim_command(sys.executable, protocol_timing, flower_bin("flower-superlink"), args)


def supernode_command(
    superlink: str,
    port: int,
    node_config: dict[str, object],
    warm: bool = True,
    protocol_timing: str = "flower",
) -> list[str]:
    """Command line of a real ``flower-supernode``.

    ``warm`` selects ``--isolation process`` (the agent's warm executor runs tasks)
    instead of Flower's default cold ``subprocess`` isolation. ``protocol_timing``
    ``fast`` starts it through the timing shim (``nodes/fl/timing.py``); ``flower``
    runs Flower's script untouched.
    """
    from nodes.fl.timing import shim_command

    return shim_command(
        sys.executable,
        protocol_timing,
        flower_bin("flower-supernode"),
        [
            "--insecure",
            "--superlink",
            superlink,
            "--port",
            str(port),
            "--node-config",
            node_config_arg(node_config),
            "--isolation",
            "process" if warm else "subprocess",
        ],
    )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(FLOWER_ENV)
    bindir = str(Path(sys.executable).parent)  # Flower spawns its helpers by name
    if bindir not in env.get("PATH", "").split(os.pathsep):
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


def watch_parent() -> None:
    """SIGTERM this node when the process that started it dies.

    A controller killed hard (SIGKILL) cannot tear its fleet down; its nodes are in their
    own sessions, so without this they would outlive it. In a container the parent is
    the init process and never changes.
    """
    parent = os.getppid()

    def loop() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=loop, name="watch-parent", daemon=True).start()


def _forward_signals(
    child: subprocess.Popen[bytes], on_stop: Callable[[], None] | None = None
) -> None:
    def handler(_signum: int, _frame: FrameType | None) -> None:
        if on_stop:
            on_stop()
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


SUPEREXEC_AFTER_S = 60.0  # the longest the SuperExec waits for the SuperLink to listen, s


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait until something accepts on ``127.0.0.1:port``; False when ``proc`` ended or
    ``timeout_s`` passed first."""
    import socket

    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.02)
    return False


def run_superlink(port: int, host: str = "127.0.0.1", database: str | None = None) -> int:
    """Run a SuperLink node until stopped; return the SuperLink's exit code.

    The node runs ``flower-superlink`` (process isolation, state in ``database``) and a
    long-lived ``flower-superexec`` that launches ServerApps. SIGUSR1 restarts the
    SuperLink (SIGKILL, then start again on the same port and database): the fault
    ``superlink-restart``. The SuperExec and a running ServerApp survive it; SuperNodes
    and the ServerApp reconnect with Flower's own retries.
    """
    watch_parent()
    env = _env()
    timing = os.environ.get(SUPERLINK_TIMING_ENV) or "flower"
    cmd = superlink_command(port, host, database, isolation="process", protocol_timing=timing)
    link = subprocess.Popen(cmd, env=env)
    # The SuperExec connects to the SuperLink (and retries until it can): started once
    # the SuperLink listens, its imports do not slow the SuperLink's own start.
    _wait_listening(port, link, SUPEREXEC_AFTER_S)
    sx = subprocess.Popen(
        [flower_bin("flower-superexec"), "--insecure", "--runtime-api-address", f"{host}:{port}"],
        env=env,
    )
    state = {"stop": False, "restart": False}

    def on_stop(_signum: int, _frame: FrameType | None) -> None:
        state["stop"] = True

    def on_restart(_signum: int, _frame: FrameType | None) -> None:
        state["restart"] = True

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGUSR1, on_restart)
    code = 0
    while not state["stop"]:
        if state["restart"]:
            state["restart"] = False
            link.kill()
            link.wait()
            link = subprocess.Popen(cmd, env=env)
            print(f"superlink restarted (pid {link.pid})", flush=True)
        elif link.poll() is not None:
            code = link.returncode
            break
        time.sleep(0.1)
    for p in (link, sx):
        if p.poll() is None:
            p.terminate()
    for p in (link, sx):
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    return code


CGROUP_V1_MEMORY = Path("/sys/fs/cgroup/memory")


def cgroup_dir(pid: int) -> Path:
    """Memory cgroup (v1) of the node whose agent has ``pid``."""
    return CGROUP_V1_MEMORY / "continuum-testbed" / f"node-{pid}"


def remove_stale_cgroups() -> int:
    """Remove node cgroups whose processes are gone (a killed run leaves them)."""
    root = CGROUP_V1_MEMORY / "continuum-testbed"
    n = 0
    for d in root.glob("node-*") if root.exists() else []:
        try:
            if not (d / "cgroup.procs").read_text().strip():
                d.rmdir()
                n += 1
        except OSError:
            pass
    return n


#: Scheduling priority (nice) the local backend gives its client nodes: the lowest, so
#: that the emulated devices' work never starves the testbed's own processes (SuperLink,
#: ServerApp, runner and its link proxies), which stand for other machines. Measured
#: 2026-11-29 (200 client nodes, every node its own session, so its own autogroup with
#: an equal share of the CPU): at nice 0 the SuperLink got ~1/200 of the two cores in
#: round 1, missed the ServerApp's heartbeats and Flower finished the run. Since
#: 2026-12-06 the autogroup is left at nice 0 and the nodes forked by the zygote share
#: its session, so one autogroup: the group competes as one with the testbed's processes
#: and with a neighbour's (at autogroup nice 19 each, four busy loops beside a fleet left
#: each node ~1 % of a core); inside it, each node's nice 19 yields.
CLIENT_NICE = 19
#: Overrides :data:`CLIENT_NICE` (0-19; 0: the nodes share the CPU with the testbed's own
#: processes as equals, as before 2026-11-29), for A/B benchmarks.
CLIENT_NICE_ENV = "TESTBED_CLIENT_NICE"


def client_nice() -> int:
    """The client nodes' nice: :data:`CLIENT_NICE` or ``$TESTBED_CLIENT_NICE``."""
    raw = os.environ.get(CLIENT_NICE_ENV, str(CLIENT_NICE))
    if not raw.isdigit() or int(raw) > 19:
        raise ValueError(f"{CLIENT_NICE_ENV}={raw!r}: a nice value from 0 to 19")
    return int(raw)


def lower_priority(nice: int) -> str:
    """Run this process (and its future children) at ``nice``. Where the kernel schedules
    by autogroup (each session a group whose share follows the group's nice, not its
    processes'), the session's autogroup is left at its nice (0): a node forked by the
    zygote shares the zygote's session with the run's other nodes, so their group competes
    as one; a node started plainly (netem links) is its own session, so its own group, as
    before 2026-11-29. Returns what was applied and the autogroup it runs in."""
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    applied = f"nice {os.getpriority(os.PRIO_PROCESS, 0)}"
    try:
        group = Path("/proc/self/autogroup").read_text().split()[-1]
    except (OSError, IndexError):  # no autogroup scheduling: the process's own nice counts
        return applied
    own = "its own" if os.getsid(0) == os.getpid() else "shared with its session"
    return applied + f", autogroup {own} (nice {group})"


def apply_limits(
    memory_mb: int | None, cpus: list[int] | None, nice: int | None = None
) -> dict[str, str]:
    """Cap this process (and its future children) to a device profile.

    CPU pinning uses ``sched_setaffinity``. The memory cap uses a cgroup (v1 memory
    controller, when writable: root on this machine) and falls back to ``RLIMIT_AS``.
    ``nice``: the scheduling priority (:func:`lower_priority`). Returns what was
    applied, for the run record.
    """
    import resource

    applied: dict[str, str] = {}
    if nice is not None:
        applied["priority"] = lower_priority(nice)
    if cpus:
        os.sched_setaffinity(0, cpus)
        applied["cpus"] = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    if memory_mb:
        limit = int(memory_mb) * 2**20
        shared = _inherited_rss() if _WARM else 0
        own = _own_limit(limit, shared)
        d = cgroup_dir(os.getpid())
        try:
            d.mkdir(parents=True, exist_ok=True)
            (d / "memory.limit_in_bytes").write_text(str(own))
            (d / "cgroup.procs").write_text(str(os.getpid()))
            applied["memory"] = f"cgroup v1 memory.limit_in_bytes={own}"
            if shared:
                applied["memory"] += f" (device {limit} - {shared} shared with the zygote)"
        except OSError:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            applied["memory"] = f"RLIMIT_AS={limit} (no writable cgroup)"
    return applied


def _inherited_rss() -> int:
    """Bytes resident in this process right after it was forked from the zygote: the
    runtime it shares copy-on-write. Those pages stay charged to the zygote's cgroup,
    yet a device has to hold them, so they count against the node's memory."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _own_limit(limit: int, shared: int) -> int:
    """The cap on the pages a node charges itself: its device's memory less what it
    shares with the zygote; a device that cannot even hold the shared runtime stops
    the node here, as the kernel would stop a node started plainly (it runs out of
    memory while importing the same runtime)."""
    if limit - shared <= 0:
        raise SystemExit(
            f"out of memory: the device has {limit >> 20} MB, the node's runtime alone "
            f"takes {shared >> 20} MB (shared with the zygote it was forked from)"
        )
    return limit - shared


_WARM: list[bool] = []  # [True] once this process (or the zygote it was forked from) warmed up


def _prewarm(ready_file: str | None, limits: dict[str, str] | None = None) -> None:
    """Import the ClientApp's stack once; then signal readiness through ``ready_file``.

    A node forked from the local backend's zygote finds it done already (the zygote
    warmed up before forking): it only signals readiness, writing none of the pages it
    shares with the zygote.
    """
    import torch

    torch.set_num_threads(1)
    if not _WARM:
        import numpy as np

        import nodes.fl.client_app  # noqa: F401  (flwr's ClientApp stack)
        from nodes.data.datasets import Dataset
        from nodes.fl import task
        from nodes.fl.config import FLSpec
        from nodes.models import build_model

        # One tiny training step per optimizer: the first autograd pass and optimizer step
        # initialise kernels and lazy imports (~1.5 s), which would otherwise hit round 1.
        data = Dataset(np.zeros((4, 1, 8, 8), np.float32), np.zeros(4, np.int64), 10)
        for opt in ("sgd", "adam"):
            task.train(build_model("cnn", (1, 8, 8), 10), data, FLSpec(optimizer=opt), 0)
        _WARM.append(True)

    if ready_file:  # whole or absent: the backend reads it as soon as it exists
        path = Path(ready_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "limits": limits or {}}))
        os.replace(tmp, path)


def fork_supernode(cmd: list[str], notify_fd: int | None = None) -> subprocess.Popen[bytes]:
    """Run the SuperNode of :func:`supernode_command` ``cmd`` in a forked child.

    The child is ``cmd`` run in-process instead of in a fresh interpreter: Flower's own
    ``flower-supernode`` entry point with the same arguments (through the timing shim's
    :func:`nodes.fl.timing.main`, which leaves Flower untouched in ``flower`` mode). It
    shares this process's imported flwr copy-on-write (start-up in milliseconds, its
    pages counted once) and runs in this node's process group, cgroup and CPU set.
    Call it before starting threads. ``notify_fd``: the SuperNode (``fast`` mode) wakes
    the warm executor through this pipe (:func:`nodes.fl.timing.notify_task_ready`).
    """
    from nodes.fl.timing import PROTOCOL_TIMINGS, main
    from nodes.forked import fork_call

    if "nodes.fl.timing" in cmd:  # [python, -m, nodes.fl.timing, MODE, SCRIPT, ARGS...]
        argv = cmd[cmd.index("nodes.fl.timing") + 1 :]
    else:  # [flower-supernode, ARGS...]: Flower untouched
        argv = [PROTOCOL_TIMINGS[0], Path(cmd[0]).name, *cmd[1:]]
    os.environ.update(_env())
    return fork_call(lambda: main(argv, notify_fd), cmd)


def _run_cold(child: subprocess.Popen[bytes]) -> int:
    """Wait for a cold SuperNode ``child``, passing SIGTERM/SIGINT on to it."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    watch_parent()
    _forward_signals(child)
    return child.wait()


def run_supernode(
    superlink: str,
    port: int,
    node_config: dict[str, object],
    warm: bool = True,
    ready_file: str | None = None,
    memory_mb: int | None = None,
    cpus: list[int] | None = None,
    nice: int | None = None,
) -> int:
    """Run a SuperNode plus (when ``warm``) its warm executor; return the exit code.

    The SuperNode is a forked child process (:func:`fork_supernode`; ``warm=False``: a
    fresh ``flower-supernode`` process); the warm executor runs in this process and
    polls the SuperNode's Runtime API on ``127.0.0.1:port``. Stopping this process
    (SIGTERM/SIGINT) stops both.
    """
    limits = apply_limits(memory_mb, cpus, nice)  # before any child starts: they inherit it
    config = dict(node_config)
    timing = str(config.pop("protocol-timing", "flower"))  # for the agent, not for Flower
    from nodes.fl.timing import FLEET_SIZE_ENV

    os.environ[FLEET_SIZE_ENV] = str(config.get("num-partitions", 1))  # (fast waits scale)
    cmd = supernode_command(superlink, port, config, warm, timing)
    if not warm:  # Flower's own SuperExec and a fresh ClientApp process per message
        return _run_cold(subprocess.Popen(cmd, env=_env()))
    wake_r, wake_w = os.pipe()  # the SuperNode wakes the warm executor (fast mode)
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    child = fork_supernode(cmd, wake_w)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll otherwise
    watch_parent()
    os.environ.update(FLOWER_ENV)
    from nodes.fl.warm_executor import WarmExecutor

    # Warm up while the SuperNode connects: the ClientApp's imports happen once, here.
    threading.Thread(target=_prewarm, args=(ready_file, limits), daemon=True).start()

    from nodes.fl.timing import CLIENTAPP, executor_poll_s, fleet_scale, install

    if timing == "fast":  # the ClientApp's object pulls run here (nodes/fl/timing.py)
        install(CLIENTAPP, fleet_scale(int(os.environ[FLEET_SIZE_ENV])))
    wake = wake_r if timing == "fast" else None
    executor = WarmExecutor(f"127.0.0.1:{port}", executor_poll_s(timing), wake_fd=wake)
    _forward_signals(child, executor.stop)

    def watch() -> None:
        child.wait()
        executor.stop()

    threading.Thread(target=watch, daemon=True).start()
    executor.serve()
    if child.poll() is None:
        child.terminate()
    return child.wait()
