"""Soak: one long run with many injected faults of every registered kind.

A real fleet (``--nodes`` edge clients and the cloud SuperLink, local backend) runs FedAvg
for enough rounds to take ``--faults`` faults drawn over every kind in the fault-kind
registry (``testbed.faults.FAULT_KINDS``), at most one per node and round. Crashes are
permanent, so they are few (``--crashes``) and keep at least two clients alive. Then the
store is audited:

- **lost**: a round that ended has a status row for every client node of the plan
  (``completed``, ``late``, ``failed`` or ``excluded``); every reply the ServerApp
  received (``bytes_received`` of a round and node) has a ``completed`` or ``late``
  status. Rounds that sampled more Flower node ids than the plan has clients (a
  restarted node's old id still registered) are counted as ``ghost_rounds``.
- **invented**: no status row for a round that never started; no ``completed`` row
  without a received reply (``bytes_received``) for that round and node.
- **faults**: every fault that came due is an event (``fault_injected`` or
  ``fault_rejected``), and every injected fault's first effect event (the kind's
  ``effects``) names its node.

Prints one JSON line with the counts and exits 1 if any audit fails. Measured on this
machine; the figures go into docs/benchmarks.md with the load.

    python bench/soak.py [--faults 100] [--nodes 8] [--seed 3]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.faults import FAULT_KINDS  # noqa: E402
from testbed.runner import run_experiment  # noqa: E402
from testbed.spec.loader import parse_spec  # noqa: E402
from testbed.store import RunStore  # noqa: E402

# Parameters per kind: short, so a node is back (or the effect over) within a round or two.
PARAMS: dict[str, str] = {
    "crash": "",
    "outage": "duration_s: 3",
    "flapping": "duration_s: 2, repeat: 2",
    "pause": "duration_s: 3",
    "straggler": "factor: 2.0, rounds: 1",
    "misconfig": "mode: noise, factor: 0.5, rounds: 1",
    "partition": "duration_s: 3",
    "degrade": "bandwidth_mbps: 5, latency_ms: 80, duration_s: 4",
    "superlink-restart": "",
}

SPEC = """\
name: soak
seed: {seed}
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, count: {nodes}}}
workload:
  fl: {{rounds: {rounds}, local_epochs: 1, round_timeout_s: {timeout}, min_participants: 2}}
faults:
{faults}
"""


def draw_faults(n: int, nodes: int, crashes: int, seed: int) -> tuple[list[str], int]:
    """``n`` fault lines over every registered kind; the rounds the run needs."""
    rng = random.Random(seed)
    kinds = [k for k in FAULT_KINDS if k != "crash"]
    unknown = [k for k in kinds if k not in PARAMS]
    if unknown:
        raise SystemExit(f"bench/soak.py has no parameters for fault kinds {unknown}")
    plan = ["crash"] * crashes + [kinds[i % len(kinds)] for i in range(n - crashes)]
    rng.shuffle(plan)
    alive = [f"edge-{i}" for i in range(1, nodes + 1)]
    per_round = max(1, nodes // 2)  # faults per round, on distinct nodes
    lines, rnd = [], 2
    while plan:
        batch, plan = plan[:per_round], plan[per_round:]
        targets = rng.sample(alive, min(len(batch), len(alive)))
        for kind, node in zip(batch, targets, strict=False):
            params = PARAMS[kind]
            target = "" if FAULT_KINDS[kind].target == "server" else f"node: {node}, "
            phase = rng.choice(["before", "during"])
            extra = f", {params}" if params else ""
            lines.append(f"  - {{kind: {kind}, {target}at_round: {rnd}, phase: {phase}{extra}}}")
            if kind == "crash":
                alive.remove(node)
        rnd += 2  # a quiet round between fault rounds: nodes rejoin, links heal
    return lines, rnd + 1


def audit(store: RunStore, run_id: str, n_faults: int, clients: int) -> dict[str, Any]:
    """Counts of lost and invented records and of faults without events."""
    events = store.events(run_id)
    sampled = {e.round: e.data_dict["sampled"] for e in events if e.kind == "round_start"}
    ended = {e.round for e in events if e.kind == "round_end"}
    rows = store.round_status(run_id)
    per_round = Counter(r.round for r in rows)
    got = {(m.round, m.node) for m in store.metrics(run_id, "bytes_received")}
    status = {(r.round, r.node): r.status for r in rows}
    lost: list[Any] = [r for r in ended if per_round.get(r, 0) != clients]
    lost += [c for c in got if status.get(c) not in ("completed", "late")]
    invented = [r.round for r in rows if r.round not in sampled]
    invented += [c for c, s in status.items() if s == "completed" and c not in got]
    due = [e for e in events if e.kind in ("fault_injected", "fault_rejected")]
    injected = [e for e in due if e.kind == "fault_injected"]
    effects = Counter((e.kind, e.node) for e in events)
    no_effect = []
    for e in injected:
        kind = e.data_dict["kind"]
        first = FAULT_KINDS[kind].effects[:1]
        if first and e.node is not None and not effects[(first[0], e.node)]:
            no_effect.append((kind, e.node, e.round))
    return {
        "rounds_started": len(sampled),
        "ghost_rounds": sum(k > clients for k in sampled.values()),
        "status_rows": len(rows),
        "statuses": dict(Counter(status.values())),
        "lost": len(lost),
        "invented": len(invented),
        "faults_planned": n_faults,
        "faults_as_events": len(due),
        "faults_injected": len(injected),
        "faults_rejected": len(due) - len(injected),
        "kinds_injected": dict(Counter(e.data_dict["kind"] for e in injected)),
        "injected_without_effect": no_effect,
        "examples": {"lost": lost[:5], "invented": invented[:5]},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--faults", type=int, default=100)
    ap.add_argument("--nodes", type=int, default=8, help="edge clients")
    ap.add_argument("--crashes", type=int, default=3, help="permanent crashes among the faults")
    ap.add_argument("--round-timeout-s", type=int, default=10)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="store folder (default: temporary)")
    a = ap.parse_args()
    if a.nodes - a.crashes < 2:
        ap.error("--nodes must exceed --crashes by at least 2 (the run needs two clients)")
    lines, rounds = draw_faults(a.faults, a.nodes, a.crashes, a.seed)
    text = SPEC.format(
        seed=a.seed,
        nodes=a.nodes,
        rounds=rounds,
        timeout=a.round_timeout_s,
        faults="\n".join(lines),
    )
    out = a.out or Path(tempfile.mkdtemp(prefix="soak-"))
    store = RunStore(out)
    t0 = time.time()
    res = run_experiment(parse_spec(text, "soak.yaml"), store, spec_path="soak.yaml")
    result = {"status": res.status, "run_id": res.run_id, "wall_s": round(time.time() - t0, 1)}
    result |= {"rounds": rounds, "nodes": a.nodes, "seed": a.seed, "store": str(out)}
    result |= audit(store, res.run_id, len(lines), a.nodes)
    print(json.dumps(result))
    ok = (
        res.status == "completed"
        and result["lost"] == 0
        and result["invented"] == 0
        and result["faults_as_events"] == len(lines)
        and not result["injected_without_effect"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
