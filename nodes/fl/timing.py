"""Protocol timing: Flower's own polling waits (``flower``) or short ones (``fast``).

Flower (1.41 and 1.42, :data:`SUPPORTED_FLOWER`) waits a hard-coded time whenever one
side of the protocol polls and finds nothing:

* a SuperNode whose pull finds no message sleeps 3 s before pulling again
  (``flwr.supernode.start_client_internal.start_client_internal``);
* a SuperNode waiting for its ClientApp's reply checks every 0.5 s
  (``flwr.supernode.start_client_internal._push_messages``), and as often for each of
  the reply's objects the ClientApp has not stored yet (``yield_object_contents``,
  nested in it);
* the ServerApp's grid polls the SuperLink for replies every 3 s
  (``flwr.superlink.grid.http_grid.HttpGrid.send_and_receive``);
* whoever pulls a message's objects (SuperNode from the SuperLink, ClientApp from the
  SuperNode, ServerApp from the SuperLink) and finds one not stored yet backs off
  1 s, 2 s, 4 s ... up to 10 s (``flwr.supercore.inflatable.inflatable_utils``:
  ``pull_objects`` and ``pull_and_inflate_object_from_tree``, keyword defaults
  ``initial_backoff=1``, ``backoff_cap=10``, ``max_tries_per_object=500``). A
  SuperNode announces a task before it has pulled the message's objects, so a warm
  executor's first pull nearly always meets this (1 + 2 s).

With 0.1-0.4 s of training per client, these waits make most of a round. ``flower``
mode (``workload.fl.protocol_timing: flower``) runs Flower untouched: the reference for
comparisons with real deployments. ``fast`` mode shortens exactly these waits, and
nothing else: it replaces the ``time`` name in the two Flower modules with a
:class:`TimeShim` whose ``sleep`` changes a call only when it comes from one of the
functions above with Flower's hard-coded value (every other sleep -- retries,
heartbeats, other waits in the same modules -- is passed on unchanged), and it sets the
two pull functions' keyword defaults to :data:`FAST_BACKOFF` (0.02 s doubling up to
0.2 s; no per-object try limit, so Flower's 7200 s ``max_time`` still bounds a pull, as
Flower's own 500 tries x 10 s do). The message protocol and every other setting stay
Flower's; no Flower code is copied. (What the testbed's own apps put in a message does
change in ``fast`` mode: the model travels as one flat array, :mod:`nodes.fl.packing`.)

The node's warm executor is the testbed's (it stands for Flower's SuperExec): in
``fast`` mode it does not poll the SuperNode for tasks every few milliseconds (each poll
is an HTTP request, and on 2 cores dozens of them a second slow every object transfer
of the round) but waits on a pipe that the SuperNode writes to when a task is ready
(:func:`notify_task_ready`, wrapping :data:`TASK_READY`), and acquires a task only
then (a poll every :data:`FAST_EXECUTOR_FALLBACK_S` is the fallback): a task acquired
before its SuperNode has stored the message's objects would be pulled from the SuperNode
again and again. A 60-node ``fast`` fleet completed no round while its executors, woken
by an earlier 3 s fallback poll, pulled unstored objects from their SuperNodes every
0.02-0.2 s (docs/lean.md). The ClientApp's object-pull back-off grows with the fleet as
the SuperNode's does (:func:`fleet_scale`), which bounds such pulls should one happen.
The server node's SuperExec polls for submitted runs every 0.1 s instead of 1 s
(Flower's own ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``, set by the local backend).

Where it applies: the node agent runs a SuperNode as :func:`main` (``MODE
flower-supernode ARGS``: install the shim in ``fast`` mode, then run Flower's own
console entry point with ``ARGS``) in a process it forks
(:func:`nodes.agent.fork_supernode`; ``python -m nodes.fl.timing fast
flower-supernode ARGS`` is the same as a command) and installs the ``clientapp`` part
in its own process, where the warm executor runs ClientApp tasks;
the testbed's ServerApp calls :func:`install` itself before its first round (the
ServerApp runs inside Flower's ``flwr-serverapp`` process, started by Flower's
SuperExec, so that is the first code of the testbed there). If a Flower release no
longer has a patched wait (function gone, or its hard-coded value changed),
:func:`install` raises instead of silently doing nothing; a Flower outside
:data:`SUPPORTED_FLOWER` is refused first (:func:`check_flower_version`), naming the range.
"""

from __future__ import annotations

import functools
import importlib
import os
import random
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import CodeType, ModuleType
from typing import Any, Literal

#: Flower releases (major, minor) whose waits this module was checked against, oldest first.
SUPPORTED_FLOWER: tuple[tuple[int, int], ...] = ((1, 41), (1, 42))
ProtocolTiming = Literal["flower", "fast"]
PROTOCOL_TIMINGS: tuple[str, ...] = ("flower", "fast")
SUPERNODE = "supernode"
SERVERAPP = "serverapp"
CLIENTAPP = "clientapp"
BACKOFF_MODULE = "flwr.supercore.inflatable.inflatable_utils"
BACKOFF_FUNCTIONS = ("pull_objects", "pull_and_inflate_object_from_tree")
FLEET_SIZE_ENV = "TESTBED_FLEET_SIZE"  # client nodes of the fleet (the node agent sets it)
POLL_FLEET = 4  # the fleet size the SuperNode's ``fast`` waits are for (the quickstart's)
#: The warm executor's poll between wake-ups in ``fast`` mode, s: a safety net only (the
#: SuperNode wakes it when a task is ready); see :func:`executor_poll_s`.
FAST_EXECUTOR_FALLBACK_S = 30.0
#: keyword default -> (Flower's value, the value in ``fast`` mode)
FAST_BACKOFF: dict[str, tuple[float | None, float | None]] = {
    "initial_backoff": (1, 0.02),
    "backoff_cap": (10, 0.2),
    "max_tries_per_object": (500, None),
}


@dataclass(frozen=True)
class Wait:
    """One hard-coded Flower wait and its length in ``fast`` mode.

    Attributes
    ----------
    module : str
        Dotted name of the Flower module whose ``time`` is shimmed.
    function : str
        Qualified name of the function (in ``module``) that sleeps.
    flower_s : float
        Flower's hard-coded wait, s (only calls with exactly this value change).
    fast_s : float
        The wait in ``fast`` mode, s.
    """

    module: str
    function: str
    flower_s: float
    fast_s: float


#: Waits shortened in ``fast`` mode, per Flower component.
WAITS: dict[str, tuple[Wait, ...]] = {
    SUPERNODE: (
        Wait("flwr.supernode.start_client_internal", "start_client_internal", 3.0, 0.1),
        Wait("flwr.supernode.start_client_internal", "_push_messages", 0.5, 0.02),
        Wait(
            "flwr.supernode.start_client_internal",
            "_push_messages.<locals>.yield_object_contents",
            0.5,
            0.02,
        ),
    ),
    SERVERAPP: (Wait("flwr.superlink.grid.http_grid", "HttpGrid.send_and_receive", 3.0, 0.1),),
    CLIENTAPP: (),  # the object-pull back-off only
}


class TimeShim:
    """Stands in for the ``time`` module inside one Flower module.

    Every attribute is the real ``time`` module's except :meth:`sleep`, which replaces
    a wait of exactly ``flower_s`` coming from one of the listed functions by its
    ``fast_s``.

    Parameters
    ----------
    waits : dict
        Code object of the calling function -> ``(flower_s, fast_s)``, seconds.
    """

    def __init__(self, waits: dict[CodeType, tuple[float, float]]) -> None:
        self.waits = waits
        self.changed = 0  # waits shortened so far (for tests and logs)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def sleep(self, secs: float) -> None:
        """``time.sleep``, shortened for the listed waits; ``secs`` in seconds."""
        rule = self.waits.get(sys._getframe(1).f_code)
        if rule is not None and secs == rule[0]:
            self.changed += 1
            secs = rule[1]
        time.sleep(secs)


def _code(module: ModuleType, qualname: str) -> CodeType:
    """Code object of ``qualname`` in ``module`` (RuntimeError if Flower lacks it)."""
    obj: Any = module
    outer, _, inner = qualname.partition(".<locals>.")  # a function nested in another
    for part in outer.split("."):
        obj = getattr(obj, part, None)
    code = getattr(obj, "__code__", None)
    if isinstance(code, CodeType) and inner:
        nested = [c for c in code.co_consts if isinstance(c, CodeType) and c.co_name == inner]
        code = nested[0] if len(nested) == 1 else None
    if not isinstance(code, CodeType):
        raise RuntimeError(f"protocol_timing fast: {module.__name__}.{qualname} not found")
    return code


def _check_hard_coded(wait: Wait, code: CodeType) -> None:
    """RuntimeError unless ``code`` still holds Flower's hard-coded wait."""
    consts = [c for c in code.co_consts if isinstance(c, int | float)]
    if wait.flower_s not in consts:
        raise RuntimeError(
            f"protocol_timing fast: {wait.module}.{wait.function} no longer waits "
            f"{wait.flower_s} s (this Flower release changed it; update nodes/fl/timing.py)"
        )


def fleet_scale(fleet_size: int) -> float:
    """Factor on a SuperNode's ``fast`` waits in a fleet of ``fleet_size`` client nodes.

    Every SuperNode's empty pull and object-pull retry is a request to the one
    SuperLink: 4 SuperNodes pulling every 0.1 s make 40 requests a second, 60 of them
    600, which saturate the SuperLink on a 2-core machine (a 60-node fleet in ``fast``
    mode then completed no round, ``docs/history/benchmarks-journal.md``). The waits grow
    with the fleet (``fleet_size / POLL_FLEET``, at least 1) so that the SuperLink's load
    from polls stays that of :data:`POLL_FLEET` nodes; each stays at most Flower's own
    wait.
    """
    return max(1.0, fleet_size / POLL_FLEET)


def fast_wait_s(wait: Wait, scale: float = 1.0) -> float:
    """``wait`` in ``fast`` mode, ``scale``-d (:func:`fleet_scale`), Flower's at most, s."""
    return min(wait.flower_s, wait.fast_s * scale)


def _fast_backoff(scale: float) -> dict[str, float | None]:
    """The object-pull back-off defaults in ``fast`` mode, ``scale``-d (Flower's at most)."""
    out: dict[str, float | None] = {}
    for k, (flower, fast) in FAST_BACKOFF.items():
        out[k] = None if fast is None or flower is None else min(flower, fast * scale)
    return out


def _set_backoff(fast: bool, scale: float = 1.0) -> None:
    """Give the object-pull functions the ``fast`` (or Flower's) back-off defaults."""
    module = importlib.import_module(BACKOFF_MODULE)
    for name in BACKOFF_FUNCTIONS:
        fn = getattr(module, name, None)
        defaults = dict(getattr(fn, "__kwdefaults__", None) or {})
        want = {k: v[0] for k, v in FAST_BACKOFF.items()}
        now = {k: defaults.get(k, "absent") for k in FAST_BACKOFF}
        ours = now["max_tries_per_object"] is None and now["initial_backoff"] != "absent"
        if fast and now != want and not ours:
            raise RuntimeError(
                f"protocol_timing fast: {BACKOFF_MODULE}.{name} back-off defaults are "
                f"{now}, not Flower's {want} (update nodes/fl/timing.py)"
            )
        defaults.update(_fast_backoff(scale) if fast else want)
        fn.__kwdefaults__ = defaults  # type: ignore[union-attr]


def check_flower_version(version: str | None = None) -> str:
    """The installed Flower's version (or ``version``); RuntimeError naming the supported
    range when its major.minor is not in :data:`SUPPORTED_FLOWER`."""
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("flwr")
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        major = minor = -1
    if (major, minor) not in SUPPORTED_FLOWER:
        lo, hi = SUPPORTED_FLOWER[0], SUPPORTED_FLOWER[-1]
        raise RuntimeError(
            f"protocol_timing fast: Flower {version} is not supported by nodes/fl/timing.py "
            f"(supported: {lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}); use protocol_timing: flower "
            "or check the shimmed waits against this release and extend SUPPORTED_FLOWER"
        )
    return version


def install(component: str, scale: float = 1.0) -> dict[str, TimeShim]:
    """Shorten ``component``'s waits in this process (``supernode``, ``serverapp``, or
    ``clientapp``: the warm executor's process) and the object-pull back-off; ``scale``
    multiplies the ``fast`` values, each staying at most Flower's (a SuperNode in a
    large fleet: :func:`fleet_scale`).

    Returns
    -------
    dict
        Module name -> its installed :class:`TimeShim`. Installing twice is a no-op.
    """
    if component not in WAITS:
        raise ValueError(f"component must be one of {sorted(WAITS)}, got {component!r}")
    check_flower_version()
    rules: dict[str, dict[CodeType, tuple[float, float]]] = {}
    for wait in WAITS[component]:  # every check first: a failed install changes nothing
        module = importlib.import_module(wait.module)
        code = _code(module, wait.function)
        _check_hard_coded(wait, code)
        rules.setdefault(wait.module, {})[code] = (wait.flower_s, fast_wait_s(wait, scale))
    _set_backoff(True, scale)
    shims: dict[str, TimeShim] = {}
    for name, waits in rules.items():
        module = importlib.import_module(name)
        current = getattr(module, "time", None)
        if isinstance(current, TimeShim):
            current.waits.update(waits)
            shims[name] = current
        elif current is time:
            shims[name] = module.time = TimeShim(waits)  # type: ignore[attr-defined]
        else:
            raise RuntimeError(f"protocol_timing fast: {name}.time is not the time module")
    listed = ", ".join(
        f"{w.function} {w.flower_s:g}->{min(w.flower_s, w.fast_s * scale):g} s"
        for w in WAITS[component]
    )
    backoff = _fast_backoff(scale)
    print(
        f"protocol_timing fast ({component}{f', x{scale:g} for the fleet' if scale != 1 else ''}"
        f"): {listed or 'no polling wait'}; object-pull back-off "
        f"{backoff['initial_backoff']:g}-{backoff['backoff_cap']:g} s",
        file=sys.stderr,
        flush=True,
    )
    return shims


#: Flower function a SuperNode calls once a pulled message is stored with all its
#: objects and its ClientApp task created (it then waits there for the reply).
TASK_READY = ("flwr.supernode.start_client_internal", "_push_messages")


def notify_task_ready(fd: int) -> None:
    """Write a byte to ``fd`` whenever this SuperNode has a task ready (``fast`` mode).

    Wraps :data:`TASK_READY` in this process: the byte is written, then Flower's own
    function runs with the same arguments. The node's warm executor waits on the other
    end of the pipe instead of polling the Runtime API every few milliseconds (each
    poll is an HTTP request: on 2 cores, dozens of them a second slow every transfer of
    the round), and it acquires the task only once its objects are all stored, so its
    own object pulls never miss. ``fd`` should be non-blocking: a full pipe (an
    executor that stopped reading) drops the byte and Flower carries on.
    """
    module = importlib.import_module(TASK_READY[0])
    original = getattr(module, TASK_READY[1], None)
    if original is None:
        raise RuntimeError(f"protocol_timing fast: {'.'.join(TASK_READY)} not found")
    if getattr(original, "_testbed_notify_fd", None) is not None:
        return

    @functools.wraps(original)
    def task_ready(*args: Any, **kwargs: Any) -> Any:
        try:
            os.write(fd, b"!")
        except OSError:  # (BlockingIOError: a full pipe; the executor polls anyway)
            pass
        return original(*args, **kwargs)

    task_ready._testbed_notify_fd = fd  # type: ignore[attr-defined]
    setattr(module, TASK_READY[1], task_ready)


def uninstall(component: str) -> None:
    """Give ``component``'s Flower modules their ``time`` module and back-off back."""
    _set_backoff(False)
    for wait in WAITS[component]:
        module = importlib.import_module(wait.module)
        if isinstance(getattr(module, "time", None), TimeShim):
            module.time = time  # type: ignore[attr-defined]


def shim_command(python: str, timing: str, script: str, args: Sequence[str]) -> list[str]:
    """Command line that runs Flower's console ``script`` with ``args`` in ``timing``.

    ``flower`` is the plain script (Flower untouched); ``fast`` runs it through
    :func:`main` with this module's shim installed.
    """
    if timing not in PROTOCOL_TIMINGS:
        raise ValueError(f"protocol_timing must be one of {PROTOCOL_TIMINGS}, got {timing!r}")
    if timing == "flower":
        return [script, *args]
    return [python, "-m", "nodes.fl.timing", timing, script.rsplit("/", 1)[-1], *args]


def executor_poll_s(protocol_timing: str) -> float:
    """The warm executor's wait between empty task polls, s.

    ``flower``: 0.2 s, as before this setting existed (Flower's own SuperExec waits
    1 s, but the warm executor replaces it, and its per-message process start, anyway);
    ``fast``: :data:`FAST_EXECUTOR_FALLBACK_S`, a fallback only: the SuperNode wakes its
    executor as soon as a task is ready (:func:`notify_task_ready`). A poll finds a task
    as soon as Flower creates it, before its objects are pulled, so any poll races the
    SuperNode's pull: with a 3 s fallback, a 30-node round's SuperNode pulls took longer
    than 3 s, the executors took their tasks early and pulled the missing objects from
    their SuperNodes 5-50 times a second each (the round's CPU went to these requests).
    """
    return FAST_EXECUTOR_FALLBACK_S if protocol_timing == "fast" else 0.2


#: Flower console scripts the shim can start -> the component whose waits change (the
#: SuperLink has no wait of its own: ``fast`` scopes its middlewares instead,
#: :mod:`nodes.fl.superlink_stack`).
SUPERLINK = "superlink"
SCRIPTS = {"flower-supernode": SUPERNODE, "flower-superlink": SUPERLINK}


def seed_flower_jitter(args: Sequence[str]) -> str | None:
    """Seed this SuperNode process's ``random`` from its node's name (in ``args``'
    ``--node-config``); return the seed (None: no name given, left unseeded).

    Flower draws its heartbeat intervals (``HeartbeatSender``: every 17.5-22.5 s) and
    its retry back-offs (``full_jitter``) from the unseeded ``random`` module, and the
    SuperLink takes a node as offline 60 s after its last heartbeat: whether a round
    samples a node that has been cut off (a satellite between passes, a long partition)
    hangs on that jitter. Seeded per node, the draws are the same on every run and every
    backend (and still differ between nodes, as Flower wants them to). The ClientApp
    runs in the node agent, not in this process: its own seeds are untouched.
    """
    found = re.search(r'node-name="([^"]+)"', " ".join(args))
    if found is None:
        return None
    seed = f"flower-jitter:{found.group(1)}"
    random.seed(seed)
    return seed


def main(argv: Sequence[str] | None = None, notify_fd: int | None = None) -> int:
    """``python -m nodes.fl.timing MODE SCRIPT ARGS...``: run a Flower console script.

    ``MODE`` is ``flower`` or ``fast``; ``SCRIPT`` one of :data:`SCRIPTS`. The script's
    own entry point (from Flower's package metadata) runs with ``sys.argv`` set as if
    it had been started directly. In ``fast`` mode the waits grow with the fleet size
    in ``$TESTBED_FLEET_SIZE`` (:func:`fleet_scale`; 1 when unset). ``notify_fd`` (a
    SuperNode in ``fast`` mode, called in-process by the node agent): see
    :func:`notify_task_ready`.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] not in PROTOCOL_TIMINGS or args[1] not in SCRIPTS:
        print(
            f"usage: python -m nodes.fl.timing {{{'|'.join(PROTOCOL_TIMINGS)}}} "
            f"{{{'|'.join(SCRIPTS)}}} ARGS...",
            file=sys.stderr,
        )
        return 2
    mode, script, rest = args[0], args[1], args[2:]
    if script == "flower-supernode":  # (both timings: a retry of its own registration)
        from nodes.fl.register import install as idempotent_registration

        idempotent_registration()
        seed_flower_jitter(rest)
    if mode == "fast" and script == "flower-superlink":
        from nodes.fl import superlink_stack

        print(superlink_stack.install(), file=sys.stderr, flush=True)
    elif mode == "fast":
        install(SCRIPTS[script], fleet_scale(int(os.environ.get(FLEET_SIZE_ENV, "1"))))
        if notify_fd is not None:
            notify_task_ready(notify_fd)
    (entry,) = entry_points(group="console_scripts", name=script)
    sys.argv = [script, *rest]
    result = entry.load()()
    return int(result) if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
