"""Fault reaction times on a real fleet (median over N trials, one run).

One edge node flaps N times (down ``--down-s``, then up as long): for each cycle, the
time from the kill (``node_down`` event) to the node's first ``failed`` round status
(observed by the ServerApp: the round deadline passed, or Flower reported the node
unavailable), and from its restart to its first ``completed`` round (``node_rejoined``).
Both depend on the round timeout and Flower's own 3 s polling; they are printed with
those settings.

    python bench/faults.py [--trials 10] [--down-s 10] [--round-timeout-s 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.runner import run_experiment  # noqa: E402
from testbed.spec.loader import parse_spec  # noqa: E402
from testbed.store import RunStore  # noqa: E402

SPEC = """\
name: fault-reaction
seed: 5
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, count: 2}}
workload:
  fl: {{rounds: {rounds}, round_timeout_s: {timeout}}}
faults:
  - {{kind: flapping, node: edge-1, at_round: 2, duration_s: {down}, repeat: {trials}}}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--down-s", type=float, default=10.0)
    ap.add_argument("--round-timeout-s", type=float, default=8.0)
    args = ap.parse_args()
    rounds = int(args.trials * 2 * args.down_s / 6) + 6
    text = SPEC.format(
        rounds=rounds, timeout=args.round_timeout_s, down=args.down_s, trials=args.trials
    )
    with tempfile.TemporaryDirectory() as d:
        store = RunStore(d)
        res = run_experiment(parse_spec(text), store)
        events = store.events(res.run_id)
        rows = store._db.execute(
            "SELECT round, status, ts FROM round_status WHERE run_id=? AND node='edge-1'"
            " ORDER BY ts",
            (res.run_id,),
        ).fetchall()
    downs = [ts for _i, ts, k, _r, n, _d in events if k == "node_down" and n == "edge-1"]
    to_failed = []
    for t in downs:
        after = [ts for _r, s, ts in rows if s == "failed" and ts >= t]  # as observed
        if after:
            to_failed.append(min(after) - t)
    rejoin = [
        json.loads(d)["time_to_rejoin_s"]
        for _i, _t, k, _r, n, d in events
        if k == "node_rejoined" and n == "edge-1"
    ]
    print(
        f"run {res.run_id}: {res.status}, {rounds} rounds, round timeout "
        f"{args.round_timeout_s} s, outage {args.down_s} s x {args.trials} (measured)"
    )
    print(
        f"crash -> marked failed: median {statistics.median(to_failed):.2f} s "
        f"(n={len(to_failed)}, min {min(to_failed):.2f}, max {max(to_failed):.2f})"
    )
    print(
        f"back -> taking part:    median {statistics.median(rejoin):.2f} s "
        f"(n={len(rejoin)}, min {min(rejoin):.2f}, max {max(rejoin):.2f})"
    )


if __name__ == "__main__":
    main()
