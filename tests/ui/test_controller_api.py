"""The controller's HTTP API over real HTTP (uvicorn on loopback, SQLite in tmp_path)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from testbed.controller.server import check_bind
from testbed.faults import FAULT_KINDS, FaultKind
from tests.conftest import processes_under
from tests.ui.conftest import ROOT, Controller, experiments_dir, serve

QUICKSTART = (ROOT / "experiments" / "quickstart.yaml").read_text()


def test_validate_reports_every_problem_with_path_and_line(controller: Controller) -> None:
    bad = QUICKSTART.replace("rounds: 5", "rounds: 0").replace("name: iid", "name: iidd")
    r = requests.post(f"{controller.url}/validate", json={"text": bad}, timeout=10).json()
    assert r["ok"] is False
    got = {(p["path"], p["line"]) for p in r["problems"]}
    assert ("workload.fl.rounds", 20) in got
    assert ("workload.fl.partitioner.name", 17) in got
    r = requests.post(
        f"{controller.url}/validate",
        json={"text": QUICKSTART, "set": ["workload.fl.rounds=2"]},
        timeout=10,
    ).json()
    assert r["ok"] and r["runs"] == 1 and r["workload"] == "fl"
    sweep = QUICKSTART + "repetitions: 2\nsweep:\n  grid:\n    workload.fl.lr: [0.01, 0.1]\n"
    r = requests.post(f"{controller.url}/validate", json={"text": sweep}, timeout=10).json()
    assert r["configurations"] == 2 and r["runs"] == 4


def test_launch_refuses_invalid_specs_and_unknown_files(controller: Controller) -> None:
    r = requests.post(
        f"{controller.url}/launches",
        json={"text": QUICKSTART.replace("rounds: 5", "rounds: -2"), "name": "bad.yaml"},
        timeout=10,
    )
    assert r.status_code == 422
    assert r.json()["problems"][0]["path"] == "workload.fl.rounds"
    assert r.json()["problems"][0]["line"] == 20
    for name in ("../quickstart.yaml", "nope.yaml"):
        r = requests.post(f"{controller.url}/launches", json={"experiment": name}, timeout=10)
        assert r.status_code == 404
    assert requests.get(f"{controller.url}/launches", timeout=10).json() == []


def test_runs_fleet_compare_csv_and_inject_checks(controller: Controller, seeded: dict) -> None:
    url = controller.url
    runs = requests.get(f"{url}/runs", timeout=10).json()
    assert [r["run_id"] for r in runs] == [seeded["live"], seeded["b"], seeded["a"]]
    fleet = requests.get(f"{url}/runs/{seeded['a']}/fleet", timeout=10).json()
    state = {n["name"]: n["state"] for n in fleet["nodes"]}
    assert state == {"cloud": "up", "edge-1": "up", "edge-2": "down", "edge-3": "up", "fog": "up"}
    link = next(lk for lk in fleet["links"] if lk["node"] == "edge-1")
    assert (link["bandwidth_mbps"], link["latency_ms"], link["bytes_up"]) == (100, 20, 3e6)
    ev = requests.get(f"{url}/runs/{seeded['a']}/events", params={"since": 0}, timeout=10).json()
    later = requests.get(
        f"{url}/runs/{seeded['a']}/events", params={"since": ev["rows"][4]["id"]}, timeout=10
    ).json()
    assert later["rows"] == ev["rows"][5:] and later["cursor"] == ev["cursor"]
    cmp = requests.get(f"{url}/compare", params={"run": [seeded["a"], seeded["b"]]}, timeout=10)
    assert cmp.json()["diff"] == [{"key": "seed", "values": [42, 7]}]
    csv = requests.get(f"{url}/runs/{seeded['a']}/metrics.csv", timeout=10)
    assert csv.headers["content-type"].startswith("text/csv")
    assert csv.text.splitlines()[0] == "round,node,name,value,ts"
    inject = f"{url}/runs/{seeded['live']}/inject"
    r = requests.post(inject, json={"kind": "outage", "node": "edge-1"}, timeout=10)
    assert r.status_code == 422 and "duration_s" in r.text
    r = requests.post(inject, json={"kind": "crash", "node": "edge-9"}, timeout=10)
    assert r.status_code == 422 and "not a client node" in r.text
    r = requests.post(f"{url}/runs/{seeded['a']}/inject", json={"kind": "crash", "node": "fog"})
    assert r.status_code == 409
    r = requests.post(inject, json={"kind": "crash", "node": "fog", "wait_s": 0}, timeout=10)
    assert r.status_code == 201 and r.json()["status"] == "pending"  # no engine runs it here
    assert "crash" in requests.get(f"{url}/faults", timeout=10).json()["kinds"]
    # a kind with a planned, simulated effect only is not offered live, and is refused
    FAULT_KINDS.register("eclipse")(Eclipse)
    try:
        faults = requests.get(f"{url}/faults", timeout=10).json()
        assert "eclipse" in faults["details"] and not faults["details"]["eclipse"]["live"]
        assert "eclipse" not in faults["kinds"]
        r = requests.post(inject, json={"kind": "eclipse", "node": "fog"}, timeout=10)
        assert r.status_code == 422 and "no live action" in r.text, r.text
    finally:
        FAULT_KINDS.unregister("eclipse")


class Eclipse(FaultKind):
    """A kind whose only effect is on the virtual clock (no live ``apply``)."""

    def apply_virtual(self, vf, name, t, rnd) -> None:  # noqa: ANN001
        vf.down(name, t, t + 1.0, rnd=rnd, kind="eclipse", why="eclipse")


def test_docs_and_token(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="token"):
        check_bind("0.0.0.0", None)
    check_bind("127.0.0.1", None)
    check_bind("::1", None)
    cli = subprocess.run(
        [sys.executable, "-m", "testbed", "controller", "--host", "0.0.0.0", "--out", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "TESTBED_TOKEN"} | {"COLUMNS": "200"},
    )
    assert cli.returncode == 2 and "needs a token" in cli.stderr
    ctl = serve(tmp_path / "runs", experiments_dir(tmp_path / "exp"), "0.0.0.0", "s3cret")
    try:
        assert requests.get(f"{ctl.url}/runs", timeout=10).status_code == 401
        bad = {"Authorization": "Bearer nope"}
        assert requests.get(f"{ctl.url}/runs", headers=bad, timeout=10).status_code == 401
        good = {"Authorization": "Bearer s3cret"}
        assert requests.get(f"{ctl.url}/runs", headers=good, timeout=10).json() == []
        docs = requests.get(f"{ctl.url}/docs", timeout=10)
        assert docs.status_code == 200 and "swagger" in docs.text.lower()
        paths = requests.get(f"{ctl.url}/openapi.json", timeout=10).json()["paths"]
        for p in ("/launches", "/runs/{run_id}/inject", "/runs/{run_id}/events", "/validate"):
            assert p in paths
    finally:
        ctl.stop()


def wait_for(fn, timeout_s: float, what: str):  # noqa: ANN001, ANN201
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if out := fn():
            return out
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_launch_watch_and_stop_a_real_run(controller: Controller, tmp_path: Path) -> None:
    """2 clients (20 rounds asked, more than it waits for): launched as a subprocess with
    an override, watched by cursor, stopped by SIGINT once metrics flow: the run is
    interrupted and keeps its rows."""
    url = controller.url
    r = requests.post(
        f"{url}/launches",
        json={"experiment": "tiny.yaml", "set": ["workload.fl.rounds=20"]},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["state"] == "running" and job["total"] == 1

    def first_run() -> str | None:
        runs = requests.get(f"{url}/launches/{job['job_id']}", timeout=10).json()["runs"]
        return runs[0] if runs else None

    run_id = wait_for(first_run, 60, "the run to start")

    def first_metrics() -> dict | None:
        run = requests.get(f"{url}/runs/{run_id}", timeout=10).json()
        if run["status"] != "running":  # say why at once rather than time out
            log = next((controller.store_root / "launches").glob("*.log")).read_text()
            raise AssertionError(f"run ended {run['status']} early:\n{log[-2000:]}")
        page = requests.get(f"{url}/runs/{run_id}/metrics", timeout=10).json()
        return page if page["rows"] else None

    page = wait_for(first_metrics, 150, "the first metrics (round 0 evaluation)")
    assert (0, "global_acc") in {(m["round"], m["name"]) for m in page["rows"]}
    more = requests.get(
        f"{url}/runs/{run_id}/metrics", params={"since": page["cursor"]}, timeout=10
    ).json()
    assert all(m["id"] > page["cursor"] for m in more["rows"])  # only rows after the cursor
    stop = requests.post(f"{url}/runs/{run_id}/stop", timeout=10)
    assert stop.status_code == 200 and stop.json()["job_id"] == job["job_id"]

    def finished() -> dict | None:
        j = requests.get(f"{url}/launches/{job['job_id']}", timeout=10).json()
        return j if j["state"] in ("stopped", "completed", "failed") else None

    assert wait_for(finished, 60, "the launch to end")["state"] == "stopped"
    run = requests.get(f"{url}/runs/{run_id}", timeout=10).json()
    assert run["status"] == "interrupted" and run["rounds_done"] < 20
    log = next((controller.store_root / "launches").glob("*.log")).read_text()
    assert "interrupted" in log
    assert requests.post(f"{url}/runs/{run_id}/stop", timeout=10).status_code == 409
    assert processes_under(controller.store_root) == []


def test_tagged_metrics_workload_kind_and_artifacts(
    controller: Controller, library_runs: dict
) -> None:
    url = controller.url
    kinds = {r["run_id"]: r["workload"] for r in requests.get(f"{url}/runs", timeout=10).json()}
    assert kinds[library_runs["radio"]] == "semantic_mux"
    assert kinds[library_runs["compress"]] == "compress" and kinds[library_runs["a"]] == "fl"
    rows = requests.get(f"{url}/runs/{library_runs['radio']}/tagged-metrics", timeout=10).json()
    latency = next(r for r in rows if r["name"] == "latency_s")
    assert latency["round"] is None and latency["node"] is None
    assert latency["tags"] == {
        "kind": "modelled", "unit": "s", "scheme": "semantic_mux", "num_tasks": 2,
        "snr_db": None, "task": None,
    }  # fmt: skip
    rows = requests.get(f"{url}/runs/{library_runs['compress']}/tagged-metrics", timeout=10)
    speedup = next(r for r in rows.json() if r["name"] == "modelled_speedup_x")
    assert speedup["round"] == 0
    assert speedup["tags"] == {"eps": "0.1", "kind": "modelled", "profile": "riscv-edge-ttd"}
    fl = requests.get(f"{url}/runs/{library_runs['a']}/tagged-metrics", timeout=10).json()
    assert fl and all(r["tags"] == {} for r in fl)  # FL rows carry no tags
    assert requests.get(f"{url}/runs/nope/tagged-metrics", timeout=10).status_code == 404
    names = requests.get(f"{url}/runs/{library_runs['radio']}/artifacts", timeout=10).json()
    assert "accuracy_vs_k.png" in names and "results.json" in names
    png = requests.get(
        f"{url}/runs/{library_runs['radio']}/artifacts/accuracy_vs_k.png", timeout=10
    )
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content.startswith(b"\x89PNG")
    for name in ("meta.json%2F..%2F..%2Ftestbed.db", "..%2Ftestbed.db", "missing.png"):
        r = requests.get(f"{url}/runs/{library_runs['radio']}/artifacts/{name}", timeout=10)
        assert r.status_code == 404


def test_fleet_of_a_run_whose_spec_appears_after_the_first_request(controller: Controller) -> None:
    """A starting run has no resolved spec yet; once it is written, its fleet is served
    (a miss must not be remembered: the dashboard asks while runs start)."""
    from testbed.runner import snapshot
    from testbed.spec.loader import load_spec
    from testbed.store import RunStore

    store = RunStore(controller.store_root)
    run_dir = store.create_run("starting-1", "quickstart", seed=1, backend="local")
    url = f"{controller.url}/runs/starting-1/fleet"
    r = requests.get(url, timeout=10)
    assert r.status_code == 404 and "spec.resolved.yaml" in r.text
    snapshot(load_spec(ROOT / "experiments" / "quickstart.yaml"), 1, run_dir, {})
    r = requests.get(url, timeout=10)
    assert r.status_code == 200, r.text
    assert {n["name"] for n in r.json()["nodes"]} >= {"edge-1", "edge-2", "edge-3", "fog"}
    store.close()


def test_the_dashboard_starts_without_a_warning(tmp_path: Path) -> None:
    """`testbed up` prints its two addresses and no warning (issue 31: Streamlit warned
    that websockets 17 with this uvicorn can abort its stream handshake)."""
    import signal

    from testbed.procs import free_port, wait_port

    api, ui = free_port(), free_port()
    cmd = [sys.executable, "-m", "testbed", "up", "--out", str(tmp_path / "runs"),
           "--port", str(api), "--ui-port", str(ui)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        wait_port(ui, 90)
        time.sleep(2.0)  # (Streamlit logs its start-up checks as it begins serving)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert f"dashboard  http://127.0.0.1:{ui}" in out, out
    noise = [line for line in out.splitlines() if "arn" in line or "Upgrade" in line]
    assert noise == [], out


# -- backends: which this host offers, and launches on them ---------------------------------
NO_ENGINE = "no Docker engine reachable"
SIM_REFUSES = QUICKSTART + "faults:\n  - {kind: superlink-restart, at_round: 2}\n"


def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Point the Docker SDK at a socket nothing listens on; return where."""
    host = f"unix://{tmp_path}/no-engine.sock"
    monkeypatch.setenv("DOCKER_HOST", host)
    return host


def test_backends_say_which_this_host_offers_and_why_not(
    controller: Controller, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from testbed.backends import BACKENDS
    from testbed.backends import docker as docker_backend

    host = no_engine(monkeypatch, tmp_path)
    # the controller's answers are kept an hour here: the second ask below must be
    # answered from them however slowly this host gets there (AVAILABILITY_TTL_S is 5 s)
    offer = controller.server.config.app.state.controller.offer
    monkeypatch.setattr(offer, "ttl_s", 3600.0)
    timeouts: list[int] = []  # the engine pings' timeouts (a spy on connect)
    connect = docker_backend.connect

    def spy(timeout_s: int = 60) -> object:
        timeouts.append(timeout_s)
        return connect(timeout_s)

    monkeypatch.setattr(docker_backend, "connect", spy)
    rows = requests.get(f"{controller.url}/backends", timeout=120).json()
    # one ping, with a short timeout (not the SDK's 60 s)
    assert timeouts == [docker_backend.PING_TIMEOUT_S] and docker_backend.PING_TIMEOUT_S < 60
    by_name = {b["name"]: b for b in rows}
    assert sorted(by_name) == BACKENDS.names()
    local = by_name["local"]
    assert (local["available"], local["reason"], local["default"]) == (True, None, True)
    docker = by_name["docker"]
    assert docker["available"] is False and not docker["default"]
    assert NO_ENGINE in docker["reason"] and host in docker["reason"]
    has_ray = importlib.util.find_spec("ray") is not None
    assert by_name["simulation"]["available"] is has_ray
    assert by_name["simulation"]["workloads"] == ["fl"] and local["workloads"] is None
    # asked again within the time to live: answered from what the controller knows (no ping)
    pings = []
    ping = BACKENDS["docker"].unavailable
    monkeypatch.setattr(BACKENDS["docker"], "unavailable", lambda: pings.append(1) or ping())
    assert requests.get(f"{controller.url}/backends", timeout=30).json() == rows
    assert pings == []


def test_the_controller_imports_no_backend_package(tmp_path: Path) -> None:
    """Docker's SDK and Ray are imported when /backends is first asked, not before."""
    code = (
        "import sys; from testbed.controller.app import create_app; "
        f"create_app({str(tmp_path / 'runs')!r}, {str(tmp_path)!r}); "
        "print([m for m in ('docker', 'ray') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


def test_launch_refuses_unknown_unavailable_and_refusing_backends(
    controller: Controller, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    no_engine(monkeypatch, tmp_path)
    url = f"{controller.url}/launches"
    r = requests.post(url, json={"experiment": "tiny.yaml", "backend": "docker"}, timeout=30)
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("backend: docker is not available")
    assert NO_ENGINE in r.json()["detail"]
    assert [p["path"] for p in r.json()["problems"]] == ["backend"]
    r = requests.post(url, json={"experiment": "tiny.yaml", "backend": "nonsense"}, timeout=30)
    assert r.status_code == 422, r.text
    assert "unknown backend 'nonsense'" in r.json()["detail"] and "local" in r.json()["detail"]
    assert [p["path"] for p in r.json()["problems"]] == ["backend"]
    if importlib.util.find_spec("ray") is not None:  # (else: unavailable, as docker above)
        body = {"text": SIM_REFUSES, "name": "sim.yaml", "backend": "simulation"}
        r = requests.post(url, json=body, timeout=30)
        assert r.status_code == 422, r.text
        assert "cannot be simulated by --backend simulation" in r.json()["detail"]
        assert [p["path"] for p in r.json()["problems"]] == ["faults[0].kind"]
        check = {"text": SIM_REFUSES, "backend": "simulation"}
        r = requests.post(f"{controller.url}/validate", json=check, timeout=30).json()
        assert r["ok"] is False and r["problems"][0]["path"] == "faults[0].kind"
    # the same spec is fine where superlink-restart is (the preflight is the backend's)
    check = {"text": SIM_REFUSES, "backend": "local"}
    assert requests.post(f"{controller.url}/validate", json=check, timeout=30).json()["ok"]
    assert requests.get(url, timeout=10).json() == []  # nothing was launched
    assert not (controller.store_root / "specs").exists()  # nor saved


@pytest.mark.slow
def test_a_launch_runs_and_records_on_the_backend_chosen(controller: Controller) -> None:
    """Launched on the simulation (Ray): `testbed run --backend simulation`, whose run the
    store records as a simulation run, by the launch's own pid; stopped as soon as it is
    recorded. (Judged on the store's record, not on the OS's view of the process: CI once
    read a command line without ``--backend`` there, which no record explains.)"""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("needs Ray (the simulation backend)")
    url = controller.url
    body = {"experiment": "tiny.yaml", "backend": "simulation"}
    r = requests.post(f"{url}/launches", json=body, timeout=30)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["backend"] == "simulation"

    def recorded() -> dict | None:
        j = requests.get(f"{url}/launches/{job['job_id']}", timeout=10).json()
        if j["state"] != "running":
            log = next((controller.store_root / "launches").glob("*.log")).read_text()
            raise AssertionError(f"launch ended {j['state']} early:\n{log[-2000:]}")
        return requests.get(f"{url}/runs/{j['runs'][0]}", timeout=10).json() if j["runs"] else None

    def ended() -> bool:
        j = requests.get(f"{url}/launches/{job['job_id']}", timeout=10).json()
        return j["state"] not in ("running", "stopping")

    try:
        run = wait_for(recorded, 120, "the run to be recorded")
        assert run["backend"] == "simulation"  # a run of this launch's pid (GET /launches)
    finally:
        requests.post(f"{url}/launches/{job['job_id']}/stop", timeout=10)
        wait_for(ended, 90, "the launch to stop")
    assert processes_under(controller.store_root) == []
