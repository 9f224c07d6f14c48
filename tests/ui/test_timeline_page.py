"""The Timeline page and the Fleet picture of a run with three workloads, in headless
Chromium (Playwright, Debian's browser) against a real controller and Streamlit.

The run is written through ``RunStore`` as the runner writes a run of
``experiments/continuum.yaml``: one connection per workload (its rows tagged ``fl``,
``functions`` or ``semantic_offload``) and the fleet's own (faults, link counters: no
workload)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import requests

from testbed.runner import snapshot
from testbed.spec.loader import load_spec
from testbed.store import RunStore
from tests.ui.conftest import ROOT, Controller
from tests.ui.test_browser_e2e import ARGS, ARTIFACTS, CHROMIUM, dashboard, wait_text

pytestmark = pytest.mark.slow
__all__ = ["dashboard"]  # (the fixture, imported for pytest)


def seed_continuum_run(store: RunStore, run_id: str) -> str:
    """FL rounds, function requests and offload inferences at once; edge-1 (hosting FL
    and functions) down at 6 s."""
    exp = load_spec(ROOT / "experiments" / "continuum.yaml")
    run_dir = store.create_run(
        run_id, exp.name, seed=17, backend="local", spec_path="continuum.yaml", pid=os.getpid()
    )
    snapshot(exp, 17, run_dir, {"run_id": run_id})
    fl, fns, fleet = store.tagged("fl"), store.tagged("functions"), store.tagged(None)
    off = store.tagged("semantic_offload")
    t0 = time.time() - 40
    fl.add_event(run_id, "fleet_ready", ts=t0, superlink_port=1)
    for r in range(1, 6):
        fl.add_event(run_id, "round_end", round=r, ts=t0 + 3 * r)
        fl.add_metric(run_id, "global_acc", 0.2 + 0.1 * r, round=r, ts=t0 + 3 * r)
        fl.add_metric(run_id, "round_duration_s", 3.0 + 9 * (r == 2), round=r, ts=t0 + 3 * r)
    for i in range(30):
        t = t0 + 0.5 * i
        down = 6 <= 0.5 * i < 10
        if down:
            fns.add_metric(run_id, "request_error", 1.0, round=i, node="idle", ts=t)
        else:
            fns.add_metric(run_id, "e2e_ms", 30.0 + i, round=i, node="idle", ts=t)
        fns.add_metric(run_id, "e2e_ms", 80.0 - 50 * (i > 20), round=i, node="matmul", ts=t)
    fns.add_metric(run_id, "on_gpu", 1.0, node="matmul", ts=t0 + 10.5, tags={"site": "cloud"})
    for i in range(20):  # two devices answering from 15 s on
        for dev in ("ue-1", "ue-2"):
            t = t0 + 15 + i
            off.add_metric(run_id, "offload_e2e_ms", 10.0 + i % 3, node=dev, ts=t)
            off.add_metric(run_id, "offload_task_acc", 1.0 - 0.25 * (i % 4 == 0), node=dev, ts=t)
    fleet.add_event(run_id, "fault_injected", node="edge-1", ts=t0 + 6, kind="outage")
    fleet.add_event(run_id, "node_down", node="edge-1", ts=t0 + 6.2, reason="outage for 4 s")
    fleet.add_event(run_id, "node_restarted", node="edge-1", ts=t0 + 10.2, down_s=4.0)
    fleet.add_metric(run_id, "link_bytes_up", 3e6, node="edge-1")
    for s in (fl, fns, off, fleet):
        s.close()
    store.finish_run(run_id, "completed", {"wall_s": 40.0, "final_global_acc": 0.7})
    return run_id


def test_timeline_and_fleet_show_three_workloads(controller: Controller, dashboard: str) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("needs Debian's chromium (apt-get install -y chromium; .ci/run does)")
    from playwright.sync_api import sync_playwright

    store = RunStore(controller.store_root)
    run_id = seed_continuum_run(store, "continuum-a")
    store.close()
    tl = requests.get(f"{controller.url}/runs/{run_id}/timeline", timeout=10).json()
    assert [w["section"] for w in tl["workloads"]] == ["fl", "functions", "semantic_offload"]
    assert tl["hosts"]["edge-1"] == ["fl", "functions"] and tl["hosts"]["edge-2"] == ["fl"]
    assert tl["hosts"]["fog"] == ["fl", "functions", "semantic_offload"]
    assert tl["hosts"]["ue-1"] == ["semantic_offload"]
    assert {m["workload"] for m in tl["metrics"]} == {"fl", "functions", "semantic_offload"}
    down = next(e for e in tl["events"] if e["kind"] == "node_down")
    assert down["workload"] is None and abs(down["t_s"] - 6.2) < 0.01
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_context(viewport={"width": 1400, "height": 1600}).new_page()
        page.set_default_timeout(30_000)
        page.goto(f"{dashboard}/timeline")
        wait_text(page, "workloads: fl (global_acc, round_duration_s), functions", 60)
        wait_text(page, "semantic_offload (offload_e2e_ms, offload_task_acc)", 10)
        wait_text(page, "node_down", 30)
        wait_text(page, "outage for 4 s", 10)
        wait_text(page, "fl + functions", 10)  # edge-1 hosts both
        wait_text(page, "fl + functions + semantic_offload", 10)  # the fog hosts all three
        # one chart per (workload, key metric) with rows, and the swimlanes, all by Vega
        for title in ("fl: global_acc", "fl: round_duration_s", "functions: e2e_ms",
                      "functions: request_error", "functions: on_gpu",
                      "semantic_offload: offload_e2e_ms",
                      "semantic_offload: offload_task_acc"):  # fmt: skip
            wait_text(page, title, 10)
        charts = "[data-testid='stVegaLiteChart']"
        page.wait_for_function(
            f"document.querySelectorAll(\"{charts} canvas, {charts} svg\").length >= 8",
            timeout=30_000,
        )
        assert page.evaluate(f"document.querySelectorAll(\"{charts}\").length") == 8
        page.screenshot(path=ARTIFACTS / "timeline.png", full_page=True)
        page.goto(dashboard)  # the Fleet page is the main page; it picks the newest run
        labels_js = "Array.from(document.querySelectorAll('svg text')).map(t => t.textContent)"
        page.wait_for_function(f"{labels_js}.includes('[fl + functions]')", timeout=30_000)
        labels = page.evaluate(labels_js)
        assert "[fl + functions]" in labels and "[fl]" in labels, labels
        assert "[fl + functions + semantic_offload]" in labels, labels  # the fog
        assert "[semantic_offload]" in labels, labels  # ue-1, ue-2
        page.screenshot(path=ARTIFACTS / "fleet-workloads.png", full_page=True)
        browser.close()
