"""The contract every workload implements, and what the runner hands it.

A workload is one registered class in one file (``@register_workload("section")`` in
:mod:`testbed.workloads`), keyed by its section of the spec's ``workload:``. The class
owns how the section runs on a backend and is recorded (:meth:`Workload.run`), its sweep
report (:meth:`Workload.write_report`), what the controller shows of its progress
(:meth:`Workload.rounds`) and its dashboard page (:attr:`Workload.page`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel

from testbed.planner import Plan
from testbed.spec.models import Experiment
from testbed.store import RunStore

if TYPE_CHECKING:
    from testbed.backends.base import Backend
    from testbed.runner import RunResult
    from testbed.workloads.together import SharedFleet


class Observer(Protocol):
    """Receives progress of a run (the CLI draws it; tests may record it)."""

    def started(self, run_id: str, plan: Plan) -> None: ...
    def record(self, rec: dict[str, Any]) -> None: ...
    def finished(self, result: RunResult) -> None: ...


@dataclass(frozen=True)
class Page:
    """A workload's dashboard page (the arguments of ``st.Page``).

    Attributes
    ----------
    path : str
        The page script, relative to ``ui/``.
    title, icon, url_path : str
        As ``st.Page`` takes them.
    """

    path: str
    title: str
    icon: str
    url_path: str


@dataclass(frozen=True)
class RunContext:
    """One run as a workload sees it.

    Attributes
    ----------
    plan : Plan
        The resolved run (its experiment and seed).
    run_id : str
        The run's id in the store.
    run_dir : pathlib.Path
        The run's artifact folder.
    store : RunStore
        Where events and metrics go as they happen.
    backend : str
        The registered backend name (``--backend``).
    backend_options : Mapping[str, Any]
        Keyword arguments for the backend's constructor.
    observer : Observer or None
        Who watches the run (the CLI's live view).
    resume : bool
        The run continues an earlier attempt from its checkpoint (``testbed resume``).
    section : str or None
        The workload this context runs (its store connection tags rows with it).
    fleet : SharedFleet or None
        The one fleet that the run's several workloads share
        (:mod:`testbed.workloads.together`); None: the workload has a fleet of its own.
    """

    plan: Plan
    run_id: str
    run_dir: Path
    store: RunStore
    backend: str = "local"
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    observer: Observer | None = None
    resume: bool = False
    section: str | None = None
    fleet: SharedFleet | None = None

    @property
    def experiment(self) -> Experiment:
        return self.plan.experiment

    @property
    def seed(self) -> int:
        return self.plan.seed

    def make_backend(self) -> Backend:
        """A fresh backend of this run (not started), from the backends registry; the
        run's shared fleet (itself a :class:`Backend`) when several workloads run
        together."""
        from testbed.backends import get_backend

        if self.fleet is not None:
            return self.fleet.acquire()
        return get_backend(self.backend)(self.plan, self.run_dir, **dict(self.backend_options))

    def chaos_engine(self, backend: Backend) -> Any:
        """The run's chaos engine on ``backend`` (one per fleet: several workloads of a
        run share the fault schedule, started once)."""
        from testbed.chaos import ChaosEngine

        if self.fleet is not None:
            return self.fleet.chaos_engine()
        return ChaosEngine(self.plan, backend, self.store, self.run_id, self.seed)

    def metric(self, row: Mapping[str, Any]) -> None:
        """Record one metric row ``{name, value, step?, node?, tags?}`` and show it."""
        self.store.add_metric(
            self.run_id,
            row["name"],
            row["value"],
            round=row.get("step"),
            node=row.get("node"),
            tags=row.get("tags"),
        )
        if self.observer:
            self.observer.record({"kind": "metric", **row})

    def progress(self, desc: str, frac: float) -> None:
        """Show progress ``frac`` (0..1) of the step ``desc``."""
        if self.observer:
            self.observer.record({"kind": "progress", "name": desc, "value": frac})


LINK_COUNTERS = ("bytes_up", "bytes_down", "partitioned_s", "stalled_s")
#: Keys of a backend's ``fleet_info`` that the run's summary keeps: the links in force,
#: the clock its times are on (simulation: ``virtual``) and what of the spec it ignored.
FLEET_KEYS = (
    "links_mode",
    "link_kinds",
    "links_fallback",
    "links_modelled",
    "limits_capped",
    "in_process",
    "clock",
    "ray",
    "app_image",
    "gpu",
    "ignored",
)


def record_links(ctx: RunContext, info: Mapping[str, Any]) -> dict[str, Any]:
    """What a started fleet chose (``info``: its
    :meth:`~testbed.backends.base.Backend.fleet_info`; :data:`FLEET_KEYS`), for the
    run's summary; a
    fallback (docker: netem could not shape the containers, proxy is used) is also a
    ``links_fallback`` event, shown live by the observer, never a line on stderr only.
    """
    links = {k: info[k] for k in FLEET_KEYS if k in info}
    if ctx.observer:  # (the live view: a simulation's clock is virtual)
        ctx.observer.record({"kind": "event", "name": "fleet_ready", **links})
    why = links.get("links_fallback")
    if why:
        asked, used = ctx.experiment.links.mode, links.get("links_mode")
        ctx.store.add_event(ctx.run_id, "links_fallback", asked=asked, used=used, why=why)
        if ctx.observer:
            rec = {"kind": "event", "name": "links_fallback", "asked": asked, "used": used}
            ctx.observer.record({**rec, "why": why})
    return links


def record_link_counters(
    store: RunStore,
    run_id: str,
    counters: Mapping[str, Mapping[str, Any]],
    read_at: float | None = None,
) -> None:
    """Record what crossed each node's emulated link (``link_*`` metrics per node) and
    every change of its parameters (``link_changed`` events); a radio link's model
    (``link_radio`` event, modelled) and windows (``radio_*`` metrics, step = window).
    ``read_at``: the wall time (``time.time()``) the counters were read; each change's
    event then carries the time it was applied (from its ``t_s`` since the link started
    and the link's ``uptime_s``), else the time of recording."""
    for name, c in counters.items():
        for key in LINK_COUNTERS:
            store.add_metric(run_id, f"link_{key}", float(c.get(key) or 0), node=name)
        up = c.get("uptime_s")
        for ch in c.get("changes", []):
            ts = None
            if read_at is not None and isinstance(up, int | float) and "t_s" in ch:
                ts = read_at - float(up) + float(ch["t_s"])
            store.add_event(run_id, "link_changed", node=name, ts=ts, **ch)
        if c.get("radio"):
            record_radio(store, run_id, name, c["radio"])


RADIO_WINDOW_METRICS = ("rate_mbps", "bler", "snr_db", "speed_mps")


def record_radio(store: RunStore, run_id: str, name: str, radio: Mapping[str, Any]) -> None:
    """An mmwave link's modelled parameters and its windows (rate, BLER, SNR, speed)."""
    store.add_event(
        run_id, "link_radio", node=name, **{k: v for k, v in radio.items() if k != "windows"}
    )
    for step, w in enumerate(radio.get("windows", [])):
        for key in RADIO_WINDOW_METRICS:
            store.add_metric(
                run_id, f"radio_{key}", float(w[key]), round=step, node=name,
                tags={"kind": "modelled", "t_s": w["t_s"]},
            )


class Workload(Protocol):
    """One kind of workload (a section of ``workload:`` in the spec).

    Attributes
    ----------
    section : str
        Its key under ``workload:`` (set by ``register_workload``).
    spec_model : type[pydantic.BaseModel]
        The pydantic model of that section.
    page : Page or None
        Its dashboard page (None: the generic pages suffice).

    A class may also set ``key_metrics`` (a tuple of metric names): the Timeline page
    draws those of its rows beside the other workloads' and the run's events; and
    ``key_bounds(section) -> {metric: (label, {series: upper bound})}`` (a static
    method of its resolved section): the Timeline's summary then gives the share of the
    metric's rows within their series' bound (functions: ``e2e_ms`` within each
    function's SLO). A workload whose section model sets ``dilated_clock = True`` runs
    under time dilation (``time_dilation``, :mod:`testbed.dilation`): every clock it
    keeps (timeouts, schedules, device waits) goes through :mod:`kernel.dilation`. A fleet
    workload's section model derives from :class:`nodes.hosting.Hosted` (``nodes``,
    ``gpu_slots``) so that it can share a run with others; it gets its backend from
    ``ctx.make_backend()`` and its chaos engine from ``ctx.chaos_engine(backend)``.
    """

    section: ClassVar[str]
    spec_model: ClassVar[type[BaseModel]]
    page: ClassVar[Page | None]

    def run(self, ctx: RunContext) -> dict[str, Any]:
        """Run the section of ``ctx.experiment``, recording to ``ctx.store``; return the
        run summary (``status`` may be set: ``completed`` or ``failed``)."""
        ...

    def write_report(self, store: RunStore, sweep_id: str, out: Path) -> tuple[Path, Path]:
        """Write the sweep's report under ``out``; return (markdown, html) paths."""
        ...

    def rounds(self, section: Mapping[str, Any]) -> int | None:
        """How many rounds a run has, from its resolved section (None: not round-based)."""
        ...


class LibraryWorkload:
    """Base of the workloads that run in-process (no fleet): no rounds, no sweep report.

    Subclasses set ``spec_model``, ``page`` and implement :meth:`run`.
    """

    section: ClassVar[str]
    spec_model: ClassVar[type[BaseModel]]
    page: ClassVar[Page | None] = None
    #: Where it runs, whatever the backend (said by ``validate`` and the run's summary
    #: off the local backend: it makes no node container or Ray actor).
    runs_in: ClassVar[str] = (
        "the runner's own process (an in-process workload: no fleet, so no node "
        "container; its compute is this host's)"
    )

    def write_report(self, store: RunStore, sweep_id: str, out: Path) -> tuple[Path, Path]:
        raise ValueError(
            f"testbed report: workload {self.section!r} has no sweep report; "
            "its dashboard page compares its runs"
        )

    def rounds(self, section: Mapping[str, Any]) -> int | None:
        return None

    def run(self, ctx: RunContext) -> dict[str, Any]:
        raise NotImplementedError
