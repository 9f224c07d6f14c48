"""The controller's HTTP API (FastAPI); the OpenAPI schema is served at ``/docs``.

Every route is a thin wrapper over :class:`testbed.controller.service.Controller`.
Cursors: ``/runs/{id}/metrics?since=N`` and ``/runs/{id}/events?since=N`` return the
rows after row id ``N`` and the new cursor, so a live view fetches only what is new.
With a token, every route but ``/health`` and the docs needs
``Authorization: Bearer <token>`` (compared in constant time). Bodies, spec texts and
identifiers are limited and checked first (:mod:`testbed.controller.guard`): 413 for a
body over the limit, 422 for a malformed id or name, 404 for a file outside the store.
"""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field

from testbed.controller.backends import DEFAULT_BACKEND
from testbed.controller.guard import (
    FILE_NAME_PATTERN,
    MAX_ID_CHARS,
    MAX_OVERRIDES,
    MAX_UPLOAD_CHARS,
    RUN_ID_PATTERN,
    BodyLimit,
    inside,
)
from testbed.controller.service import Controller, UserError

OPEN_PATHS = frozenset({"/health", "/docs", "/docs/oauth2-redirect", "/openapi.json", "/redoc"})
MAX_CURSOR = 2**63 - 1  # SQLite's largest integer

RunId = Annotated[
    str, PathParam(pattern=RUN_ID_PATTERN, max_length=MAX_ID_CHARS, description="run id or prefix")
]
FileName = Annotated[str, PathParam(pattern=FILE_NAME_PATTERN, max_length=MAX_ID_CHARS)]
Cursor = Annotated[int, Query(ge=0, le=MAX_CURSOR)]
SpecText = Annotated[str, Field(max_length=MAX_UPLOAD_CHARS, description="experiment YAML")]
BackendName = Annotated[
    str, Field(max_length=MAX_ID_CHARS, description="a backend of GET /backends")
]
Overrides = Annotated[
    list[Annotated[str, Field(max_length=1000)]],
    Field(default_factory=list, max_length=MAX_OVERRIDES, description="key.path=value"),
]


class ValidateBody(BaseModel):
    """YAML text to validate, with ``key.path=value`` overrides."""

    text: SpecText
    source: str = Field("experiment.yaml", max_length=MAX_ID_CHARS)
    set: Overrides
    backend: BackendName | None = Field(
        None, description="also check it against this backend, as a launch on it does"
    )


class LaunchBody(BaseModel):
    """Launch a file of the experiments folder (``experiment``) or YAML ``text``."""

    experiment: str | None = Field(None, max_length=MAX_ID_CHARS)  # a path in it: 404
    text: SpecText | None = None
    name: str | None = Field(
        None,
        pattern=FILE_NAME_PATTERN,
        max_length=MAX_ID_CHARS,
        description="file name for text (saved under specs/)",
    )
    set: Overrides
    backend: BackendName = Field(
        DEFAULT_BACKEND, description="where it runs (`testbed run --backend`; GET /backends)"
    )


class FleetBody(BaseModel):
    """An experiment's YAML text whose planned fleet is wanted."""

    text: SpecText
    set: Overrides


class FaultBody(BaseModel):
    """A live fault: kind and target, plus the kind's parameters (see ``/faults``)."""

    model_config = {"extra": "allow"}

    kind: str = Field(max_length=MAX_ID_CHARS)
    node: str | None = Field(None, max_length=MAX_ID_CHARS)
    tier: str | None = Field(None, max_length=MAX_ID_CHARS)
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
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(ctl.shutdown)  # stop launched runs, close the store

    app = FastAPI(
        title="continuum-testbed controller",
        summary="Launch, watch, break (inject faults) and compare runs.",
        lifespan=lifespan,
    )
    app.state.controller = ctl

    @app.middleware("http")
    async def require_token(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if token and request.url.path not in OPEN_PATHS:
            given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(given.encode(), token.encode()):  # constant time
                return JSONResponse({"detail": "missing or wrong token"}, status_code=401)
        return await call_next(request)

    app.add_middleware(BodyLimit)  # outermost: before the token is even looked at

    @app.exception_handler(UserError)
    async def user_error(_request: Request, exc: UserError) -> JSONResponse:
        return JSONResponse(
            {"detail": exc.message, "problems": exc.problems}, status_code=exc.status
        )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own handler echoes each rejected input, which fails on NaN/Infinity
        # (not JSON); name the field and the reason only.
        problems = [
            {"loc": [str(part) for part in e.get("loc", ())], "msg": str(e.get("msg", ""))}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": problems}, status_code=422)

    @app.get("/health", tags=["service"])
    async def health() -> dict[str, Any]:
        """Liveness, and where the store and experiments are."""
        return {
            "ok": True,
            "store": str(ctl.store_root),
            "experiments": str(ctl.experiments_dir),
            "token_required": bool(token),
        }

    areas = (experiments_routes, launches_routes, runs_routes, run_records_routes, faults_routes)
    for routes in areas:
        app.include_router(routes(ctl))
    return app


def experiments_routes(ctl: Controller) -> APIRouter:
    """Experiment files, validation and planning."""
    r = APIRouter(tags=["experiments"])

    @r.get("/experiments")
    async def experiments() -> list[dict[str, Any]]:
        """Experiment files offered for launch."""
        return ctl.experiments()

    @r.get("/experiments/{name}", response_class=PlainTextResponse)
    async def experiment_text(name: Annotated[str, PathParam(max_length=MAX_ID_CHARS)]) -> str:
        """The YAML text of an experiment file."""
        return ctl.experiment_text(name)

    @r.post("/validate")
    async def validate(body: ValidateBody) -> dict[str, Any]:
        """Validate YAML: ``ok`` and every problem with its YAML ``path`` and ``line``."""
        return await asyncio.to_thread(
            ctl.validate, body.text, body.source, body.set, body.backend
        )

    @r.post("/plan")
    async def plan(body: FleetBody) -> dict[str, Any]:
        """The planned fleet (nodes, tiers, links) of an experiment, before any run."""
        return ctl.fleet_of_text(body.text, body.set)

    return r


def launches_routes(ctl: Controller) -> APIRouter:
    """Launches: `testbed run` subprocesses started by this controller."""
    r = APIRouter(tags=["launches"])

    @r.get("/backends")
    async def backends() -> list[dict[str, Any]]:
        """Every registered backend: ``name``, ``available`` on this host now and the
        ``reason`` when not (no Docker engine at DOCKER_HOST, no image, no Ray ...),
        ``default``, ``summary``, ``workloads``, ``user_apps``, ``decides_faults``.
        Answers are at most a few seconds old."""
        return await asyncio.to_thread(ctl.backends)

    @r.post("/launches", status_code=201)
    async def launch(body: LaunchBody) -> dict[str, Any]:
        """Launch an experiment (all runs of its sweep) as a `testbed run --backend`
        subprocess; 422 naming ``backend`` when it is unknown or not available here, or
        with the backend's refusal of the experiment (its preflight)."""
        args = (body.experiment, body.text, body.name, body.set, body.backend)
        job = await asyncio.to_thread(ctl.launch, *args)
        return ctl.job(job.job_id)

    @r.get("/launches")
    async def launches() -> list[dict[str, Any]]:
        """Launches of this controller, newest first, with progress over their runs."""
        return ctl.all_jobs()

    @r.get("/launches/{job_id}")
    async def launch_status(job_id: FileName) -> dict[str, Any]:
        return ctl.job(job_id)

    @r.post("/launches/{job_id}/stop")
    async def stop_launch(job_id: FileName, force: bool = False) -> dict[str, Any]:
        """SIGINT the launch (its run is marked interrupted); ``force``: SIGKILL."""
        return ctl.stop_job(job_id, force)

    return r


def runs_routes(ctl: Controller) -> APIRouter:
    """Runs in the store: status, metrics, events, artifacts, fleet, comparison."""
    r = APIRouter(tags=["runs"])

    @r.get("/workloads")
    async def workloads() -> list[dict[str, Any]]:
        """Registered workloads: section, dashboard page, how many runs the store holds."""
        return ctl.workloads()

    @r.get("/runs")
    async def runs() -> list[dict[str, Any]]:
        """Every run in the store, newest first."""
        return ctl.runs()

    @r.get("/runs/{run_id}")
    async def run(run_id: RunId) -> dict[str, Any]:
        """One run (id or unique prefix): status, summary, metadata, round progress."""
        return ctl.run(run_id)

    @r.post("/runs/{run_id}/stop")
    async def stop_run(run_id: RunId) -> dict[str, Any]:
        """Stop a running run (SIGINT to its `testbed run` process)."""
        return ctl.stop_run(run_id)

    @r.get("/runs/{run_id}/status")
    async def round_status(run_id: RunId) -> list[dict[str, Any]]:
        """Per (round, node) status: completed | failed | excluded | late, with reason."""
        return ctl.round_status(run_id)

    @r.get("/runs/{run_id}/fleet")
    async def fleet(run_id: RunId) -> dict[str, Any]:
        """Nodes and links of a run, each with its state now (or at the run's end)."""
        return ctl.fleet(run_id)

    @r.get("/runs/{run_id}/spec", response_class=PlainTextResponse)
    async def spec(run_id: RunId) -> str:
        """The resolved spec the run snapshotted."""
        return ctl.spec_text(run_id)

    @r.get("/compare")
    async def compare(
        run: Annotated[list[str], Query(min_length=1, max_length=MAX_OVERRIDES)],
    ) -> dict[str, Any]:
        """Runs side by side: rows and the resolved-spec keys whose values differ."""
        bad = [r for r in run if not re.fullmatch(RUN_ID_PATTERN, r) or len(r) > MAX_ID_CHARS]
        if bad:
            raise UserError(422, f"run: not run ids {bad[:5]!r} (letters, digits and '-')")
        return ctl.compare(run)

    return r


def faults_routes(ctl: Controller) -> APIRouter:
    """Fault kinds and live injections into running runs."""
    r = APIRouter(tags=["faults"])

    @r.get("/faults")
    async def faults() -> dict[str, Any]:
        """Fault kinds a live injection may use, and their parameters."""
        return ctl.fault_schema()

    @r.post("/runs/{run_id}/inject", status_code=201)
    async def inject(run_id: RunId, body: FaultBody) -> dict[str, Any]:
        """Inject a fault into a running run now; waits up to ``wait_s`` for it to apply."""
        fault = body.model_dump(exclude={"wait_s"})
        out = ctl.inject(run_id, fault)
        deadline = asyncio.get_running_loop().time() + body.wait_s
        status = ctl.injection_status(out["injection_id"])
        while status == "pending" and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
            status = ctl.injection_status(out["injection_id"])
        return {**out, "status": status}

    @r.get("/runs/{run_id}/injections")
    async def injections(run_id: RunId) -> list[dict[str, Any]]:
        """Live injections into a run and whether they were applied."""
        return ctl.injections(run_id)

    return r


def run_records_routes(ctl: Controller) -> APIRouter:
    """What a run recorded: metrics, events and artifact files (cursors for live views)."""
    r = APIRouter(tags=["runs"])

    @r.get("/runs/{run_id}/metrics")
    async def metrics(run_id: RunId, since: Cursor = 0) -> dict[str, Any]:
        """Metric rows after cursor ``since``: id, round, node, name, value, ts."""
        return ctl.metrics_since(run_id, since)

    @r.get("/runs/{run_id}/metrics.csv")
    async def metrics_csv(run_id: RunId) -> Response:
        """All metrics of a run, long format (round, node, name, value, ts)."""
        rid, text = ctl.metrics_csv(run_id)
        return Response(
            text,
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{rid}-metrics.csv"'},
        )

    @r.get("/runs/{run_id}/events")
    async def events(run_id: RunId, since: Cursor = 0) -> dict[str, Any]:
        """Event rows after cursor ``since``: id, ts, kind, round, node, data."""
        return ctl.events_since(run_id, since)

    @r.get("/runs/{run_id}/timeline")
    async def timeline(run_id: RunId) -> dict[str, Any]:
        """Every workload's key metrics and every event on one axis (s after the fleet
        was ready), and the workloads each node hosts."""
        return ctl.timeline(run_id)

    @r.get("/runs/{run_id}/tagged-metrics")
    async def tagged_metrics(run_id: RunId) -> list[dict[str, Any]]:
        """All metric rows of a run with their tags: round, node, name, value, tags."""
        return ctl.tagged_metrics(run_id)

    @r.get("/runs/{run_id}/artifacts")
    async def artifacts(run_id: RunId) -> list[str]:
        """Files of the run's folder the dashboard may show (PNG plots, results.json, CSV)."""
        return ctl.artifacts(run_id)

    @r.get("/runs/{run_id}/artifacts/{name}")
    async def artifact(run_id: RunId, name: FileName) -> FileResponse:
        """One of those files (only inside the run store)."""
        path = ctl.artifact_path(run_id, name)
        if not inside(ctl.store_root, path):
            raise UserError(404, f"run {run_id} has no artifact {name!r}")
        return FileResponse(path)

    return r
