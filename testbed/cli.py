"""The ``testbed`` command line: thin wrappers over library functions.

User mistakes (bad spec, unknown run, bad option) print one clear message and exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nodes.cli import node_app

if TYPE_CHECKING:
    from testbed.runner import SweepItem
    from testbed.spec.models import Experiment

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="continuum-testbed: emulated edge-fog-cloud-space fleets running real FL.",
)
app.add_typer(node_app, name="node")  # what runs on a node: nodes/cli.py
console = Console()
err_console = Console(stderr=True)

OutOpt = Annotated[Path, typer.Option("--out", help="run store folder")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override: key.path=value")]
AdvertiseOpt = Annotated[
    str | None,
    typer.Option(
        help="swarm: the address the other engines reach this runner at (its proxies "
        "and the SuperLink; default: the manager's swarm address)"
    ),
]
OversubscribeOpt = Annotated[
    bool,
    typer.Option(
        help="start a fleet the capacity check says will not fit (local, docker), and "
        "give docker node containers a spec-defined profile above this host (refused "
        "otherwise; recorded in the run)"
    ),
]
SpecDirOpt = Annotated[
    Path | None,
    typer.Option(help="read the spec's relative paths from here (default: the file's folder)"),
]


def _fail(msg: str) -> typer.Exit:
    from rich.markup import escape  # a message's [brackets] are text, not style tags

    err_console.print(f"[red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def _fits(
    file: Path,
    experiments: list[Experiment],
    backend: str,
    parallel: int = 1,
    oversubscribe: bool = False,
) -> None:
    """Refuse a fleet that would not fit on this machine (before anything starts);
    ``--oversubscribe``: say so and go on (the flag is recorded in the run)."""
    from testbed.capacity import FleetTooLarge, check_sweep
    from testbed.spec.loader import error_at

    try:
        check_sweep(experiments, backend, parallel)
    except FleetTooLarge as e:
        msg = str(error_at(file, e.path, str(e).removeprefix(f"{e.path}: ")))
        if not oversubscribe:
            raise _fail(msg) from None
        err_console.print(
            f"[yellow]--oversubscribe:[/] {escape(msg)}", highlight=False, soft_wrap=True
        )


@app.command()
def validate(
    file: Path,
    set_: SetOpt = None,
    spec_dir: SpecDirOpt = None,
    backend: Annotated[
        str, typer.Option(help="check the spec against this backend (as `run` does)")
    ] = "local",
    oversubscribe: OversubscribeOpt = False,
    advertise_addr: AdvertiseOpt = None,
) -> None:
    """Validate an experiment file; print every error with its path and line.

    It also runs the backend's preflight (what ``run --backend`` checks before it
    records anything: what the backend supports, its engine) and, for the local
    backend, checks that the fleet fits on this machine.
    """
    from testbed.backends import preflight
    from testbed.hostfs import runner_path
    from testbed.spec.loader import SpecError, expand, parse_set

    file = runner_path(file)  # (a host path, read from a compose container's /host)
    try:
        runs = expand(file, parse_set(set_ or []), spec_dir)
        options = _options(False, oversubscribe, advertise_addr)
        cls = preflight(backend, [e for _a, e in runs], options, host=False)
    except (SpecError, ValueError) as e:
        raise _fail(str(e)) from None
    _fits(file, [e for _a, e in runs], backend, oversubscribe=oversubscribe)
    exp = runs[0][1]
    console.print(
        f"[green]ok[/] {file}: experiment {exp.name!r}, {len(runs)} configuration(s)"
        f" x {exp.repetitions} repetition(s)"
    )
    for line in cls.notes([e for _a, e in runs], options):
        console.print(f"[yellow]note:[/] {line}", highlight=False)
    why = cls.unavailable()  # the spec is valid; is this machine ready to run it now?
    if why is not None:
        console.print(f"[yellow]not ready here now:[/] {escape(why)}", highlight=False)


@app.command()
def run(
    file: Path,
    backend: Annotated[
        str, typer.Option(help="local, docker, swarm, compose, simulation")
    ] = "local",
    out: OutOpt = Path("runs"),
    set_: SetOpt = None,
    cold: Annotated[
        bool, typer.Option(help="Flower's cold per-message ClientApp processes")
    ] = False,
    parallel: Annotated[int, typer.Option(help="sweep: configurations run at once")] = 1,
    ray_address: Annotated[
        str | None,
        typer.Option(help="simulation: attach to this Ray cluster (= simulation.ray_address)"),
    ] = None,
    spec_dir: SpecDirOpt = None,
    oversubscribe: OversubscribeOpt = False,
    advertise_addr: AdvertiseOpt = None,
    item: Annotated[int | None, typer.Option(hidden=True)] = None,
    sweep_id: Annotated[str | None, typer.Option(hidden=True)] = None,
) -> None:
    """Run an experiment (every configuration of its sweep; finished ones are skipped)."""
    import signal

    set_ = _with_ray_address(set_, ray_address, backend)

    # A shell starts background jobs with SIGINT ignored; Ctrl-C / `kill -INT` (also the
    # controller's stop) must still interrupt the run and tear its fleet down.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from testbed.backends import preflight
    from testbed.hostfs import runner_path
    from testbed.runner import sweep_id_of, sweep_items
    from testbed.spec.loader import SpecError, expand, parse_set

    file = runner_path(file)  # (a host path, read from a compose container's /host)
    try:
        items = sweep_items(expand(file, parse_set(set_ or []), spec_dir))
        # as validate, before recording; --cold where a backend has no cold start: refused
        options = _options(cold, oversubscribe, advertise_addr)
        preflight(backend, [it.experiment for it in items], options)
    except (SpecError, ValueError) as e:
        raise _fail(str(e)) from None
    if parallel < 1:
        raise _fail("--parallel: must be >= 1")
    _fits(
        file,
        [it.experiment for it in items],
        backend,
        parallel if item is None else 1,
        oversubscribe,
    )
    sweep = sweep_id or (
        sweep_id_of(str(file), file.read_text() + json.dumps(set_ or []))
        if len(items) > 1
        else None
    )
    if item is not None:  # one configuration of a sweep (a child of --parallel)
        if not 0 <= item < len(items):
            raise _fail(f"--item: must be in 0..{len(items) - 1}")
        items = [items[item]]
    elif sweep and parallel > 1:
        from testbed.sweep import run_parallel

        try:
            counts = run_parallel(
                *(file, items, sweep, out, parallel, set_ or [], backend, console, spec_dir),
                *(cold, oversubscribe, advertise_addr),
            )
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]: runs stopped and marked interrupted")
            raise typer.Exit(130) from None
        console.print(f"sweep {sweep}: {counts}; report: testbed report {sweep} --out {out}")
        raise typer.Exit(1 if counts["failed"] else 0)
    _run_items(file, items, sweep, out, backend, options)


def _options(
    cold: bool, oversubscribe: bool = False, advertise: str | None = None
) -> dict[str, Any]:
    """The backend options of ``testbed run``'s flags (``--cold``: ``warm=False``;
    ``--oversubscribe``: ``oversubscribe=True``; ``--advertise-addr``: ``advertise``); a
    backend that does not take one refuses it (:func:`testbed.backends.check_options`)."""
    out: dict[str, Any] = {"warm": False} if cold else {}
    out.update({"advertise": advertise} if advertise else {})
    return {**out, "oversubscribe": True} if oversubscribe else out


def _with_ray_address(sets: list[str] | None, address: str | None, backend: str) -> list[str]:
    """``--set`` items plus ``simulation.ray_address`` when ``--ray-address`` is given."""
    if address is None:
        return sets or []
    if backend != "simulation":
        raise _fail("--ray-address: needs --backend simulation")
    return [*(sets or []), f"simulation.ray_address={json.dumps(address)}"]


def _run_items(
    file: Path,
    items: list[SweepItem],
    sweep: str | None,
    out: Path,
    backend: str,
    options: dict[str, Any],
) -> None:
    """Run configurations one after the other in this process, with live display."""
    from testbed.console import ConsoleObserver
    from testbed.runner import run_experiment
    from testbed.store import RunStore

    store = RunStore(out)
    results = []
    try:
        for i, it in enumerate(items, 1):
            label = f"[{i}/{len(items)}] " if len(items) > 1 else ""
            if sweep and (done := store.completed_variant(sweep, it.variant)):
                console.print(f"{label}skip (done: {done.run_id}) {it.assignment} seed={it.seed}")
                continue
            if label:
                console.rule(f"{label}{it.assignment} seed={it.seed}")
            res = run_experiment(
                it.experiment,
                store,
                seed=it.seed,
                backend=backend,
                spec_path=str(file),
                sweep_id=sweep,
                variant=it.variant,
                assignment=it.assignment,
                observer=ConsoleObserver(console, label),
                backend_options=options,
            )
            results.append(res)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]: fleet stopped, run marked interrupted")
        raise typer.Exit(130) from None
    except Exception as e:  # a run failed: record kept, say so plainly
        err_console.print(f"[red]run failed:[/] {type(e).__name__}: {e}", soft_wrap=True)
        raise typer.Exit(1) from None
    if sweep and len(items) > 1:
        console.print(f"sweep {sweep}: {len(results)} run(s) this time, store {store.path}")
    if any(r.status != "completed" for r in results):
        raise typer.Exit(1)


@app.command("ls")
def ls(out: OutOpt = Path("runs")) -> None:
    """List recorded runs (a failed run with its cause: the first error and its node)."""
    from testbed.cause import failure_cause
    from testbed.store import RunStore

    store = RunStore(out)
    store.mark_stale()
    t = Table()
    for col in ("run", "name", "status", "seed", "final acc", "wall s", "sweep"):
        t.add_column(col)
    t.add_column("cause", ratio=1)  # cut to 50 characters (testbed show: all of it)
    for r in store.runs():
        s = r.summary_dict
        acc = s.get("final_global_acc")
        cause = failure_cause(store, r)
        t.add_row(
            r.run_id,
            r.name,
            r.status,
            str(r.seed),
            "-" if acc is None else f"{acc:.3f}",
            f"{s['wall_s']:.1f}" if "wall_s" in s else "-",
            r.sweep_id or "",
            "" if cause is None else escape(cause.short(50)),
        )
    console.print(t)


@app.command()
def show(run_id: str, out: OutOpt = Path("runs")) -> None:
    """Show one run: its summary (each workload's tables; a failed run's cause: the
    first error, with the node and log file it came from), the status of every node in
    every round, and the events (faults, their effects, link changes such as satellite
    passes, errors) with the time since the run started."""
    from testbed.show import show_run
    from testbed.store import RunStore

    store = RunStore(out)
    try:
        r = store.run(run_id)
    except KeyError as e:
        raise _fail(str(e.args[0])) from None
    show_run(console, store, r)


@app.command()
def export(
    run_id: str,
    format: Annotated[str, typer.Option("--format", help="csv or parquet")] = "csv",
    out: OutOpt = Path("runs"),
    to: Annotated[Path | None, typer.Option("-o", help="output file")] = None,
) -> None:
    """Export a run's metrics (long format: round, node, name, value, ts)."""
    from testbed.store import RunStore

    if format not in ("csv", "parquet"):
        raise _fail(f"--format: must be csv or parquet, got {format!r}")
    store = RunStore(out)
    try:
        r = store.run(run_id)
    except KeyError as e:
        raise _fail(str(e.args[0])) from None
    df = store.metrics_frame(r.run_id)
    path = to or Path(r.artifact_dir or ".") / f"metrics.{format}"
    df.to_csv(path, index=False) if format == "csv" else df.to_parquet(path, index=False)
    console.print(f"{len(df)} rows -> {path}")


@app.command()
def report(
    sweep_id: str,
    out: OutOpt = Path("runs"),
    to: Annotated[Path | None, typer.Option("-o", help="report folder")] = None,
) -> None:
    """Write a sweep's report (markdown + HTML with plots and tables).

    SWEEP_ID is a sweep id (printed by `testbed run`) or the sweep's YAML file.
    """
    from testbed.report import write_report
    from testbed.runner import sweep_id_of
    from testbed.store import RunStore

    if Path(sweep_id).is_file():
        sweep_id = sweep_id_of(sweep_id, Path(sweep_id).read_text() + json.dumps([]))
    store = RunStore(out)
    try:
        md, page = write_report(store, sweep_id, to or out / "reports" / sweep_id)
    except ValueError as e:
        raise _fail(str(e)) from None
    console.print(f"wrote {md} and {page}")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def inject(
    ctx: typer.Context,
    run_id: str,
    kind: Annotated[str, typer.Option(help="a fault kind (--list-kinds shows them)")] = "",
    node: Annotated[str | None, typer.Option(help="target node name")] = None,
    tier: Annotated[str | None, typer.Option(help="target every client of a tier")] = None,
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="a kind's parameter: key=value")
    ] = None,
    list_kinds: Annotated[bool, typer.Option(help="list the kinds and their options")] = False,
    out: OutOpt = Path("runs"),
    wait_s: float = 15.0,
) -> None:
    """Inject a fault into a RUNNING run now (its chaos engine applies it).

    The kind's parameters are options too: --duration-s 8, --bandwidth-mbps 1 ...
    """
    import time

    from pydantic import ValidationError

    from testbed.faults.options import kinds_help, live_fault, parse_params
    from testbed.spec.models import FaultSpec
    from testbed.store import RunStore

    if list_kinds:
        console.print(kinds_help(), highlight=False, soft_wrap=True)
        return
    try:
        spec = live_fault(kind, node, tier, parse_params(list(ctx.args), param or []))
        FaultSpec.model_validate(spec)
    except ValidationError as e:
        msgs = "; ".join(
            f"--{'.'.join(map(str, x['loc'])).replace('_', '-') or 'fault'}: {x['msg']}"
            for x in e.errors()
        )
        raise _fail(msgs.replace("Value error, ", "")) from None
    except ValueError as e:
        raise _fail(str(e)) from None
    store = RunStore(out)
    try:
        run = store.run(run_id)
    except KeyError as e:
        raise _fail(str(e.args[0])) from None
    if run.status != "running":
        raise _fail(f"run {run.run_id} is {run.status}, not running")
    inj = store.add_injection(run.run_id, spec)
    deadline = time.time() + wait_s
    while (status := store.injection_status(inj)) == "pending" and time.time() < deadline:
        time.sleep(0.2)
    console.print(f"injection {inj} into {run.run_id}: {status}")
    if status.startswith("rejected"):
        raise typer.Exit(2)


@app.command()
def compose(
    file: Path,
    to: Annotated[Path, typer.Option("-o", help="output file")] = Path("docker-compose.yml"),
    image: str = "continuum-testbed:latest",
) -> None:
    """Write a docker-compose file for an experiment's fleet (one container per node)."""
    from testbed.backends.compose import render_compose
    from testbed.planner import make_plan
    from testbed.spec.loader import SpecError, load_spec

    try:
        exp = load_spec(file)
    except SpecError as e:
        raise _fail(str(e)) from None
    if exp.workload.fl is None:
        raise _fail("compose: only fl workloads run as a fleet of containers")
    to.write_text(render_compose(make_plan(exp), str(file), image))
    console.print(f"wrote {to}")


from testbed.cli_resume import register as register_resume  # noqa: E402
from testbed.cli_up import register  # noqa: E402  (controller, up)

register(app)
register_resume(app)


def main() -> None:
    """Console-script entry point."""
    app()
