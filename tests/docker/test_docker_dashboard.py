"""The dashboard on a docker fleet, in headless Chromium (``make test-docker``).

Issue 26: "the Experiments page launches a spec on docker, and the Fleet and Chaos pages
work on a docker fleet". The Experiments page launches tiny.yaml with the Backend
selector set to docker; the Fleet page draws the run's fleet and names its backend; the
Chaos page crashes edge-2's container, and the Fleet page then shows edge-2 not up; the
Live page stops the run. Nothing may be left on the engine or under the store.
(tests/docker/test_docker_controller.py checks the same path through the API alone.)
"""

from __future__ import annotations

from pathlib import Path

import docker
import pytest
import requests

from tests.conftest import processes_under
from tests.docker.conftest import labelled_containers
from tests.ui.conftest import controller, store_root  # noqa: F401 (fixtures)
from tests.ui.test_browser_e2e import (  # noqa: F401 (dashboard: a fixture)
    ARGS,
    ARTIFACTS,
    CHROMIUM,
    crash_from_chaos,
    dashboard,
    launch_from_ui,
    launches,
    newest_run,
    open_page,
    wait_api,
    wait_text,
)


def test_experiments_fleet_and_chaos_pages_on_a_docker_fleet(
    engine: docker.DockerClient,
    controller,  # noqa: ANN001, F811
    dashboard: str,  # noqa: F811
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("needs Debian's chromium (apt-get install -y chromium; .ci/run does)")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    api = controller.url
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.set_default_timeout(30_000)
        # 1. Experiments: tiny.yaml on docker (enough rounds to still run at step 3)
        launch_from_ui(page, dashboard, "tiny.yaml", "workload.fl.rounds=40", backend="docker")
        run = wait_api(lambda: newest_run(api), 60)
        assert requests.get(f"{api}/runs/{run}", timeout=10).json()["backend"] == "docker"
        # 2. Fleet: the run's fleet, on docker, every node up once the fleet is ready
        wait_api(lambda: any(e["kind"] == "fleet_ready" for e in events(api, run)), 180)
        open_page(page, f"{dashboard}/", "on docker", 45)  # (Fleet: the main page)
        wait_text(page, "edge-2", 30)
        page.screenshot(path=ARTIFACTS / "docker-dashboard-1-fleet.png")
        # 3. Chaos: crash edge-2's container
        open_page(page, f"{dashboard}/chaos", "Inject now", 45)
        crash_from_chaos(page, api, "edge-2")
        wait_api(
            lambda: any(
                e["kind"] == "node_down" and e.get("node") == "edge-2" for e in events(api, run)
            ),
            30,
        )
        page.screenshot(path=ARTIFACTS / "docker-dashboard-2-chaos.png")
        # ... and the Fleet page shows it
        open_page(page, f"{dashboard}/", "not up: edge-2", 45)
        page.screenshot(path=ARTIFACTS / "docker-dashboard-3-fleet-crashed.png")
        # 4. Live: stop the run
        page.goto(f"{dashboard}/live")
        wait_text(page, run, 30)
        page.get_by_role("button", name="Stop run").click()
        wait_text(page, "status interrupted", 90)
        browser.close()
    assert requests.get(f"{api}/runs/{run}", timeout=10).json()["status"] == "interrupted"
    wait_api(lambda: all(j["state"] not in ("running", "stopping") for j in launches(api)), 60)
    assert [p.info["cmdline"] for p in processes_under(controller.store_root)] == []
    assert labelled_containers(engine) == []


def events(api: str, run: str) -> list[dict]:
    return requests.get(f"{api}/runs/{run}/events", timeout=10).json()["rows"]  # type: ignore[no-any-return]
