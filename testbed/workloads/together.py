"""Several workloads in one run: one fleet, one fault schedule, one timeline.

A spec whose ``workload:`` sets several sections (FL and functions, say) runs each
workload's own :meth:`~testbed.workloads.base.Workload.run` in its own thread, all on
ONE :class:`SharedFleet`:

- the backend is built once; the first workload that starts it (``start``, or
  ``start_services`` when the run has an FL fleet to start first) starts it, the
  others find it running; link schedules and the space clock start once;
- the chaos engine is one :class:`SharedChaos`: the fault schedule fires once (its
  ``at_time_s`` counts from the first workload that was ready), its faults act on the
  nodes of every workload (a crash of a node kills every workload's process there);
- a node that hosts several workloads runs their processes side by side (same CPUs),
  and a workload's service on a node is relayed through the node's own link
  (:meth:`~testbed.emulation.proxy.ShapingProxy.add_route`): they share its bandwidth;
- every workload writes through its own store connection tagged with its section
  (``metrics.workload`` / ``events.workload``); the fleet's own rows (faults, link
  counters) carry no workload;
- the fleet stops when the last workload has released it; its links' counters are
  recorded once, then.

A workload plugs in by getting its backend from ``ctx.make_backend()`` and its chaos
engine from ``ctx.chaos_engine(backend)``; it needs nothing else. :class:`SharedFleet`
is itself a :class:`~testbed.backends.base.Backend`: it declares every member and
hands each to the run's backend (no attribute lookup falls through).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from testbed.backends.base import Backend, NodeHandle, NodeResources, Process
from testbed.chaos import ChaosEngine
from testbed.spec.models import FaultSpec
from testbed.workloads.base import RunContext, record_link_counters

if TYPE_CHECKING:
    from testbed.emulation.link import Link
    from testbed.procs import Popen
    from testbed.space.schedule import SpaceModel
    from testbed.spec.models import LinkSpec

T = TypeVar("T")


class SharedChaos(ChaosEngine):
    """The one chaos engine of a run with several workloads: started once, ticked and
    fed by every workload's thread under one lock, targeting every workload's nodes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.RLock()
        self.started = False

    def start(self) -> None:
        with self.lock:
            if not self.started:
                self.started = True
                super().start()

    def tick(self) -> None:
        with self.lock:
            super().tick()

    def on_record(self, rec: dict[str, Any]) -> None:
        with self.lock:
            super().on_record(rec)

    def targets(self, f: FaultSpec) -> list[str]:
        """Nodes fault ``f`` names among the nodes that host a workload (FL's server
        excepted: a server fault targets it)."""
        nodes = [n for n in self.plan.nodes if n.workloads and n.role != "server"]
        if f.node is not None:
            return [
                n.name for n in nodes if n.name == f.node or n.name.rsplit("-", 1)[0] == f.node
            ]
        return [n.name for n in nodes if n.tier == f.tier]


class SharedFleet(Backend):
    """One backend that the workloads of a run share: a :class:`Backend` that hands
    every member to the run's backend, starting the fleet, its schedules and its chaos
    engine once and stopping it when the last workload released it.

    Parameters
    ----------
    ctx : RunContext
        The run (its backend name and options build the backend).
    users : int
        How many workloads share it; the fleet stops when they all released it.
    """

    name = "shared"

    def __init__(self, ctx: RunContext, users: int) -> None:
        from testbed.backends import get_backend

        self.ctx, self.users = ctx, users
        self.plan, self.run_dir = ctx.plan, ctx.run_dir
        self.backend = get_backend(ctx.backend)(ctx.plan, ctx.run_dir, **dict(ctx.backend_options))
        # (a backend that decides faults itself runs one workload: its preflight says so)
        assert not self.backend.decides_faults, "a shared fleet's faults are the chaos engine's"
        self.lock = threading.RLock()  # flags and counts (held briefly)
        self.start_lock = threading.Lock()  # the fleet's start (held while it starts)
        self.services_lock = threading.Lock()  # one workload's services at a time
        self.store = ctx.store.tagged(None)  # the fleet's own rows (faults, links)
        self.started = self.stopped = False
        self.schedules_t0: float | None = None  # when the links' schedules started
        self.released = 0
        self._chaos: SharedChaos | None = None
        # a run with FL clients starts its SuperLink and SuperNodes before any service
        self.starts = any(n.role == "client" and "fl" in n.workloads for n in ctx.plan.nodes)

    def acquire(self) -> SharedFleet:
        """What ``ctx.make_backend()`` returns to each workload."""
        return self

    # -- the backend's state, as the backend holds it ---------------------------------
    @property
    def superlink_port(self) -> int | None:  # type: ignore[override]
        """The backend's SuperLink port (None before it started)."""
        return self.backend.superlink_port

    @property
    def superlink_restarts(self) -> int:  # type: ignore[override]
        """How many times the backend's SuperLink was restarted."""
        return self.backend.superlink_restarts

    @property
    def links(self) -> Mapping[str, Link]:
        """Every link of the fleet (all workloads')."""
        return self.backend.links

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the fleet (once; another workload's call waits until it is up)."""
        with self.start_lock:
            if not self.started:
                self.backend.start(timeout_s)
                self.started = True

    def start_services(
        self, commands: Mapping[str, list[str]], ports: Mapping[str, int], timeout_s: float = 60.0
    ) -> dict[str, int]:
        """Start a workload's services on its nodes, after the FL fleet is up (so that
        they join the nodes' processes and links); links made for them play their
        schedules on the clock the others' started on."""
        return self._after_fleet(
            lambda: self.backend.start_services(commands, ports, timeout_s)
        )

    def start_processes(self, commands: Mapping[str, list[str]]) -> dict[str, str]:
        """Start a workload's own programs on its nodes (after the FL fleet is up: a
        node that also runs a SuperNode keeps it; the program runs beside it)."""
        return self._after_fleet(lambda: self.backend.start_processes(commands))

    def open_links(
        self, specs: Mapping[str, LinkSpec], server_port: int, server_host: str = "127.0.0.1"
    ) -> dict[str, str]:
        """A workload's own links (e.g. semantic offload's devices to their fog), made
        after the FL fleet's; they play their schedules on the others' clock."""
        return self._after_fleet(
            lambda: self.backend.open_links(specs, server_port, server_host)
        )

    def _after_fleet(self, call: Callable[[], T]) -> T:
        """``call()`` once the FL fleet is up, one workload at a time; the links it
        made start their schedules on the clock the others' started on."""
        if self.starts:
            self.start()
        with self.services_lock:
            before = set(self.backend.links)
            out = call()
            new = set(self.backend.links) - before
        with self.lock:
            if self.schedules_t0 is not None and new:
                self.backend.start_schedules(only=new, t0=self.schedules_t0)
        return out

    # -- the backend's members, handed on ------------------------------------------------
    def node(self, name: str) -> NodeHandle:
        return self.backend.node(name)

    def restart_superlink(self) -> None:
        self.backend.restart_superlink()

    def submit(self, run_config: dict[str, object], app_dir: Path | None = None) -> Process:
        return self.backend.submit(run_config, app_dir)

    def attach(self, flwr_run_id: int) -> Process:
        return self.backend.attach(flwr_run_id)

    def flwr_run_id(self) -> int | None:
        return self.backend.flwr_run_id()

    def process(self, key: str) -> Popen:
        return self.backend.process(key)

    def service_host(self, key: str) -> str:
        return self.backend.service_host(key)

    def node_ids(self) -> dict[str, str]:
        return self.backend.node_ids()

    def node_limits(self) -> dict[str, dict[str, Any]]:
        return self.backend.node_limits()

    def resources(self) -> dict[str, NodeResources]:
        return self.backend.resources()

    def rss_mb(self) -> dict[str, float]:
        return self.backend.rss_mb()

    def space_model(self) -> SpaceModel | None:
        return self.backend.space_model()

    def alive(self) -> dict[str, bool]:
        return self.backend.alive()

    def fleet_info(self) -> dict[str, Any]:
        return self.backend.fleet_info()

    def exit_reasons(self) -> dict[str, str]:
        return self.backend.exit_reasons()

    def mean_cpu_pct(self) -> dict[str, float]:
        return self.backend.mean_cpu_pct()

    def live_link_counters(self) -> dict[str, dict[str, Any]]:
        """The shared links' counters now (for a workload's summary; the fleet's rows
        are recorded once, by :meth:`close`)."""
        counters: dict[str, dict[str, Any]] = self.backend.link_counters()
        return counters

    def start_schedules(
        self, only: Collection[str] | None = None, t0: float | None = None
    ) -> None:
        """Play the links' schedules from now (once); ``only``: those nodes' links, on
        the fleet's clock (``t0`` if it has none yet)."""
        import time

        with self.lock:
            if only is not None:
                self.backend.start_schedules(only=only, t0=self.schedules_t0 or t0)
            elif self.schedules_t0 is None:
                self.schedules_t0 = time.monotonic() if t0 is None else t0
                self.backend.start_schedules(t0=self.schedules_t0)

    def chaos_engine(self) -> SharedChaos:
        """The run's one chaos engine."""
        with self.lock:
            if self._chaos is None:
                ctx = self.ctx
                self._chaos = SharedChaos(ctx.plan, self.backend, self.store, ctx.run_id, ctx.seed)
            return self._chaos

    def link_counters(self) -> dict[str, dict[str, Any]]:
        """Nothing per workload: the shared links' counters are recorded once, by
        :meth:`close`."""
        return {}

    def stop(self) -> None:
        """A workload is done with the fleet; the last one stops it."""
        with self.lock:
            self.released += 1
            if self.released >= self.users:
                self.close()

    def close(self) -> None:
        """Stop the fleet (once) and record its links' counters as the fleet's rows."""
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
            import time

            counters, read_at = self.backend.link_counters(), time.time()
            try:
                self.backend.stop()
            finally:
                record_link_counters(self.store, self.ctx.run_id, counters, read_at)
                self.store.close()


def run_together(ctx: RunContext, sections: list[str]) -> dict[str, Any]:
    """Run the workloads ``sections`` of ``ctx`` at once on one :class:`SharedFleet`.

    Returns
    -------
    dict
        The first workload's summary (what the run list shows) with every workload's
        under ``workloads``; ``status`` is ``completed`` when every workload completed.
    """
    from testbed.workloads import workload

    fleet = SharedFleet(ctx, len(sections))
    results: dict[str, dict[str, Any]] = {}
    errors: dict[str, BaseException] = {}

    def one(section: str) -> None:
        store = ctx.store.tagged(section)
        try:
            results[section] = workload(section).run(
                replace(ctx, store=store, section=section, fleet=fleet)
            )
        except BaseException as exc:  # reported below, after the others ended
            errors[section] = exc
            store.add_event(ctx.run_id, "error", message=f"{type(exc).__name__}: {exc}")
        finally:
            store.close()

    threads = [
        threading.Thread(target=one, args=(s,), name=f"workload-{s}", daemon=True)
        for s in sections
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    finally:
        fleet.close()
    if errors:
        section, exc = next(iter(errors.items()))
        raise RuntimeError(f"workload {section}: {type(exc).__name__}: {exc}") from exc
    statuses = {s: r.get("status", "completed") for s, r in results.items()}
    summary = dict(results[sections[0]])
    summary["workloads"] = results
    summary["status"] = "completed" if set(statuses.values()) == {"completed"} else "failed"
    return summary
