"""DiLoCo vs FedAvg: communication per unit of accuracy under the testbed's links.

Runs experiments/diloco.yaml (4 non-IID silos behind 20-100 Mbit/s links, an outage of
one silo mid-training) for each (strategy, local_epochs, seed) through the runner, and
prints per run: global accuracy per round (measured on the server's test set), the
bytes that crossed the silos' links up (measured by the shaping proxies), the round and
the uplink MB at which the global accuracy first reaches ``--target`` (an ESTIMATE: the
run's measured uplink bytes x round / rounds; the link counters are read once at the
end, and a round without the silo that was down sent less).

    python bench/diloco.py --seeds 1 2 --json runs/diloco.json
    python bench/diloco.py --report --json runs/diloco.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.runner import run_experiment  # noqa: E402
from testbed.spec.loader import load_spec  # noqa: E402
from testbed.store import RunStore  # noqa: E402

CONFIGS = [("fedavg", 1), ("fedavg", 4), ("diloco", 4)]


def one(strategy: str, epochs: int, seed: int) -> dict[str, Any]:
    sets = [("workload.fl.strategy.name", strategy), ("workload.fl.local_epochs", epochs),
            ("seed", seed)]  # fmt: skip
    exp = load_spec(ROOT / "experiments" / "diloco.yaml", sets)
    exp = exp.model_copy(update={"sweep": exp.sweep.model_copy(update={"grid": {}})})
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp) / "runs")
        res = run_experiment(exp, store)
        rows = store.metrics(res.run_id)
    acc = {m.round: m.value for m in rows if m.name == "global_acc" and m.round is not None}
    up = sum(m.value or 0.0 for m in rows if m.name == "link_bytes_up")
    return {"strategy": strategy, "local_epochs": epochs, "seed": seed, "status": res.status,
            "global_acc": {str(r): v for r, v in sorted(acc.items())},
            "bytes_up": up, "rounds": exp.workload.fl.rounds if exp.workload.fl else 0,
            "load_1min": os.getloadavg()[0]}  # fmt: skip


def reach(r: dict[str, Any], target: float) -> tuple[int | None, float | None]:
    """First round whose global accuracy >= target, and the uplink MB by then (bytes
    spread evenly over the rounds: every round sends the same model)."""
    for rnd, acc in sorted((int(k), v) for k, v in r["global_acc"].items()):
        if acc is not None and acc >= target:
            return rnd, r["bytes_up"] * rnd / r["rounds"] / 1e6
    return None, None


def ms(vals: list[float]) -> str:
    if not vals:
        return "not reached"
    if len(vals) == 1:
        return f"{vals[0]:.2f}"
    return f"{statistics.mean(vals):.2f} +- {statistics.stdev(vals):.2f}"


def report(results: list[dict[str, Any]], target: float) -> str:
    lines = [f"| strategy | local epochs | seeds | final global acc | rounds to {target} | "
             f"uplink MB to {target} (estimate) | uplink MB total (measured) | "
             "acc per round (first seed) |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for strat, ep in CONFIGS:
        rs = [r for r in results if (r["strategy"], r["local_epochs"]) == (strat, ep)]
        if not rs:
            continue
        finals = [r["global_acc"].get(str(r["rounds"])) for r in rs]
        hits = [reach(r, target) for r in rs]
        rounds = [float(h[0]) for h in hits if h[0] is not None]
        mb = [h[1] for h in hits if h[1] is not None]
        curve = ", ".join(f"{v:.2f}" for _k, v in sorted(
            ((int(k), v) for k, v in rs[0]["global_acc"].items())))  # fmt: skip
        lines.append(
            f"| {strat} | {ep} | {sorted(r['seed'] for r in rs)} | "
            f"{ms([f for f in finals if f is not None])} | {ms(rounds)} "
            f"({len(rounds)}/{len(rs)} reached) | {ms(mb)} | "
            f"{ms([r['bytes_up'] / 1e6 for r in rs])} | {curve} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--configs", nargs="+", default=[f"{s}:{e}" for s, e in CONFIGS])
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--json", type=Path, default=Path("runs/diloco.json"))
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args()
    results = json.loads(args.json.read_text()) if args.json.exists() else []
    if args.report:
        print(report(results, args.target))
        return 0
    for seed in args.seeds:
        for cfg in args.configs:
            strat, ep = cfg.split(":")
            r = one(strat, int(ep), seed)
            print(json.dumps({k: r[k] for k in ("strategy", "local_epochs", "seed", "status",
                  "bytes_up", "load_1min")}), flush=True)  # fmt: skip
            results.append(r)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
