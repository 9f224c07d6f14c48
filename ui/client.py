"""The dashboard's only way to data: HTTP calls to the controller API.

The controller's address comes from ``TESTBED_CONTROLLER_URL`` (default
``http://127.0.0.1:8000``) and its token, if any, from ``TESTBED_TOKEN``. Reads are
cached with short ttls (``st.cache_data``); live feeds (metrics and events of a run)
fetch only the rows after the last cursor and keep what they have in session state.
Nothing here imports the testbed: the dashboard and the controller meet over HTTP.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd
import requests
import streamlit as st

DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT_S = 15.0


class ControllerError(Exception):
    """The controller refused a request (or could not be reached: ``status`` 0).

    Attributes
    ----------
    status : int
        HTTP status (0 when the controller was unreachable).
    message : str
        What went wrong, in the controller's words.
    problems : list of dict
        Validation problems (``path``, ``line``, ``message``) where there are some.
    """

    def __init__(self, status: int, message: str, problems: list[dict] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.problems = status, message, problems or []


def base_url() -> str:
    """The controller's base URL."""
    return os.environ.get("TESTBED_CONTROLLER_URL", DEFAULT_URL).rstrip("/")


def _request(method: str, path: str, **kwargs: Any) -> requests.Response:
    token = os.environ.get("TESTBED_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        r = requests.request(
            method, base_url() + path, headers=headers, timeout=TIMEOUT_S, **kwargs
        )
    except requests.RequestException as e:
        raise ControllerError(0, f"controller not reachable at {base_url()}: {e}") from None
    if r.status_code >= 400:
        try:
            body = r.json()
        except ValueError:
            body = {"detail": r.text}
        detail = body.get("detail")
        raise ControllerError(
            r.status_code, detail if isinstance(detail, str) else str(detail), body.get("problems")
        )
    return r


def _get(path: str, **params: Any) -> Any:
    return _request("GET", path, params=params or None).json()


def _post(path: str, body: dict[str, Any] | None = None, **params: Any) -> Any:
    return _request("POST", path, json=body or {}, params=params or None).json()


# -- service and experiments -------------------------------------------------------------
@st.cache_data(ttl=5, show_spinner=False)
def health() -> dict[str, Any]:
    """Controller liveness and where its store and experiments are."""
    return _get("/health")


@st.cache_data(ttl=10, show_spinner=False)
def experiments() -> list[dict[str, Any]]:
    """Experiment files the controller offers: ``name``, ``title``."""
    return _get("/experiments")


@st.cache_data(ttl=10, show_spinner=False)
def experiment_text(name: str) -> str:
    """YAML text of an experiment file."""
    return _request("GET", f"/experiments/{name}").text


@st.cache_data(ttl=5, show_spinner=False)
def backends() -> list[dict[str, Any]]:
    """Backends a launch may use: ``name``, ``available`` here now, ``reason`` if not,
    ``default``, ``summary``."""
    return _get("/backends")


@st.cache_data(ttl=60, show_spinner=False)
def validate(
    text: str, source: str, overrides: tuple[str, ...], backend: str | None = None
) -> dict[str, Any]:
    """Validation of YAML text: ``ok``, ``problems`` (path, line, message), run count;
    with ``backend``, also what that backend's preflight refuses (as a launch on it)."""
    body = {"text": text, "source": source, "set": list(overrides), "backend": backend}
    return _post("/validate", body)


@st.cache_data(ttl=60, show_spinner=False)
def planned_fleet(text: str, overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fleet an experiment would start (all nodes ``planned``)."""
    return _post("/plan", {"text": text, "set": list(overrides)})


@st.cache_data(ttl=300, show_spinner=False)
def fault_schema() -> dict[str, Any]:
    """Fault kinds a live injection may use and their parameters."""
    return _get("/faults")


# -- launches ------------------------------------------------------------------------------
def launch(
    overrides: tuple[str, ...],
    experiment: str | None = None,
    text: str | None = None,
    name: str | None = None,
    backend: str = "local",
) -> dict[str, Any]:
    """Launch an experiment file by name, or YAML text, on ``backend``; returns the
    launch."""
    body = {
        "experiment": experiment,
        "text": text,
        "name": name,
        "set": list(overrides),
        "backend": backend,
    }
    out = _post("/launches", body)
    launches.clear()
    runs.clear()
    return out


@st.cache_data(ttl=1, show_spinner=False)
def launches() -> list[dict[str, Any]]:
    """Launches of the controller, newest first, with progress over their runs."""
    return _get("/launches")


def stop_launch(job_id: str) -> dict[str, Any]:
    """Stop a launch (SIGINT: its current run is marked interrupted)."""
    out = _post(f"/launches/{job_id}/stop")
    launches.clear()
    return out


# -- runs ----------------------------------------------------------------------------------
@st.cache_data(ttl=2, show_spinner=False)
def workload_pages() -> list[dict[str, str]]:
    """The dashboard pages of the workloads the store holds runs of (``st.Page`` args)."""
    return [w["page"] for w in _get("/workloads") if w["page"] and w["runs"]]


@st.cache_data(ttl=2, show_spinner=False)
def runs() -> list[dict[str, Any]]:
    """Every run in the store, newest first."""
    return _get("/runs")


@st.cache_data(ttl=1, show_spinner=False)
def run(run_id: str) -> dict[str, Any]:
    """One run: status, summary, metadata, rounds done / total."""
    return _get(f"/runs/{run_id}")


def stop_run(run_id: str) -> dict[str, Any]:
    """Stop a running run."""
    out = _post(f"/runs/{run_id}/stop")
    run.clear()
    runs.clear()
    return out


@st.cache_data(ttl=1, show_spinner=False)
def fleet(run_id: str) -> dict[str, Any]:
    """Nodes and links of a run with their state now."""
    return _get(f"/runs/{run_id}/fleet")


@st.cache_data(ttl=2, show_spinner=False)
def round_status(run_id: str) -> pd.DataFrame:
    """A run's status per (round, node): round, node, status (``completed``, ``failed``,
    ``late``, ``excluded``), reason."""
    return pd.DataFrame(
        _get(f"/runs/{run_id}/status"), columns=["round", "node", "status", "reason"]
    )


@st.cache_data(ttl=300, show_spinner=False)
def resolved_spec(run_id: str) -> str:
    """The resolved spec a run snapshotted."""
    return _request("GET", f"/runs/{run_id}/spec").text


@st.cache_data(ttl=5, show_spinner=False)
def metrics(run_id: str) -> pd.DataFrame:
    """All metrics of a run (long format: id, round, node, name, value, ts)."""
    rows = _get(f"/runs/{run_id}/metrics", since=0)["rows"]
    return pd.DataFrame(rows, columns=["id", "round", "node", "name", "value", "ts"])


@st.cache_data(ttl=5, show_spinner=False)
def metrics_csv(run_id: str) -> bytes:
    """The run's metrics as CSV, as the controller exports them."""
    return _request("GET", f"/runs/{run_id}/metrics.csv").content


@st.cache_data(ttl=5, show_spinner=False)
def compare(run_ids: tuple[str, ...]) -> dict[str, Any]:
    """Runs side by side and the resolved-spec keys that differ."""
    return _get("/compare", run=list(run_ids))


TAG_COLUMNS = ("kind", "unit", "scheme", "num_tasks", "snr_db", "task", "eps", "profile")


@st.cache_data(ttl=5, show_spinner=False)
def tagged_metrics(run_id: str) -> pd.DataFrame:
    """A run's metrics with their tags as columns (round, node, name, value, kind, unit,
    scheme, num_tasks, snr_db, task, eps, profile; missing tags are empty)."""
    rows = [
        {**{k: r[k] for k in ("round", "node", "name", "value")}, **(r["tags"] or {})}
        for r in _get(f"/runs/{run_id}/tagged-metrics")
    ]
    df = pd.DataFrame(rows)
    for col in ("round", "node", "name", "value", *TAG_COLUMNS):
        if col not in df.columns:
            df[col] = None
    for col in ("num_tasks", "snr_db", "eps"):  # compression tags arrive as strings
        df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


@st.cache_data(ttl=2, show_spinner=False)
def timeline(run_id: str) -> dict[str, Any]:
    """A run's timeline: its workloads (with their key metrics), the workloads each
    node hosts, key-metric rows and events, times in s after the fleet was ready."""
    return _get(f"/runs/{run_id}/timeline")


@st.cache_data(ttl=10, show_spinner=False)
def artifacts(run_id: str) -> list[str]:
    """Files in the run's folder the controller serves (PNG plots, results.json, CSV)."""
    return _get(f"/runs/{run_id}/artifacts")


@st.cache_data(ttl=60, show_spinner=False)
def artifact(run_id: str, name: str) -> bytes:
    """One of the run's files, as bytes."""
    return _request("GET", f"/runs/{run_id}/artifacts/{name}").content


def _feed(run_id: str, what: str) -> list[dict[str, Any]]:
    feeds = st.session_state.setdefault("feeds", {})
    feed = feeds.setdefault((run_id, what), {"rows": [], "cursor": 0})
    new = _get(f"/runs/{run_id}/{what}", since=feed["cursor"])
    feed["rows"].extend(new["rows"])
    feed["cursor"] = new["cursor"]
    return feed["rows"]


def live_metrics(run_id: str) -> pd.DataFrame:
    """Metrics of a run so far; each call fetches only the rows after the last one."""
    return pd.DataFrame(
        _feed(run_id, "metrics"), columns=["id", "round", "node", "name", "value", "ts"]
    )


def live_events(run_id: str) -> pd.DataFrame:
    """Events of a run so far; each call fetches only the rows after the last one."""
    return pd.DataFrame(
        _feed(run_id, "events"), columns=["id", "ts", "kind", "round", "node", "data"]
    )


# -- faults --------------------------------------------------------------------------------
def inject(run_id: str, fault: dict[str, Any], wait_s: float = 5.0) -> dict[str, Any]:
    """Inject a fault into a running run now; returns its id and status."""
    out = _post(f"/runs/{run_id}/inject", {**fault, "wait_s": wait_s})
    injections.clear()
    fleet.clear()
    return out


@st.cache_data(ttl=1, show_spinner=False)
def injections(run_id: str) -> list[dict[str, Any]]:
    """Live injections into a run and their status."""
    return _get(f"/runs/{run_id}/injections")
