"""TT-compressed FL uplinks vs uncompressed, same spec and seed, same run.

Runs the quickstart fleet (or --spec) once without compression and once per eps with
TT-Edge uplinks (error feedback on), through the local backend and its shaping proxies.
Prints final accuracy, cumulative uplink payload bytes (serialized arrays) and wire
bytes (measured at each node's emulated link), and the reduction vs uncompressed;
writes accuracy-vs-cumulative-uplink-bytes per round to CSV and a PNG.

    python bench/tt_fl.py [--eps 0.6 0.7 0.8 0.9] [--out bench_out]
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.runner import run_experiment  # noqa: E402
from testbed.spec.loader import load_spec, parse_set  # noqa: E402
from testbed.store import RunStore  # noqa: E402


def one(spec_path: str, sets: list[str], store: RunStore) -> dict:
    exp = load_spec(spec_path, parse_set(sets))
    res = run_experiment(exp, store, spec_path=spec_path)
    m = store.metrics(res.run_id)
    acc = {r: v for r, _n, k, v, _t in m if k == "global_acc"}
    up: dict[int, float] = {}
    for r, _n, k, v, _t in m:
        if k == "bytes_received":
            up[r] = up.get(r, 0.0) + v
    wire = sum(v for _r, _n, k, v, _t in m if k == "link_bytes_up")
    cum, rows = 0.0, []
    for r in sorted(up):
        cum += up[r]
        rows.append((r, cum, acc.get(r)))
    return {
        "status": res.status,
        "final_acc": acc[max(acc)],
        "payload": cum,
        "wire": wire,
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=str(ROOT / "experiments" / "quickstart.yaml"))
    ap.add_argument("--eps", type=float, nargs="+", default=[0.6, 0.7, 0.8, 0.9])
    ap.add_argument("--out", default="bench_out")
    ap.add_argument("--wire-dtype", default="float32", choices=["float32", "float16"])
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as d:
        store = RunStore(d)
        print("uncompressed ...", flush=True)
        results["none"] = one(args.spec, [], store)
        for eps in args.eps:
            print(f"TT uplink eps={eps} ({args.wire_dtype} on the wire) ...", flush=True)
            results[f"tt eps={eps}"] = one(
                args.spec,
                [
                    "workload.fl.uplink.compression=tt",
                    f"workload.fl.uplink.eps={eps}",
                    f"workload.fl.uplink.wire_dtype={args.wire_dtype}",
                ],
                store,
            )
    base = results["none"]
    print("\nmeasured on this machine, same spec and seed, same run")
    print(
        f"{'uplink':14s}{'final acc':>10s}{'d acc pts':>10s}{'payload MB':>11s}"
        f"{'reduction':>10s}{'wire MB':>9s}{'wire red.':>10s}"
    )
    for name, r in results.items():
        print(
            f"{name:14s}{r['final_acc']:10.3f}{100 * (r['final_acc'] - base['final_acc']):10.1f}"
            f"{r['payload'] / 1e6:11.3f}{base['payload'] / r['payload']:10.2f}"
            f"{r['wire'] / 1e6:9.3f}{base['wire'] / r['wire']:10.2f}"
        )
    with open(out / "tt_fl.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["uplink", "round", "cumulative_uplink_payload_bytes", "global_acc"])
        for name, r in results.items():
            for row in r["rows"]:
                w.writerow([name, *row])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, r in results.items():
        ax.plot([c / 1e6 for _r, c, _a in r["rows"]], [a for *_x, a in r["rows"]], "o-", label=name)
    ax.set_xlabel("cumulative uplink payload, MB (measured)")
    ax.set_ylabel("global test accuracy")
    ax.set_title("TT-Edge uplinks on digits, 4 clients")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "tt_fl.png", dpi=120)
    print(f"\nwrote {out / 'tt_fl.csv'} and {out / 'tt_fl.png'}")


if __name__ == "__main__":
    main()
