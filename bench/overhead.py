"""Overhead of the testbed vs bare Flower, measured in the same run.

Bare: ``flower-superlink`` + N ``flower-supernode`` (Flower's default subprocess
isolation: a cold ``flwr-clientapp`` per message) + ``flwr run``, started directly.
Testbed: ``run_experiment`` on the local backend (warm executor). Same Flower app, same
spec (experiments/quickstart.yaml unless --spec), same seed. Round time is the
ServerApp's own ``round_duration_s`` (configure_train -> aggregate_train) in both.

Prints median round time, ratio testbed/bare (goal <= 1.10), wall time, final
accuracy and peak memory per client node (whole process tree).

    python bench/overhead.py [--spec experiments/quickstart.yaml] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import tomli_w

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nodes.agent import flower_bin, superlink_command, supernode_command  # noqa: E402
from testbed.backends.local import APP_DIR, _env  # noqa: E402
from testbed.planner import make_plan  # noqa: E402
from testbed.procs import ProcGroup, free_port, wait_port  # noqa: E402
from testbed.runner import run_experiment  # noqa: E402
from testbed.spec.loader import load_spec, parse_set  # noqa: E402
from testbed.store import RunStore  # noqa: E402
from testbed.workloads.fl import TelemetryTail  # noqa: E402


def bare_flower(plan, work: Path) -> dict:
    """Run the app with Flower's own CLIs and default isolation; return measurements."""
    spec = plan.experiment.workload.fl
    procs = ProcGroup()
    port = free_port()
    t0 = time.time()
    try:
        procs.start(
            "superlink", superlink_command(port), work / "superlink.log", env=_env(work / "sl")
        )
        wait_port(port, 60)
        n = len(plan.clients)
        for node in plan.clients:
            procs.start(
                node.name,
                supernode_command(
                    f"127.0.0.1:{port}", free_port(), node.node_config(n), warm=False
                ),
                work / f"{node.name}.log",
                env=_env(work / node.name),
            )
        home = work / "home"
        home.mkdir()
        (home / "config.toml").write_text(
            tomli_w.dumps(
                {
                    "superlink": {
                        "default": "bare",
                        "bare": {"address": f"127.0.0.1:{port}", "insecure": True},
                    }
                }
            )
        )
        tel = work / "telemetry.jsonl"
        (work / "rc.toml").write_text(
            tomli_w.dumps(
                {
                    "fl-spec": spec.model_dump_json(),
                    "seed": plan.seed,
                    "node-names": json.dumps(plan.client_names()),
                    "telemetry-path": str(tel),
                    "artifact-dir": "",
                }
            )
        )
        run = procs.start(
            "flwr",
            [
                flower_bin("flwr"),
                "run",
                str(APP_DIR),
                "bare",
                "--run-config",
                str(work / "rc.toml"),
                "--stream",
            ],
            work / "flwr.log",
            env=_env(home),
        )
        peak: dict[str, float] = {}
        while run.poll() is None:
            for node in plan.clients:
                peak[node.name] = max(peak.get(node.name, 0), procs.rss_mb(node.name))
            time.sleep(0.25)
        wall = time.time() - t0
    finally:
        procs.stop_all()
    recs = TelemetryTail(tel).read()
    rounds = [r["value"] for r in recs if r.get("name") == "round_duration_s"]
    acc = [r["value"] for r in recs if r.get("name") == "global_acc"]
    return {
        "round_s": rounds,
        "wall_s": wall,
        "final_acc": acc[-1] if acc else None,
        "peak_rss_mb": peak,
    }


def testbed_run(exp, work: Path) -> dict:
    store = RunStore(work / "runs")
    t0 = time.time()
    res = run_experiment(exp, store, spec_path="bench")
    wall = time.time() - t0
    rounds = [v for _r, _n, _k, v, _t in store.metrics(res.run_id, "round_duration_s")]
    peak = {n: v for _r, n, _k, v, _t in store.metrics(res.run_id, "peak_rss_mb")}
    clients = set(make_plan(exp).client_names())
    return {
        "round_s": rounds,
        "wall_s": wall,
        "final_acc": res.summary.get("final_global_acc"),
        "peak_rss_mb": {k: v for k, v in peak.items() if k in clients},
        "status": res.status,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=str(ROOT / "experiments" / "quickstart.yaml"))
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    sets = [f"workload.fl.rounds={args.rounds}"] if args.rounds else []
    exp = load_spec(args.spec, parse_set(sets))
    plan = make_plan(exp)
    with tempfile.TemporaryDirectory() as d:
        print(
            f"bare Flower: {len(plan.clients)} SuperNodes, {exp.workload.fl.rounds} rounds ...",
            flush=True,
        )
        bare = bare_flower(plan, Path(d) / "bare")
        print("testbed run (local backend, warm executor) ...", flush=True)
        tb = testbed_run(exp, Path(d) / "tb")
    mb, mt = statistics.median(bare["round_s"]), statistics.median(tb["round_s"])
    print("\nmeasured on this machine, same run, same app and spec")
    print(f"{'':28s}{'bare Flower':>14s}{'testbed':>14s}")
    print(f"{'median round time s':28s}{mb:14.2f}{mt:14.2f}")
    print(f"{'first round s':28s}{bare['round_s'][0]:14.2f}{tb['round_s'][0]:14.2f}")
    print(f"{'wall time s (fleet+run)':28s}{bare['wall_s']:14.1f}{tb['wall_s']:14.1f}")
    print(f"{'final global accuracy':28s}{bare['final_acc']:14.3f}{tb['final_acc']:14.3f}")
    for name in plan.client_names():
        print(
            f"{'peak RSS MB ' + name:28s}{bare['peak_rss_mb'].get(name, 0):14.0f}"
            f"{tb['peak_rss_mb'].get(name, 0):14.0f}"
        )
    print(f"\nratio median round time testbed/bare = {mt / mb:.3f}  (goal <= 1.10)")
    print(f"ratio wall time testbed/bare = {tb['wall_s'] / bare['wall_s']:.3f}")


if __name__ == "__main__":
    main()
