"""Hyperion vs GPipe vs HEFT on the same fleet and load (experiments/hyperion.yaml).

Each (policy, rate, seed) is one ``testbed run`` of the experiment through the runner
(real stage servers behind shaping proxies on this host). Results go to a JSON file
(appended, so a sweep can be split over several invocations) and ``--report`` prints
the markdown table of docs/results/hyperion.md: per policy and load, short and long
requests' p50/p95 end-to-end latency (measured), throughput, failed attempts, mean node
utilisation, and the partition's *modelled* one-request latency.

    python bench/hyperion.py --rates 1 2 --seeds 1 2 --json runs/hyperion.json
    python bench/hyperion.py --faults --rates 2 --json runs/hyperion.json
    python bench/hyperion.py --report --json runs/hyperion.json

``--label`` tags a pass (e.g. two passes at one rate under different host loads) and
``--report --label`` prints that pass alone. ``--time-dilation`` overrides the
experiment's ``time_dilation`` (``auto`` or a factor; 1: the fast profiles at this
host's speed); each result records the run's TDF and the report has a row per TDF.
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
from testbed.stats import fmt_mean_std  # noqa: E402
from testbed.store import RunStore  # noqa: E402

POLICIES = ("hyperion", "gpipe", "heft")
FAULTS = [  # a stage node crash mid-run, then a degraded fog-cloud link
    {"kind": "crash", "node": "fog-b", "at_time_s": 10},
    {"kind": "degrade", "node": "cloud", "at_time_s": 15, "bandwidth_mbps": 10,
     "latency_ms": 60},
]  # fmt: skip


def one(
    policy: str, rate: float, seed: int, faults: bool, duration: float, tdf: str | None = None
) -> dict[str, Any]:
    sets: list[tuple[str, Any]] = [
        ("workload.llm_pipeline.policy", policy),
        ("workload.llm_pipeline.arrivals.rate_rps", rate),
        ("workload.llm_pipeline.duration_s", duration),
        ("seed", seed),
    ]
    if tdf is not None:
        sets.append(("time_dilation", tdf))
    exp = load_spec(ROOT / "experiments" / "hyperion.yaml", sets)
    exp = exp.model_copy(update={"sweep": exp.sweep.model_copy(update={"grid": {}})})
    if faults:
        from testbed.spec.models import FaultSpec

        exp = exp.model_copy(update={"faults": [FaultSpec.model_validate(f) for f in FAULTS]})
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp) / "runs")
        res = run_experiment(exp, store)
        rows = store.tagged_metrics(res.run_id)
        run_tdf = store.time_dilation(res.run_id)
        events = [json.loads(e.data or "{}") for e in store.events(res.run_id)
                  if e.kind == "llm_partition"]  # fmt: skip
        batches = [json.loads(e.data or "{}") for e in store.events(res.run_id)
                   if e.kind == "llm_gpipe_batches"]  # fmt: skip
    util = [r.value or 0.0 for r in rows if r.name == "llm_utilisation"]
    out = {"policy": policy, "rate_rps": rate, "seed": seed, "faults": faults, "tdf": run_tdf,
           "status": res.status, **res.summary,
           "mean_utilisation": statistics.mean(util) if util else None,
           "cuts": [e["cut"] for e in events],
           "routes": [e["route"] for e in events],
           "modelled_latency_ms": [e["modelled_latency_ms"] for e in events],
           "host_model_ms": sum(events[0]["host_unit_ms"]) if events else None,
           "gpipe_batches": batches[0] if batches else None,
           "load_1min": os.getloadavg()[0]}  # fmt: skip
    return out


def fmt(x: Any, nd: int = 0) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def cell(rs: list[dict[str, Any]], key: str, nd: int = 0) -> str:
    """mean +- std over seeds (n/a where not run)."""
    vals = [r[key] for r in rs if r.get(key) is not None]
    return fmt_mean_std(vals, nd, sep=" +- ", empty="n/a")


def tdf_of(r: dict[str, Any]) -> float:
    """A result's time-dilation factor (results stored before TDF existed: 1)."""
    return float(r.get("tdf") or 1.0)


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        "| faults | TDF | rate rps | policy | seeds | short p50 ms | short p95 ms | long p50 ms | "
        "long p95 ms | throughput rps | failed attempts | mean util | modelled latency ms "
        "(per replica) | routes (seed of the first run) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r["faults"], tdf_of(r), r["rate_rps"], r["policy"]) for r in results},
                  key=lambda k: (k[0], k[1], k[2], POLICIES.index(k[3])))  # fmt: skip
    for f, tdf, rate, pol in keys:
        key = (f, tdf, rate, pol)
        rs = [r for r in results if (r["faults"], tdf_of(r), r["rate_rps"], r["policy"]) == key]
        modelled = ", ".join(f"{m:.0f}" for m in rs[0]["modelled_latency_ms"])
        lines.append(
            f"| {'yes' if f else 'no'} | {tdf:g} | {rate:g} | {pol} | "
            f"{sorted(r['seed'] for r in rs)} | "
            f"{cell(rs, 'short_p50_ms')} | {cell(rs, 'short_p95_ms')} | "
            f"{cell(rs, 'long_p50_ms')} | {cell(rs, 'long_p95_ms')} | "
            f"{cell(rs, 'throughput_rps', 2)} | {cell(rs, 'failed_attempts')} | "
            f"{cell(rs, 'mean_utilisation', 2)} | {modelled} | "
            f"{rs[0].get('routes', rs[0]['cuts'])} |"
        )
    return "\n".join(lines + ["", paired(results)])


def paired(results: list[dict[str, Any]]) -> str:
    """Hyperion's short/long p50 against each baseline's, seed by seed (same TDF and
    rate, no faults): ``1 - hyperion / baseline`` in %, mean +- std over the seeds run by
    both (negative: the baseline was faster)."""
    lines = ["| TDF | rate rps | baseline | seeds | short p50: Hyperion lower by % | "
             "long p50: Hyperion lower by % |", "|---|---|---|---|---|---|"]  # fmt: skip
    plain = [r for r in results if not r["faults"]]
    for tdf, rate in sorted({(tdf_of(r), r["rate_rps"]) for r in plain}):
        same = [r for r in plain if (tdf_of(r), r["rate_rps"]) == (tdf, rate)]
        hyp = {r["seed"]: r for r in same if r["policy"] == "hyperion"}
        for base in POLICIES[1:]:
            other = {r["seed"]: r for r in same if r["policy"] == base}
            seeds = sorted(set(hyp) & set(other))
            if not seeds:
                continue
            cells = []
            for key in ("short_p50_ms", "long_p50_ms"):
                gains = [100 * (1 - hyp[s][key] / other[s][key]) for s in seeds
                         if hyp[s].get(key) and other[s].get(key)]  # fmt: skip
                each = ", ".join(f"{g:+.0f}" for g in gains)
                cells.append(f"{fmt_mean_std(gains, 0, sep=' +- ', empty='n/a')} ({each})")
            lines.append(f"| {tdf:g} | {rate:g} | {base} | {seeds} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", type=float, nargs="+", default=[2.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--faults", action="store_true", help="crash fog-b at 10 s, degrade cloud")
    ap.add_argument("--time-dilation", help="override time_dilation: auto or a factor (1: none)")
    ap.add_argument("--json", type=Path, default=Path("runs/hyperion.json"))
    ap.add_argument("--report", action="store_true", help="print the table of --json")
    ap.add_argument("--label", help="stored with each run; --report: only runs with it")
    args = ap.parse_args()
    results = json.loads(args.json.read_text()) if args.json.exists() else []
    if args.report:
        print(report([r for r in results if args.label in (None, r.get("label"))]))
        return 0
    for rate in args.rates:
        for seed in args.seeds:
            for pol in args.policies:
                r = {**one(pol, rate, seed, args.faults, args.duration, args.time_dilation),
                     "label": args.label}  # fmt: skip
                print(json.dumps({k: r.get(k) for k in ("policy", "rate_rps", "seed",
                      "tdf", "short_p50_ms", "short_p95_ms", "long_p50_ms", "failed_attempts",
                      "load_1min")}), flush=True)  # fmt: skip
                results.append(r)
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
