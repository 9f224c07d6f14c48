"""One engine vs two engines in a swarm (issue 27), measured in the same run.

For each fleet size N: a generated spec (the server + N client nodes, ``rpi5``, half of
them ``placement: {engine: a}`` and half ``{engine: b}``, ``protocol_timing: fast``,
3 rounds) runs on ``--backend docker`` (engine A alone: placements ignored) and then
on ``--backend swarm`` (A and B), back to back. Printed: the fleet's ready time (the
``fleet_starting`` to ``fleet_ready`` events: every SuperNode registered; less the
image's load into engine B when the testbed had to load it, printed apart), the median
round time (``round_duration_s``), the statuses, and swarm/docker ratios, with the
machine's load. Both engines run on this host, so the swarm's cost is its own
(services, task scheduling, a second engine), not a network's.

Needs two engines in one swarm with labels ``engine=a`` (manager, ``DOCKER_HOST``) and
``engine=b`` (``TESTBED_SWARM_ENGINES``): run it through docker/swarm.sh, e.g.

    SWARM_CMD="python bench/swarm.py 4 16 32" make test-swarm
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.runner import run_experiment  # noqa: E402
from testbed.spec.loader import parse_spec  # noqa: E402
from testbed.store import RunStore  # noqa: E402

SPEC = """\
name: swarm-bench-{n}
seed: 1
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: a, tier: edge, profile: rpi5, count: {half_a}, placement: {{engine: a}}}}
    - {{id: b, tier: edge, profile: rpi5, count: {half_b}, placement: {{engine: b}}}}
workload:
  fl: {{rounds: 3, protocol_timing: fast, round_timeout_s: 120}}
"""


BACKENDS = ("docker", "swarm")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def measure(n: int, backend: str, work: Path) -> dict[str, object]:
    """One run of the N-node spec on ``backend``: ready time, median round, statuses."""
    spec = SPEC.format(n=n, half_a=max(1, n // 2), half_b=max(1, n - n // 2))
    store = RunStore(work / f"{backend}-{n}")
    try:
        res = run_experiment(parse_spec(spec), store, backend=backend)
    except RuntimeError as e:  # the fleet did not start: a figure too (the limit)
        print(f"N={n} {backend}: did not start: {e}", flush=True)
        return {"status": "did not start", "reason": str(e).splitlines()[0]}
    if res.status == "interrupted":  # (Ctrl-C: the run recorded it; stop the benchmark)
        raise KeyboardInterrupt
    events = store.events(res.run_id)
    ts = {e.kind: e.ts for e in events}
    ready = next(json.loads(e.data) for e in events if e.kind == "fleet_ready")
    loads = sum((ready.get("image_loads") or {}).values())  # (B lacked the image: loaded)
    rounds = [
        m.value
        for m in store.metrics(res.run_id, "round_duration_s")
        if m.value is not None and m.node is None
    ]
    statuses = Counter(s for _r, _n, s, _w in store.round_status(res.run_id))
    why = {}
    if res.status != "completed":  # (the run folder goes with the temporary directory)
        why = {"reason": res.summary.get("reason"), "cause": res.summary.get("cause")}
    # SuperNodes the ServerApp found online before round 1 (Flower's sampling pool)
    connected = next((json.loads(e.data) for e in events if e.kind == "fleet_connected"), {})
    return {
        **why,
        "status": res.status,
        "connected": connected.get("connected"),
        "ready_s": ts["fleet_ready"] - ts["fleet_starting"] - loads,
        "image_load_s": loads,
        "round_s": statistics.median(rounds) if rounds else float("nan"),
        "statuses": dict(statuses),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", type=int, nargs="+", help="client nodes (split over A and B)")
    ap.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS),
                    help="run only these (e.g. swarm: its limit without the one-engine "
                    "run first)")  # fmt: skip
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="swarm-bench-") as tmp:
        for n in args.sizes:
            got = {b: measure(n, b, Path(tmp)) for b in args.backends}
            rows.append((n, got))
            print(f"N={n}: {got} ({load()})", flush=True)
    print(f"\nmeasured {load()}; both engines on this host")
    if len(args.backends) == 1:
        return  # (no ratios: the runs above are the figures)
    print("| clients | ready docker s | ready swarm s | ratio | round docker s | round swarm s"
          " | ratio | swarm statuses |")
    print("|---|---|---|---|---|---|---|---|")
    for n, got in rows:
        d, s = got["docker"], got["swarm"]
        if "ready_s" not in d or "ready_s" not in s:
            print(f"| {n} | {d['status']} | {s['status']} | | | | | |")
            continue
        print(
            f"| {n} | {d['ready_s']:.1f} | {s['ready_s']:.1f} | "
            f"{s['ready_s'] / d['ready_s']:.2f} | {d['round_s']:.1f} | {s['round_s']:.1f} | "
            f"{s['round_s'] / d['round_s']:.2f} | {s['statuses']} ({s['status']}) |"
        )


if __name__ == "__main__":
    main()
