"""Summarise the TT uplink study (``experiments/tt_fl.yaml``) from a run store.

Reads every completed run of the store(s), groups them by uplink configuration (from each
run's ``spec.resolved.yaml``) and prints, as markdown:

- per configuration: seeds, final global accuracy mean +- std (over seeds), the paired
  difference to its baseline (float32 rows vs the float32 baseline, float16 rows vs the
  float16 baseline, same seed), uplink payload and wire bytes and their reductions;
- the global accuracy after every round, mean +- std over seeds;
- the uplink payload of every round (all clients), mean +- std over seeds.

Payload = sum over rounds and clients of the array buffer bytes of each train reply, as
the ServerApp received them (``bytes_received``); wire = bytes each client's emulated link
carried upstream over the whole run, counted by the shaping proxy (``link_bytes_up``:
model, Flower protocol, polling, heartbeats).

    python bench/tt_study.py runs/tt-fl [more stores] [--json docs/results/tt_fl_study.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.stats import fmt_mean_std  # noqa: E402
from testbed.store import RunStore  # noqa: E402


def label(uplink: dict[str, Any]) -> str:
    """Short name of an uplink configuration."""
    if uplink.get("compression", "none") == "none":
        return "float32 baseline (none)"
    fp16 = uplink.get("wire_dtype") == "float16"
    if int(uplink.get("min_numel", 1024)) >= 10**8:
        return "float16 baseline (no TT)" if fp16 else "float32 via codec (no TT)"
    ef = "" if uplink.get("error_feedback", True) else ", no EF"
    rank = f", max_rank {uplink['max_rank']}" if uplink.get("max_rank") else ""
    layout = uplink.get("tensorization", "tt")
    shape = ("" if layout == "tt" else f", {layout}") + (", packed" if uplink.get("packed") else "")
    return f"TT eps {uplink.get('eps')}{shape}{rank}{ef}" + (" + float16" if fp16 else "")


def baseline_of(name: str) -> str:
    """The baseline a configuration is compared with (same wire dtype)."""
    return "float16 baseline (no TT)" if name.endswith("float16") else "float32 baseline (none)"


def one_run(store: RunStore, run_id: str, artifact_dir: str, seed: int) -> dict[str, Any]:
    """Config, seed (the run's: a repetition's differs from its spec's), accuracy per
    round, payload and wire bytes of one run."""
    spec = yaml.safe_load((Path(artifact_dir) / "spec.resolved.yaml").read_text())
    acc: dict[int, float] = {}
    per_round: dict[int, float] = defaultdict(float)
    payload = 0.0
    wire = 0.0
    for m in store.metrics(run_id):
        if m.value is None:
            continue
        if m.name == "global_acc" and m.round is not None:
            acc[m.round] = m.value
        elif m.name == "bytes_received":
            payload += m.value
            if m.round is not None:
                per_round[m.round] += m.value
        elif m.name == "link_bytes_up":
            wire += m.value
    return {"run_id": run_id, "config": label(spec["workload"]["fl"].get("uplink", {})),
            "seed": seed, "acc": acc, "payload": payload, "wire": wire,
            "payload_per_round": dict(per_round)}


def collect(stores: list[str]) -> dict[str, dict[int, dict[str, Any]]]:
    """{config: {seed: run}} over the completed runs of ``stores`` (latest run wins)."""
    out: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for root in stores:
        store = RunStore(root)
        for r in sorted(store.runs(), key=lambda r: r.created_at):
            if r.status == "completed" and r.artifact_dir:
                seed = r.seed if r.seed is not None else int(yaml.safe_load(
                    (Path(r.artifact_dir) / "spec.resolved.yaml").read_text())["seed"])
                run = one_run(store, r.run_id, r.artifact_dir, seed)
                out[run["config"]][run["seed"]] = run
    return out


def mstd(xs: list[float], scale: float = 1.0, fmt: str = "{:.3f}") -> str:
    """'mean +- std' (sample std; n shown when < 2) of ``xs`` times ``scale``; ``fmt`` is
    ``"{:.Nf}"`` or ``"{:+.Nf}"`` (a signed mean)."""
    digits = int(fmt.rstrip("f}").rsplit(".", 1)[1])
    return fmt_mean_std(xs, digits, scale=scale, sign="+" in fmt, one="n")


def summary_rows(runs: dict[str, dict[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per configuration, paired with its baseline on common seeds."""
    rows = []
    for name, by_seed in sorted(runs.items()):
        base = runs.get(baseline_of(name), {})
        seeds = sorted(by_seed)
        final = [by_seed[s]["acc"][max(by_seed[s]["acc"])] for s in seeds]
        paired = [s for s in seeds if s in base]
        d_acc = [by_seed[s]["acc"][max(by_seed[s]["acc"])]
                 - base[s]["acc"][max(base[s]["acc"])] for s in paired]
        red_p = [base[s]["payload"] / by_seed[s]["payload"] for s in paired]
        red_w = [base[s]["wire"] / by_seed[s]["wire"] for s in paired]
        red32 = [runs["float32 baseline (none)"][s]["payload"] / by_seed[s]["payload"]
                 for s in seeds if s in runs.get("float32 baseline (none)", {})]
        rows.append({
            "config": name, "baseline": baseline_of(name), "seeds": seeds,
            "final_acc": final, "delta_points": [100 * d for d in d_acc],
            "payload_mb": [by_seed[s]["payload"] / 1e6 for s in seeds],
            "payload_reduction": red_p, "payload_reduction_vs_fp32": red32,
            "wire_mb": [by_seed[s]["wire"] / 1e6 for s in seeds], "wire_reduction": red_w,
        })
    return rows


def per_round(runs: dict[str, dict[int, dict[str, Any]]], key: str = "acc",
              scale: float = 1.0, fmt: str = "{:.3f}") -> str:
    """Markdown: ``key`` (a per-round dict of each run) after each round, mean +- std over
    seeds, times ``scale``."""
    rounds = sorted({r for by_seed in runs.values() for run in by_seed.values()
                     for r in run[key]})
    head = "| config | " + " | ".join(f"round {r}" for r in rounds) + " |"
    lines = [head, "|" + "---|" * (len(rounds) + 1)]
    for name, by_seed in sorted(runs.items()):
        cells = [mstd([run[key][r] for run in by_seed.values() if r in run[key]], scale, fmt)
                 for r in rounds]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--json", default=None, help="write rows and per-run data here")
    args = ap.parse_args()
    runs = collect(args.stores)
    rows = summary_rows(runs)
    print("| config | seeds | final acc | Δ vs baseline (points, paired) | payload MB | "
          "payload reduction vs baseline | vs float32 | wire MB | wire reduction |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {','.join(map(str, r['seeds']))} | {mstd(r['final_acc'])} | "
              f"{mstd(r['delta_points'], fmt='{:+.1f}')} | {mstd(r['payload_mb'])} | "
              f"{mstd(r['payload_reduction'], fmt='{:.2f}')} | "
              f"{mstd(r['payload_reduction_vs_fp32'], fmt='{:.2f}')} | {mstd(r['wire_mb'])} | "
              f"{mstd(r['wire_reduction'], fmt='{:.2f}')} |")
    print()
    print(per_round(runs))
    print()
    print("Uplink payload per round (kB, all clients), mean +- std over seeds:")
    print()
    print(per_round(runs, "payload_per_round", 1e-3, "{:.1f}"))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"summary": rows, "runs": {k: list(v.values()) for k, v in runs.items()}},
            indent=1, default=str))


if __name__ == "__main__":
    main()
