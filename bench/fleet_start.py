"""How long a local fleet takes to come up: started, warm, and registered with the SuperLink.

Starts the plan of a spec (experiments/quickstart.yaml unless --spec) on the local
backend, without submitting a run, and prints, from the call to ``start``: when it
returned (SuperLink listening, every SuperNode's Runtime API listening, every warm
executor warmed up) and when every SuperNode had registered with the SuperLink (its
``SuperNode ID`` log line). Then stops the fleet. ``--repeat`` starts it several times.

    python bench/fleet_start.py [--spec experiments/quickstart.yaml] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.backends.local import LocalBackend  # noqa: E402
from testbed.planner import make_plan  # noqa: E402
from testbed.spec.loader import load_spec  # noqa: E402


def registered(backend: LocalBackend) -> int:
    """How many of the backend's client nodes logged their SuperNode ID."""
    return len(set(backend.node_ids().values()))


def one(spec: Path, work: Path) -> tuple[float, float]:
    """``(started_s, registered_s)`` of one fleet start."""
    plan = make_plan(load_spec(spec))
    backend = LocalBackend(plan, work)
    t0 = time.perf_counter()
    try:
        backend.start()
        started = time.perf_counter() - t0
        while registered(backend) < len(plan.clients):
            if time.perf_counter() - t0 > 120:
                raise RuntimeError("nodes did not register within 120 s")
            time.sleep(0.02)
        return started, time.perf_counter() - t0
    finally:
        backend.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "experiments" / "quickstart.yaml")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as d:
            started, reg = one(args.spec, Path(d))
        rows.append((started, reg))
        print(f"start {i + 1}: started {started:.2f} s, all registered {reg:.2f} s", flush=True)
    print(
        f"median: started {statistics.median(r[0] for r in rows):.2f} s, "
        f"registered {statistics.median(r[1] for r in rows):.2f} s"
    )


if __name__ == "__main__":
    main()
