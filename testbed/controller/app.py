"""The controller's HTTP API (FastAPI); the OpenAPI schema is served at ``/docs``.

Every route is a thin wrapper over :class:`testbed.controller.service.Controller`.
Cursors: ``/runs/{id}/metrics?since=N`` and ``/runs/{id}/events?since=N`` return the
rows after row id ``N`` and the new cursor, so a live view fetches only what is new.
With a token, every route but ``/health`` and the docs needs
``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
import secrets
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field

from testbed.controller.service import Controller, UserError

OPEN_PATHS = ("/health", "/docs", "/openapi.json", "/redoc")


class ValidateBody(BaseModel):
    """YAML text to validate, with ``key.path=value`` overrides."""

    text: str
    source: str = "experiment.yaml"
    set: list[str] = Field(default_factory=list)


class LaunchBody(BaseModel):
    """Launch a file of the experiments folder (``experiment``) or YAML ``text``."""

    experiment: str | None = None
    text: str | None = None
    name: str | None = Field(None, description="file name for text (saved under specs/)")
    set: list[str] = Field(default_factory=list)


class FleetBody(BaseModel):
    """An experiment's YAML text whose planned fleet is wanted."""

    text: str
    set: list[str] = Field(default_factory=list)


class FaultBody(BaseModel):
    """A live fault: kind and target, plus the kind's parameters (see ``/faults``)."""

    model_config = {"extra": "allow"}

    kind: str
    node: str | None = None
    tier: str | None = None
    wait_s: float = Field(5.0, ge=0, le=60, description="wait this long for it to apply")


def create_app(
    store_root: str | Path, experiments_dir: str | Path, token: str | None = None
) -> FastAPI:
    """Build the controller app over a run store and an experiments folder.

    Parameters
    ----------
    store_root : str or pathlib.Path
        Run store folder (created if missing); launched runs write here.
    experiments_dir : str or pathlib.Path
        Folder of experiment YAML files offered for launch.
    token : str, optional
        When set, requests must carry ``Authorization: Bearer <token>``.
    """
    ctl = Controller(Path(store_root), Path(experiments_dir))

    @asynccontextmanager
    async def lifespan(_app: FastAPI):  # noqa: ANN202
        yield
        await asyncio.to_thread(ctl.shutdown)  # stop launched runs, close the store

    app = FastAPI(
        title="continuum-testbed controller",
        summary="Launch, watch, break (inject faults) and compare runs.",
        lifespan=lifespan,
    )
    app.state.controller = ctl

    @app.middleware("http")
    async def require_token(request: Request, call_next):  # noqa: ANN202
        if token and not request.url.path.startswith(OPEN_PATHS):
            given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not secrets.compare_digest(given.encode(), token.encode()):
                return JSONResponse({"detail": "missing or wrong token"}, status_code=401)
        return await call_next(request)

    @app.exception_handler(UserError)
    async def user_error(_request: Request, exc: UserError) -> JSONResponse:
        return JSONResponse(
            {"detail": exc.message, "problems": exc.problems}, status_code=exc.status
        )

    @app.get("/health", tags=["service"])
    async def health() -> dict[str, Any]:
        """Liveness, and where the store and experiments are."""
        return {
            "ok": True,
            "store": str(ctl.store_root),
            "experiments": str(ctl.experiments_dir),
            "token_required": bool(token),
        }

    # -- experiments ----------------------------------------------------------------
    @app.get("/experiments", tags=["experiments"])
    async def experiments() -> list[dict[str, Any]]:
        """Experiment files offered for launch."""
        return ctl.experiments()

    @app.get("/experiments/{name}", tags=["experiments"], response_class=PlainTextResponse)
    async def experiment_text(name: str) -> str:
        """The YAML text of an experiment file."""
        return ctl.experiment_text(name)

    @app.post("/validate", tags=["experiments"])
    async def validate(body: ValidateBody) -> dict[str, Any]:
        """Validate YAML: ``ok`` and every problem with its YAML ``path`` and ``line``."""
        return await asyncio.to_thread(ctl.validate, body.text, body.source, body.set)

    @app.post("/plan", tags=["experiments"])
    async def plan(body: FleetBody) -> dict[str, Any]:
        """The planned fleet (nodes, tiers, links) of an experiment, before any run."""
        return ctl.fleet_of_text(body.text, body.set)

    # -- launches -------------------------------------------------------------------
    @app.post("/launches", tags=["launches"], status_code=201)
    async def launch(body: LaunchBody) -> dict[str, Any]:
        """Launch an experiment (all runs of its sweep) as a `testbed run` subprocess."""
        job = await asyncio.to_thread(ctl.launch, body.experiment, body.text, body.name, body.set)
        return ctl.job(job.job_id)

    @app.get("/launches", tags=["launches"])
    async def launches() -> list[dict[str, Any]]:
        """Launches of this controller, newest first, with progress over their runs."""
        return ctl.all_jobs()

    @app.get("/launches/{job_id}", tags=["launches"])
    async def launch_status(job_id: str) -> dict[str, Any]:
        return ctl.job(job_id)

    @app.post("/launches/{job_id}/stop", tags=["launches"])
    async def stop_launch(job_id: str, force: bool = False) -> dict[str, Any]:
        """SIGINT the launch (its run is marked interrupted); ``force``: SIGKILL."""
        return ctl.stop_job(job_id, force)

    # -- runs -----------------------------------------------------------------------
    @app.get("/runs", tags=["runs"])
    async def runs() -> list[dict[str, Any]]:
        """Every run in the store, newest first."""
        return ctl.runs()

    @app.get("/runs/{run_id}", tags=["runs"])
    async def run(run_id: str) -> dict[str, Any]:
        """One run (id or unique prefix): status, summary, metadata, round progress."""
        return ctl.run(run_id)

    @app.post("/runs/{run_id}/stop", tags=["runs"])
    async def stop_run(run_id: str) -> dict[str, Any]:
        """Stop a running run (SIGINT to its `testbed run` process)."""
        return ctl.stop_run(run_id)

    @app.get("/runs/{run_id}/metrics", tags=["runs"])
    async def metrics(run_id: str, since: Annotated[int, Query(ge=0)] = 0) -> dict[str, Any]:
        """Metric rows after cursor ``since``: id, round, node, name, value, ts."""
        return ctl.metrics_since(run_id, since)

    @app.get("/runs/{run_id}/metrics.csv", tags=["runs"])
    async def metrics_csv(run_id: str) -> Response:
        """All metrics of a run, long format (round, node, name, value, ts)."""
        rid, text = ctl.metrics_csv(run_id)
        return Response(
            text,
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{rid}-metrics.csv"'},
        )

    @app.get("/runs/{run_id}/events", tags=["runs"])
    async def events(run_id: str, since: Annotated[int, Query(ge=0)] = 0) -> dict[str, Any]:
        """Event rows after cursor ``since``: id, ts, kind, round, node, data."""
        return ctl.events_since(run_id, since)

    @app.get("/runs/{run_id}/tagged-metrics", tags=["runs"])
    async def tagged_metrics(run_id: str) -> list[dict[str, Any]]:
        """All metric rows of a run with their tags: round, node, name, value, tags."""
        return ctl.tagged_metrics(run_id)

    @app.get("/runs/{run_id}/artifacts", tags=["runs"])
    async def artifacts(run_id: str) -> list[str]:
        """Files of the run's folder the dashboard may show (PNG plots, results.json, CSV)."""
        return ctl.artifacts(run_id)

    @app.get("/runs/{run_id}/artifacts/{name}", tags=["runs"])
    async def artifact(run_id: str, name: str) -> FileResponse:
        """One of those files."""
        return FileResponse(ctl.artifact_path(run_id, name))

    @app.get("/runs/{run_id}/status", tags=["runs"])
    async def round_status(run_id: str) -> list[dict[str, Any]]:
        """Per (round, node) status: completed | failed | excluded | late, with reason."""
        return ctl.round_status(run_id)

    @app.get("/runs/{run_id}/fleet", tags=["runs"])
    async def fleet(run_id: str) -> dict[str, Any]:
        """Nodes and links of a run, each with its state now (or at the run's end)."""
        return ctl.fleet(run_id)

    @app.get("/runs/{run_id}/spec", tags=["runs"], response_class=PlainTextResponse)
    async def spec(run_id: str) -> str:
        """The resolved spec the run snapshotted."""
        return ctl.spec_text(run_id)

    @app.get("/compare", tags=["runs"])
    async def compare(run: Annotated[list[str], Query(min_length=1)]) -> dict[str, Any]:
        """Runs side by side: rows and the resolved-spec keys whose values differ."""
        return ctl.compare(run)

    # -- faults ---------------------------------------------------------------------
    @app.get("/faults", tags=["faults"])
    async def faults() -> dict[str, Any]:
        """Fault kinds a live injection may use, and their parameters."""
        return ctl.fault_schema()

    @app.post("/runs/{run_id}/inject", tags=["faults"], status_code=201)
    async def inject(run_id: str, body: FaultBody) -> dict[str, Any]:
        """Inject a fault into a running run now; waits up to ``wait_s`` for it to apply."""
        fault = body.model_dump(exclude={"wait_s"})
        out = ctl.inject(run_id, fault)
        deadline = asyncio.get_running_loop().time() + body.wait_s
        status = ctl.injection_status(out["injection_id"])
        while status == "pending" and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
            status = ctl.injection_status(out["injection_id"])
        return {**out, "status": status}

    @app.get("/runs/{run_id}/injections", tags=["faults"])
    async def injections(run_id: str) -> list[dict[str, Any]]:
        """Live injections into a run and whether they were applied."""
        return ctl.injections(run_id)

    return app
