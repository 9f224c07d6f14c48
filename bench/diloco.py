"""DiLoCo vs FedAvg: communication per unit of accuracy under the testbed's links.

Runs experiments/diloco.yaml (4 non-IID silos behind 20-100 Mbit/s links, an outage of
one silo mid-training) for each configuration ``strategy:local_epochs[:outer_lr]`` and
seed through the runner, and records per run:

- global accuracy per round (measured on the server's test set);
- uplink payload bytes per round (measured: the sizes of the model updates the server
  received, ``bytes_received``, summed over the silos of each round);
- uplink wire bytes of the whole run (measured by the silos' shaping proxies: updates,
  Flower framing, polling, the final evaluation), read once at the end;
- every silo that did not complete a round (the outage, or a healthy silo that missed
  the round's deadline under load);
- the wall clock of every round (measured: the server's ``round_start`` and ``round_end``
  events and the time its ``global_acc`` was recorded, in seconds after round 1 started),
  from which the report gives the wall time to ``--target`` and per round.

``--edge-mbps`` / ``--edge-latency-ms`` override the edge-cloud link of the experiment
(20 Mbit/s, 30 ms); the fog-cloud link (100 Mbit/s, 10 ms) is left as it is.

The report gives mean +- sample std over seeds: per round, and for the round and the
uplink MB at which the global accuracy first reaches ``--target``: payload MB measured
per round, wire MB an ESTIMATE (the run's wire total x round / rounds).

    python bench/diloco.py --seeds 1 2 3 --json runs/diloco.json
    python bench/diloco.py --configs diloco:4:0.3 diloco:4:1.0 --seeds 1 2 3
    python bench/diloco.py --edge-mbps 1 --seeds 1 --json runs/diloco_slow.json
    python bench/diloco.py --report --json runs/diloco.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.diloco_clock import (  # noqa: E402
    cycle_seconds,
    first_round,
    link_of,
    round_clock,
    round_seconds,
    time_to,
    time_to_clear,
)
from testbed.runner import run_experiment  # noqa: E402
from testbed.spec.loader import load_spec  # noqa: E402
from testbed.spec.models import Experiment  # noqa: E402
from testbed.stats import fmt_mean_std  # noqa: E402
from testbed.store import RunStore  # noqa: E402

CONFIGS = ["fedavg:1", "fedavg:4", "diloco:4"]
DEFAULT_OUTER_LR = 0.7  # DiLoCo's server_learning_rate default (nodes/fl/paper_strategies.py)
EDGE_LINK = "links.defaults.edge-cloud"  # the edge silos' link in experiments/diloco.yaml

Result = dict[str, Any]  # one run (the same shape as bench.diloco_clock.Result)


def parse_config(cfg: str) -> tuple[str, int, float | None]:
    """``strategy:local_epochs[:outer_lr]`` -> (strategy, epochs, outer lr or None).

    Raises
    ------
    ValueError
        The string has not 2 or 3 fields, or the outer lr is given for FedAvg.
    """
    parts = cfg.split(":")
    if len(parts) not in (2, 3) or not parts[1].isdigit():
        raise ValueError(f"--configs: {cfg!r} is not strategy:local_epochs[:outer_lr]")
    strat, epochs = parts[0], int(parts[1])
    if len(parts) == 2:
        return strat, epochs, (DEFAULT_OUTER_LR if strat == "diloco" else None)
    if strat != "diloco":
        raise ValueError(f"--configs: {cfg!r}: an outer lr is only for diloco")
    try:
        return strat, epochs, float(parts[2])
    except ValueError:
        raise ValueError(f"--configs: {cfg!r}: outer_lr must be a number") from None


def key_of(r: Result) -> str:
    """The configuration a result belongs to, as ``--configs`` spells it."""
    lr = r.get("outer_lr")
    base = f"{r['strategy']}:{r['local_epochs']}"
    return base if lr is None or lr == DEFAULT_OUTER_LR else f"{base}:{lr:g}"


def _collect(store: RunStore, run_id: str) -> Result:
    """Accuracy and payload per round, wire total, and the silos that missed a round."""
    rows = store.metrics(run_id)
    acc = {m.round: m.value for m in rows if m.name == "global_acc" and m.round is not None}
    payload: dict[int, float] = {}
    for m in rows:
        if m.name == "bytes_received" and m.round is not None:
            payload[m.round] = payload.get(m.round, 0.0) + (m.value or 0.0)
    missed = [[s.round, s.node, s.status, s.reason or ""]
              for s in store.round_status(run_id) if s.status != "completed"]  # fmt: skip
    return {"global_acc": {str(r): v for r, v in sorted(acc.items())},
            "payload_up_by_round": {str(r): v for r, v in sorted(payload.items())},
            "bytes_up": sum(m.value or 0.0 for m in rows if m.name == "link_bytes_up"),
            "not_completed": sorted(missed),
            "round_clock": round_clock(store.events(run_id), rows)}  # fmt: skip


Edge = tuple[float | None, float | None]  # edge-cloud (Mbit/s, ms); None: the spec's


def spec_for(strategy: str, epochs: int, seed: int, outer_lr: float | None,
             edge: Edge = (None, None)) -> Experiment:  # fmt: skip
    """experiments/diloco.yaml for one configuration and seed, its sweep grid dropped.

    ``edge`` = (bandwidth Mbit/s, latency ms) of the edge-cloud link; None keeps the
    experiment's value.
    """
    sets: list[tuple[str, Any]] = [
        ("workload.fl.strategy.name", strategy), ("workload.fl.local_epochs", epochs),
        ("seed", seed)]  # fmt: skip
    if strategy == "diloco" and outer_lr is not None:
        sets.append(("workload.fl.strategy.params.server_learning_rate", outer_lr))
    for field, value in zip(("bandwidth_mbps", "latency_ms"), edge, strict=True):
        if value is not None:
            sets.append((f"{EDGE_LINK}.{field}", value))
    exp = load_spec(ROOT / "experiments" / "diloco.yaml", sets)
    return exp.model_copy(update={"sweep": exp.sweep.model_copy(update={"grid": {}})})


def one(strategy: str, epochs: int, seed: int, outer_lr: float | None,
        edge: Edge = (None, None)) -> Result:  # fmt: skip
    """Run one configuration with one seed; the store lives in a temporary folder."""
    exp = spec_for(strategy, epochs, seed, outer_lr, edge)
    link = exp.links.defaults["edge-cloud"]
    load0, t0 = os.getloadavg()[0], time.time()
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp) / "runs")
        res = run_experiment(exp, store)
        got = _collect(store, res.run_id)
        store.close()
    return {"strategy": strategy, "local_epochs": epochs, "outer_lr": outer_lr, "seed": seed,
            "status": res.status, **got, "rounds": exp.workload.fl.rounds if exp.workload.fl else 0,
            "edge_mbps": link.bandwidth_mbps, "edge_latency_ms": link.latency_ms,
            "wall_s": round(time.time() - t0, 1),
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime(t0)),
            "load_1min": [round(load0, 2), round(os.getloadavg()[0], 2)]}  # fmt: skip


def reach(r: Result, target: float) -> tuple[int | None, float | None, float | None]:
    """First round whose global accuracy >= target, the uplink payload MB up to and
    including it (measured per round), and the wire MB by then (estimate: the wire total
    spread evenly over the rounds)."""
    rnd = first_round(r["global_acc"], target)
    if rnd is None:
        return None, None, None
    pay = r.get("payload_up_by_round", {})
    sent = sum(v for k, v in pay.items() if int(k) <= rnd) / 1e6 if pay else None
    return rnd, sent, r["bytes_up"] * rnd / r["rounds"] / 1e6


def ms(vals: list[float], fmt: str = ".2f") -> str:
    """Mean +- sample standard deviation (one value: the value alone); ``fmt`` is
    ``".Nf"`` or ``"+.Nf"`` (a signed mean)."""
    digits = int(fmt.rstrip("f").rsplit(".", 1)[1])
    return fmt_mean_std(vals, digits, sign=fmt.startswith("+"), sep=" +- ", empty="not reached")


def groups(results: list[Result]) -> dict[str, list[Result]]:
    """Results by configuration: FedAvg first, then by local epochs and outer lr."""
    out: dict[str, list[Result]] = {}
    for r in sorted(results, key=lambda r: (r["strategy"] != "fedavg", r["local_epochs"],
                                            r.get("outer_lr") or 0.0, r["seed"])):  # fmt: skip
        out.setdefault(key_of(r), []).append(r)
    return out


def _summary_row(key: str, rs: list[Result], target: float) -> str:
    finals = [r["global_acc"].get(str(r["rounds"])) for r in rs]
    hits = [reach(r, target) for r in rs]
    rounds = [float(h[0]) for h in hits if h[0] is not None]
    pay = [h[1] for h in hits if h[1] is not None]
    wire = [h[2] for h in hits if h[2] is not None]
    lr = rs[0].get("outer_lr")
    pay_s = ms(pay) if pay or not rounds else "n/a"  # n/a: a run without per-round payload
    return (f"| {rs[0]['strategy']} | {rs[0]['local_epochs']} | {'-' if lr is None else lr} | "
            f"{sorted(r['seed'] for r in rs)} | {ms([f for f in finals if f is not None])} | "
            f"{ms(rounds, '.1f')} ({len(rounds)}/{len(rs)}) | {pay_s} | {ms(wire)} | "
            f"{ms([r['bytes_up'] / 1e6 for r in rs])} |")  # fmt: skip


def summary(results: list[Result], target: float) -> str:
    """One row per configuration: final accuracy, rounds and MB to ``target``."""
    lines = ["| strategy | local epochs | outer lr | seeds | final global acc | "
             f"rounds to {target} (seeds reaching) | uplink payload MB to {target} (measured) | "
             f"uplink wire MB to {target} (estimate) | uplink wire MB total (measured) |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += [_summary_row(k, rs, target) for k, rs in groups(results).items()]
    return "\n".join(lines)


def _round_table(results: list[Result], values: Callable[[Result], dict[int, float]],
                 fmt: str = ".2f") -> str:  # fmt: skip
    """Per round, per configuration: mean +- std over seeds of ``values(run)[round]``."""
    gs = groups(results)
    per_run = {id(r): values(r) for rs in gs.values() for r in rs}
    rounds = sorted({k for d in per_run.values() for k in d})
    lines = ["| round | " + " | ".join(gs) + " |", "|---|" + "---|" * len(gs)]
    for rnd in rounds:
        cells = [ms([d[rnd] for r in rs if rnd in (d := per_run[id(r)])], fmt)
                 for rs in gs.values()]  # fmt: skip
        lines.append(f"| {rnd} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_round(results: list[Result]) -> str:
    """Global accuracy per round (round 0 = initial model), mean +- std over seeds."""
    return _round_table(
        results, lambda r: {int(k): v for k, v in r["global_acc"].items() if v is not None}
    )


def misses(results: list[Result]) -> str:
    """Every (round, silo, status, reason) that did not complete, with the runs it hit."""
    hit: dict[tuple[int, str, str, str], list[str]] = {}
    for r in results:
        for rnd, node, status, reason in r.get("not_completed", []):
            hit.setdefault((rnd, node, status, reason), []).append(f"{key_of(r)} s{r['seed']}")
    lines = ["| round | silo | status | reason | runs (of all) |", "|---|---|---|---|---|"]
    for (rnd, node, status, reason), runs in sorted(hit.items()):
        lines.append(f"| {rnd} | {node} | {status} | {reason} | {len(runs)}/{len(results)}: "
                     f"{', '.join(runs)} |")  # fmt: skip
    return "\n".join(lines)


def paired(results: list[Result], base: str = "fedavg:4") -> str:
    """Per round, each configuration's accuracy minus ``base``'s on the same seed (mean
    +- std over the seeds both have): the seed's data split and initial model cancel."""
    gs = groups(results)
    ref = {r["seed"]: r["global_acc"] for r in gs.get(base, [])}
    others = [k for k in gs if k != base]
    rounds = sorted({int(k) for g in ref.values() for k in g})
    lines = ["| round | " + " | ".join(f"{k} - {base}" for k in others) + " |",
             "|---|" + "---|" * len(others)]  # fmt: skip
    for rnd in rounds:
        cells = [ms([r["global_acc"][str(rnd)] - ref[r["seed"]][str(rnd)] for r in gs[k]
                     if r["seed"] in ref and str(rnd) in r["global_acc"]], "+.3f")
                 for k in others]  # fmt: skip
        lines.append(f"| {rnd} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _time_row(key: str, rs: list[Result], target: float) -> str:
    hits = {r["seed"]: time_to(r, target) for r in rs}
    secs = [h[1] for h in hits.values() if h is not None]
    each = ", ".join(f"s{s}: {'-' if h is None else f'{h[1]:.1f} (r{h[0]})'}"
                     for s, h in sorted(hits.items()))  # fmt: skip
    pay = [p for r in rs if (p := reach(r, target)[1]) is not None]
    cyc = [c for r in rs if (c := cycle_seconds(r)) is not None]
    med = [statistics.median(d.values()) for r in rs if (d := round_seconds(r))]
    clear = [c for r in rs if (c := time_to_clear(r, target)) is not None]
    return (f"| {key} | {ms(secs, '.1f')} ({len(secs)}/{len(rs)}) | {each} | "
            f"{ms(clear, '.1f')} | "
            f"{ms([float(h[0]) for h in hits.values() if h is not None], '.1f')} | "
            f"{ms(cyc, '.1f')} | {ms(med, '.1f')} | {ms(pay)} |")  # fmt: skip


def timing(results: list[Result], target: float) -> str:
    """Wall time to ``target`` per configuration (measured from the run store's round
    events), beside rounds, seconds per round and uplink payload to ``target``."""
    lines = [f"edge-cloud link: {link_of(results)}", "",
             f"| config | wall s to {target} (seeds with a clock) | per seed: s (round) | "
             f"wall s to {target} less rounds with a failed silo | rounds to {target} | "
             "wall s per round (whole run) | train phase s per round (median of rounds) | "
             f"uplink payload MB to {target} |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += [_time_row(k, rs, target) for k, rs in groups(results).items()]
    return "\n".join(lines)


def per_round_clock(results: list[Result]) -> str:
    """Per round, the wall seconds from its start to its end (mean +- std over seeds)."""
    return _round_table(results, round_seconds, ".1f")


def report(results: list[Result], target: float) -> str:
    runs = ", ".join(f"{key_of(r)} s{r['seed']}: {r.get('wall_s', '?')} s, load "
                     f"{r['load_1min']}" for r in results)  # fmt: skip
    return "\n\n".join([summary(results, target), timing(results, target),
                        per_round_clock(results), per_round(results), paired(results),
                        misses(results), f"runs: {runs}"])  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--configs", nargs="+", default=CONFIGS,
                    help="strategy:local_epochs[:outer_lr] (outer lr: diloco only)")  # fmt: skip
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--json", type=Path, default=Path("runs/diloco.json"))
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--edge-mbps", type=float, default=None,
                    help="edge-cloud link bandwidth, Mbit/s (default: the experiment's, 20)")
    ap.add_argument("--edge-latency-ms", type=float, default=None,
                    help="edge-cloud link latency, ms (default: the experiment's, 30)")
    args = ap.parse_args()
    try:
        configs = [parse_config(c) for c in args.configs]
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    results = json.loads(args.json.read_text()) if args.json.exists() else []
    if args.report:
        try:
            print(report(results, args.target))
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
        return 0
    for seed in args.seeds:
        for strat, ep, lr in configs:
            r = one(strat, ep, seed, lr, (args.edge_mbps, args.edge_latency_ms))
            shown = ("strategy", "local_epochs", "outer_lr", "seed", "status", "edge_mbps",
                     "bytes_up", "wall_s", "load_1min", "not_completed")  # fmt: skip
            print(json.dumps({k: r[k] for k in shown}), flush=True)
            results.append(r)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
