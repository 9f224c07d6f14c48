"""The Fleet page of a 200-node run and of a million-client simulation run in headless
Chromium (Playwright, Debian's browser) against a real controller and Streamlit: a box
per tier/profile group with counts, not a box per node; the nodes sampled per round;
only the failed or faulted nodes listed, in an expander."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from testbed.store import RunStore
from tests.simulation.test_lazy_scale import MILLION
from tests.ui.conftest import Controller
from tests.ui.test_browser_e2e import ARGS, ARTIFACTS, CHROMIUM, dashboard, wait_text
from tests.ui.test_fleet_groups import FLEET_200, seed_run

pytestmark = pytest.mark.slow
__all__ = ["dashboard"]  # (the fixture, imported for pytest)

BOXES_JS = "document.querySelectorAll('[data-testid=stGraphVizChart] svg g.node').length"
TEXTS_JS = "Array.from(document.querySelectorAll('svg text')).map(t => t.textContent)"


def test_fleet_page_groups_200_nodes_and_a_million(controller: Controller, dashboard: str) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("needs Debian's chromium (apt-get install -y chromium; .ci/run does)")
    from playwright.sync_api import sync_playwright

    store = RunStore(controller.store_root)
    small = seed_run(store, "fleet200-a", FLEET_200)
    million = seed_run(store, "m1-a", MILLION.replace("phone", "edge"), backend="simulation")
    store.close()
    view = requests.get(f"{controller.url}/runs/{million}/fleet", timeout=60)
    assert len(view.content) < 20_000, len(view.content)  # groups, not a million nodes
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_context(viewport={"width": 1400, "height": 1600}).new_page()
        page.set_default_timeout(30_000)
        page.goto(dashboard)  # the Fleet page, with the newest run: the million
        wait_text(page, "1,000,004 nodes in 5 groups by tier/profile", 60)
        page.wait_for_function(f"{BOXES_JS} > 0", timeout=30_000)
        assert page.evaluate(BOXES_JS) == 5  # the server, fog/rpi5, three edge profiles
        labels = page.evaluate(TEXTS_JS)
        assert "edge/rpi5" in labels and not any(t.startswith("edge-") for t in labels)
        wait_text(page, "Sampled nodes per round", 10)
        wait_text(page, "Nodes that failed or were faulted: 2", 10)
        page.screenshot(path=ARTIFACTS / "fleet-million.png", full_page=True)

        page.locator("[data-testid=stSelectbox]").first.click()  # the run picker
        page.get_by_role("option", name=f"{small}", exact=False).first.click()
        wait_text(page, "200 nodes in 4 groups by tier/profile", 30)
        page.wait_for_function(f"{BOXES_JS} == 4", timeout=30_000)
        labels = page.evaluate(TEXTS_JS)
        assert "49 nodes" in labels and "49 up" in labels, labels
        assert any(t.endswith("· 1 down") for t in labels), labels  # edge-7, in its group
        wait_text(page, "not up: 1 down", 10)
        page.get_by_text("Nodes that failed or were faulted: 2").click()
        page.wait_for_function(
            "document.querySelectorAll('[data-testid=stExpander] [data-testid=stDataFrame]')"
            ".length >= 1",
            timeout=30_000,
        )
        page.screenshot(path=ARTIFACTS / "fleet-200.png", full_page=True)
        browser.close()
