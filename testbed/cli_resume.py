"""CLI command ``testbed resume RUN_ID``: continue a killed FL run from its checkpoint.

Registered on the main Typer app by :func:`register`; the work is
:func:`testbed.resume.resume_run`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def resume(
    run_id: Annotated[str, typer.Argument(help="the run's id (or a unique prefix)")],
    out: Annotated[Path, typer.Option("--out", help="run store folder")] = Path("runs"),
) -> None:
    """Resume a run whose runner died (kill -9, crash, Ctrl-C): a new fleet continues it
    from its last completed round (the round in progress runs again)."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)  # as `testbed run`
    from testbed.console import ConsoleObserver
    from testbed.resume import ResumeError, resume_run
    from testbed.store import RunStore

    store = RunStore(out)
    try:
        res = resume_run(store, run_id, ConsoleObserver(console))
    except ResumeError as e:
        err_console.print(f"[red]error:[/] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]: fleet stopped, run marked interrupted")
        raise typer.Exit(130) from None
    except Exception as e:  # the resumed attempt failed: record kept, say so plainly
        err_console.print(f"[red]run failed:[/] {type(e).__name__}: {e}", soft_wrap=True)
        raise typer.Exit(1) from None
    if res.status != "completed":
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``resume`` to the ``testbed`` CLI."""
    app.command("resume")(resume)
