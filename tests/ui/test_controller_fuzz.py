"""Property-based fuzzing of the controller's HTTP API (in process, FastAPI TestClient:
the same app, middlewares included, without sockets): generated run ids, file names,
cursors, JSON bodies and spec uploads give a 2xx or a 4xx naming the problem, never a
5xx or an exception. The experiments folder is empty and every uploaded spec carries an
unknown key, so no input can launch a run."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from testbed.controller.app import create_app
from testbed.store import RunStore
from tests.fuzz import SIZES, fuzz_settings, set_items, spec_texts, values
from tests.ui.conftest import seed_run

SIZE_PARAMS = [pytest.param(s, marks=[pytest.mark.slow] if s == "full" else []) for s in SIZES]
GET_ROUTES = [
    "/runs/{id}",
    "/runs/{id}/metrics?since={n}",
    "/runs/{id}/events?since={n}",
    "/runs/{id}/metrics.csv",
    "/runs/{id}/tagged-metrics",
    "/runs/{id}/artifacts",
    "/runs/{id}/artifacts/{name}",
    "/runs/{id}/status",
    "/runs/{id}/fleet",
    "/runs/{id}/spec",
    "/runs/{id}/injections",
    "/experiments/{name}",
    "/launches/{name}",
    "/compare?run={id}&run={name}",
]
ids = st.one_of(
    st.sampled_from(["quickstart-a", "quickstart-b", "quickstart", "q", "%", "_", "..", "."]),
    st.text(max_size=40),
)
names = st.one_of(
    st.sampled_from(["../testbed.db", "..", "x.png", ".hidden", "a/b", "results.json"]),
    st.text(max_size=30),
)
cursors = st.one_of(st.integers(min_value=-5, max_value=2**70), st.text(max_size=5))


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        store = RunStore(root / "runs")
        seed_run(store, "quickstart-a", seed=42)
        seed_run(store, "quickstart-b", seed=7, crash=None)
        store.close()
        (root / "experiments").mkdir()  # empty: nothing to launch by name
        app = create_app(root / "runs", root / "experiments")
        with TestClient(app, raise_server_exceptions=True) as c:
            yield c


def _check(r) -> None:  # noqa: ANN001
    assert r.status_code < 500, (r.request.method, r.request.url, r.status_code, r.text[:500])
    assert r.status_code != 201, f"a fuzzed request launched something: {r.text[:300]}"
    if r.status_code >= 400:
        assert r.json()["detail"], r.text


@pytest.mark.parametrize("size", SIZE_PARAMS)
def test_urls_ids_and_cursors(client: TestClient, size: str) -> None:
    @fuzz_settings(0.08, size)
    @given(st.sampled_from(GET_ROUTES), ids, names, cursors)
    def check(route: str, run_id: str, name: str, n: object) -> None:
        url = route.format(
            id=quote(run_id, safe=""), name=quote(name, safe=""), n=quote(str(n), safe="")
        )
        _check(client.get(url))

    check()


bodies = st.one_of(
    values,
    st.fixed_dictionaries(
        {},
        optional={
            "text": st.one_of(spec_texts().map(lambda t: t + "\nzz_not_a_key: 1\n"), values),
            "set": st.one_of(set_items(), values),
            "source": st.one_of(st.text(max_size=20), values),
            "experiment": st.one_of(st.text(max_size=20), values),
            "name": st.one_of(st.text(max_size=20), values),
            "kind": st.one_of(st.sampled_from(["crash", "outage", "degrade"]), values),
            "node": st.one_of(st.text(max_size=10), values),
            "wait_s": st.one_of(st.floats(), values),
            "backend": st.one_of(st.sampled_from(["local", "simulation", "nonsense"]), values),
        },
    ),
)


@pytest.mark.parametrize("size", SIZE_PARAMS)
def test_bodies_and_uploads(client: TestClient, size: str) -> None:
    @fuzz_settings(0.12, size)
    @given(st.sampled_from(["/validate", "/plan", "/launches", "/runs/{id}/inject"]), ids, bodies)
    def check(route: str, run_id: str, body: object) -> None:
        url = route.format(id=quote(run_id, safe=""))
        data = json.dumps(body)  # NaN and Infinity included, as Python's json reads them
        r = client.post(url, content=data, headers={"content-type": "application/json"})
        _check(r)
        if route == "/validate" and r.status_code == 200 and not r.json()["ok"]:
            assert all(isinstance(p["path"], str) and "line" in p for p in r.json()["problems"])

    check()


@pytest.mark.parametrize("size", SIZE_PARAMS)
def test_raw_bodies(client: TestClient, size: str) -> None:
    """Bodies that are not JSON at all, with any content type."""

    @fuzz_settings(0.05, size)
    @given(
        st.sampled_from(["/validate", "/plan", "/launches", "/runs/quickstart-a/inject"]),
        st.binary(max_size=200),
        st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded"]),
    )
    def check(route: str, data: bytes, ctype: str) -> None:
        _check(client.post(route, content=data, headers={"content-type": ctype}))

    check()


def test_a_source_that_is_no_file_name_is_a_422(client: TestClient) -> None:
    """Found by the full fuzz run (2026-11-28): a ``source`` with a NUL byte reached the
    file system and answered 500 (``ValueError: embedded null byte``)."""
    for source in ("\x00", "a\x00.yaml", "x" * 300):
        r = client.post("/validate", json={"text": "name: x\n", "source": source})
        assert r.status_code == 422 and "source" in str(r.json()["detail"]), (source, r.text)
