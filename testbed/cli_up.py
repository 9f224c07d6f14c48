"""CLI commands ``testbed controller`` (the API), ``testbed dashboard`` (the Streamlit
dashboard, against a controller) and ``testbed up`` (both).

Registered on the main Typer app by :func:`register`; the commands are thin and call
:mod:`testbed.controller.server` / start the Streamlit dashboard as a subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

UI_APP = Path(__file__).resolve().parents[1] / "ui" / "app.py"

console = Console()
err_console = Console(stderr=True)

OutOpt = Annotated[Path, typer.Option("--out", help="run store folder")]
ExpOpt = Annotated[Path, typer.Option("--experiments", help="folder of experiment YAML files")]
HostOpt = Annotated[str, typer.Option(help="bind address (beyond loopback needs --token)")]
TokenOpt = Annotated[
    str | None,
    typer.Option(envvar="TESTBED_TOKEN", help="API token (env TESTBED_TOKEN)", show_default=False),
]


def controller(
    out: OutOpt = Path("runs"),
    experiments: ExpOpt = Path("experiments"),
    host: HostOpt = "127.0.0.1",
    port: Annotated[int, typer.Option(help="API port")] = 8000,
    token: TokenOpt = None,
) -> None:
    """Run the controller API (launch/stop/watch runs, inject faults); docs at /docs."""
    from testbed.controller.server import check_bind, serve

    try:
        check_bind(host, token)
    except ValueError as e:
        err_console.print(f"[red]error:[/] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(f"controller on http://{host}:{port} (API docs: http://{host}:{port}/docs)")
    serve(out, experiments, host, port, token)


def _dashboard_cmd(host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(UI_APP)] + [
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]


def dashboard(
    controller_url: Annotated[
        str, typer.Option("--controller", envvar="TESTBED_CONTROLLER_URL", help="API URL")
    ] = "http://127.0.0.1:8000",
    host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="dashboard port")] = 8501,
) -> None:
    """Run the Streamlit dashboard alone, against a running controller."""
    env = dict(os.environ, TESTBED_CONTROLLER_URL=controller_url)
    console.print(f"dashboard on {_local_url(host, port)} (controller {controller_url})")
    raise typer.Exit(subprocess.call(_dashboard_cmd(host, port), env=env))


def _local_url(host: str, port: int) -> str:
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"


def _stop(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def up(
    out: OutOpt = Path("runs"),
    experiments: ExpOpt = Path("experiments"),
    host: HostOpt = "127.0.0.1",
    port: Annotated[int, typer.Option(help="controller API port")] = 8000,
    ui_port: Annotated[int, typer.Option(help="dashboard port")] = 8501,
    token: TokenOpt = None,
) -> None:
    """Start the controller and the Streamlit dashboard; print the dashboard URL."""
    from testbed.controller.server import check_bind
    from testbed.procs import wait_port

    try:
        check_bind(host, token)
    except ValueError as e:
        err_console.print(f"[red]error:[/] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)  # also when started in the background
    signal.signal(signal.SIGTERM, interrupt)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if token:
        env["TESTBED_TOKEN"] = token  # passed by environment, not on a command line
    api = subprocess.Popen(
        [sys.executable, "-m", "testbed", "controller", "--out", str(out)]
        + ["--experiments", str(experiments), "--host", host, "--port", str(port)],
        env=env,
    )
    procs = [api]
    try:
        wait_port(port, 30, api)
        env["TESTBED_CONTROLLER_URL"] = _local_url(host, port)
        ui = subprocess.Popen(_dashboard_cmd(host, ui_port), env=env, stdout=subprocess.DEVNULL)
        procs.append(ui)
        wait_port(ui_port, 60, ui)
        console.print(
            f"[bold green]dashboard[/]  {_local_url(host, ui_port)}\n"
            f"controller {_local_url(host, port)}  (API docs {_local_url(host, port)}/docs)\n"
            "Ctrl-C stops both (running experiments are stopped and marked interrupted)."
        )
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        failure = "the controller or the dashboard exited"
    except (RuntimeError, TimeoutError) as e:
        failure = str(e)
    except KeyboardInterrupt:
        console.print("stopping")
        failure = None
    finally:
        for p in reversed(procs):
            _stop(p, 90)
    if failure:
        err_console.print(f"[red]error:[/] {failure}", soft_wrap=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``controller``, ``dashboard`` and ``up`` to the ``testbed`` CLI."""
    app.command("controller")(controller)
    app.command("dashboard")(dashboard)
    app.command("up")(up)
