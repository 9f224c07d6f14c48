"""Overhead of the testbed vs bare Flower, in both protocol timings, in ONE run.

Bare: ``flower-superlink`` + N ``flower-supernode`` (Flower's default subprocess
isolation: a cold ``flwr-clientapp`` per message) + ``flwr run``, started directly.
Testbed: ``run_experiment`` on the local backend (warm executor), once with
``workload.fl.protocol_timing: flower`` (Flower's own 3 s polling) and once with
``fast`` (the shim of ``nodes/fl/timing.py``). Same Flower app, same spec
(experiments/quickstart.yaml unless --spec), same seed. Round time is the ServerApp's
own ``round_duration_s`` (the Grid observer's: first train message pushed -> the
round's ``send_and_receive`` returned) in all three.

Prints median round time, wall time, final accuracy, the clients' median training time
per round, and peak RSS and PSS per client node (whole process tree, from
``/proc/<pid>/smaps_rollup``), with ratios to bare Flower.

    python bench/overhead.py [--spec experiments/quickstart.yaml] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tomli_w

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.nodemem import PeakSampler, testbed_nodes, zygotes  # noqa: E402
from nodes.agent import flower_bin, superlink_command, supernode_command  # noqa: E402
from testbed.backends.local import APP_DIR, _env  # noqa: E402
from testbed.planner import make_plan  # noqa: E402
from testbed.procs import ProcGroup, free_port, wait_port  # noqa: E402
from testbed.runner import run_experiment  # noqa: E402
from testbed.spec.loader import load_spec, parse_set  # noqa: E402
from testbed.store import RunStore  # noqa: E402
from testbed.workloads.fl import TelemetryTail  # noqa: E402


def bare_flower(plan: Any, work: Path) -> dict[str, Any]:
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
            config = node.node_config(n)
            config.pop("protocol-timing")  # a testbed setting, not Flower's
            procs.start(
                node.name,
                supernode_command(f"127.0.0.1:{port}", free_port(), config, warm=False),
                work / f"{node.name}.log",
                env=_env(work / node.name),
            )
        run = _flwr_run(procs, plan, spec, port, work)
        names = [node.name for node in plan.clients]
        with PeakSampler(lambda: {k: procs.procs[k].pid for k in names}) as mem:
            while run.poll() is None:
                time.sleep(0.25)
        wall = time.time() - t0
    finally:
        procs.stop_all()
    recs = TelemetryTail(work / "telemetry.jsonl").read()
    return {
        "round_s": [r["value"] for r in recs if r.get("name") == "round_duration_s"],
        "train_s": [r["value"] for r in recs if r.get("name") == "train_duration_s"],
        "wall_s": wall,
        "final_acc": ([r["value"] for r in recs if r.get("name") == "global_acc"] or [None])[-1],
        "rss": mem.rss,
        "pss": mem.pss,
    }


def _flwr_run(procs: ProcGroup, plan: Any, spec: Any, port: int, work: Path) -> Any:
    """Submit the testbed's Flower app with ``flwr run --stream``; return the process."""
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
    (work / "rc.toml").write_text(
        tomli_w.dumps(
            {
                "fl-spec": spec.model_dump_json(),
                "seed": plan.seed,
                "node-names": plan.client_names_json(),
                "telemetry-path": str(work / "telemetry.jsonl"),
                "artifact-dir": "",
            }
        )
    )
    cmd = [flower_bin("flwr"), "run", str(APP_DIR), "bare", "--run-config", str(work / "rc.toml")]
    return procs.start("flwr", [*cmd, "--stream"], work / "flwr.log", env=_env(home))


def testbed_run(exp: Any, work: Path) -> dict[str, Any]:
    """One ``run_experiment`` on the local backend; return measurements."""
    store = RunStore(work / "runs")
    t0 = time.time()
    sampler = PeakSampler(lambda: testbed_nodes(work))
    sampler.shared = lambda: zygotes(work)
    with sampler as mem:
        res = run_experiment(exp, store, spec_path="bench")
    wall = time.time() - t0

    def values(name: str) -> list[float]:
        return [v for _r, _n, _k, v, _t in store.metrics(res.run_id, name)]

    return {
        "round_s": values("round_duration_s"),
        "train_s": values("train_duration_s"),
        "wall_s": wall,
        "final_acc": res.summary.get("final_global_acc"),
        "rss": mem.rss,
        "pss": mem.pss,
        "zygote_pss": mem.shared_pss,
        "status": res.status,
    }


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _pss(col: dict[str, Any]) -> float:
    """Median over nodes of the peak PSS per node, MB."""
    return _median(list(col["pss"].values()))


def _pss_amortized(col: dict[str, Any]) -> float:
    """Median peak PSS per node plus the zygote's PSS shared out over the nodes, MB."""
    return _pss(col) + col.get("zygote_pss", 0.0) / max(1, len(col["pss"]))


def report(names: list[str], cols: dict[str, dict[str, Any]]) -> None:
    """Print the table and the ratios to bare Flower."""

    def row(label: str, fmt: str, get: Any) -> None:
        print(f"{label:30s}" + "".join(f"{get(c):{fmt}}" for c in cols.values()))

    print("\nmeasured on this machine, same run, same app and spec")
    print(f"{'':30s}" + "".join(f"{k:>16s}" for k in cols))
    row("median round time s", "16.2f", lambda c: _median(c["round_s"]))
    row("first round s", "16.2f", lambda c: c["round_s"][0] if c["round_s"] else float("nan"))
    row("median client train s", "16.3f", lambda c: _median(c["train_s"]))
    row("wall time s (fleet+run)", "16.1f", lambda c: c["wall_s"])
    row("final global accuracy", "16.3f", lambda c: c["final_acc"] or float("nan"))
    for name in names:
        row(f"peak RSS MB {name}", "16.0f", lambda c, n=name: c["rss"].get(n, 0))
        row(f"peak PSS MB {name}", "16.0f", lambda c, n=name: c["pss"].get(n, 0))
    row("median peak PSS MB per node", "16.0f", _pss)
    row("zygote PSS MB (shared)", "16.0f", lambda c: c.get("zygote_pss", 0.0))
    row("PSS per node + zygote/N", "16.0f", _pss_amortized)
    bare = cols["bare Flower"]
    for key, col in cols.items():
        if key == "bare Flower":
            continue
        print(
            f"{key}/bare: median round {_median(col['round_s']) / _median(bare['round_s']):.3f}"
            f", wall {col['wall_s'] / bare['wall_s']:.3f}"
            f", PSS per node (+ zygote/N) {_pss_amortized(col) / _pss(bare):.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=str(ROOT / "experiments" / "quickstart.yaml"))
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    sets = [f"workload.fl.rounds={args.rounds}"] if args.rounds else []
    cols: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as d:
        for timing in ("flower", "fast", "bare"):
            mode = "flower" if timing == "bare" else timing
            exp = load_spec(args.spec, parse_set([*sets, f"workload.fl.protocol_timing={mode}"]))
            plan = make_plan(exp)
            print(
                f"{timing}: {len(plan.clients)} nodes, {exp.workload.fl.rounds} rounds", flush=True
            )
            if timing == "bare":
                cols["bare Flower"] = bare_flower(plan, Path(d) / "bare")
            else:
                cols[f"testbed {timing}"] = testbed_run(exp, Path(d) / timing)
    order = ["bare Flower", "testbed flower", "testbed fast"]
    report(list(plan.client_names()), {k: cols[k] for k in order})


if __name__ == "__main__":
    main()
