"""The docker backend measured on this machine (issue 13): fleet start time, round time
docker / local in the same run, and memory per node container vs the local backend.

Needs an engine at DOCKER_HOST holding the image (``make test-docker`` builds both).

- ``start N``: time from nothing to N client containers (plus the SuperLink's) all
  listening (``DockerBackend.start``, cold executor: no warm-up import, so the figure is
  the engine's and the nodes' start, not torch's import), then to all removed.
- ``rounds``: the quickstart (or ``--spec``) run on ``local`` then on ``docker``, back to
  back; median of the ServerApp's ``round_duration_s`` in each, their ratio (goal
  <= 1.10), and each client node's peak memory (local: process tree RSS; docker: the
  container's memory in ``docker stats``).

- ``fleet N``: the largest-fleet probe: one FL round (warm executors, shaping proxies)
  with N client containers; the round's status per node, the fleet's start time
  against its start-up budget (``start_timeout_s``), wall time, memory per container
  (``docker stats``) and the host's available memory.

    python bench/docker_fleet.py start 4 16 32
    python bench/docker_fleet.py rounds [--spec experiments/quickstart.yaml]
    python bench/docker_fleet.py fleet 16 32

Run it against the private engine of ``make test-docker`` with
``bash docker/with-engine.sh python bench/docker_fleet.py ...`` (root).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.backends.docker import DockerBackend, connect, remove_containers  # noqa: E402
from testbed.backends.docker_net import start_timeout_s  # noqa: E402
from testbed.planner import make_plan  # noqa: E402
from testbed.runner import run_experiment  # noqa: E402
from testbed.spec.loader import load_spec, parse_spec  # noqa: E402
from testbed.store import RunStore  # noqa: E402

FLEET = """\
name: bench-docker-start
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, profile: {{cpu_cores: 1, memory_mb: 1024}}, count: {n}}}
workload:
  fl: {{rounds: 1}}
links: {{mode: none}}
"""


def load() -> str:
    """The machine's load average (1, 5, 15 min) and CPU count, as a label."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}/{fifteen:.1f} on {os.cpu_count()} CPUs"


def available_mb() -> float:
    """The host's available memory (``MemAvailable``), MB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fleet_start(n: int, work: Path) -> tuple[float, float]:
    """Seconds to start ``n`` client containers (and the SuperLink's) until all listen,
    and seconds to remove them all."""
    plan = make_plan(parse_spec(FLEET.format(n=n)))
    be = DockerBackend(plan, work / f"start-{n}", warm=False)
    t0 = time.monotonic()
    try:
        be.start(timeout_s=600)
        up = time.monotonic() - t0
    finally:
        t1 = time.monotonic()
        be.stop()
        down = time.monotonic() - t1
    return up, down


def cmd_start(sizes: list[int]) -> None:
    remove_containers(connect())
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            print(f"[{load()}] starting {n} node containers ...", flush=True)
            up, down = fleet_start(n, Path(tmp))
            print(
                f"fleet of {n} node containers (+1 SuperLink): up {up:.1f} s, "
                f"removed {down:.1f} s  [{load()}]",
                flush=True,
            )


def one_run(spec: Path, backend: str, work: Path) -> dict[str, object]:
    """Run ``spec`` on ``backend``; its median round time, wall time and peak memory."""
    store = RunStore(work / backend)
    res = run_experiment(load_spec(spec), store, backend=backend)
    dur = [v for _r, _n, _k, v, _t in store.metrics(res.run_id, "round_duration_s")]
    peak = {n: v for _r, n, _k, v, _t in store.metrics(res.run_id, "peak_rss_mb")}
    return {
        "status": res.status,
        "round_s": statistics.median(dur) if dur else float("nan"),
        "wall_s": res.wall_s,
        "peak": peak,
    }


def cmd_rounds(spec: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        got = {}
        for backend in ("local", "docker"):
            print(f"[{load()}] {spec} on {backend} ...", flush=True)
            got[backend] = one_run(spec, backend, Path(tmp))
            print(f"  {backend}: {got[backend]}  [{load()}]", flush=True)
    loc, dock = got["local"], got["docker"]
    ratio = float(dock["round_s"]) / float(loc["round_s"])  # type: ignore[arg-type]
    print(
        f"median round: local {loc['round_s']:.2f} s, docker {dock['round_s']:.2f} s, "
        f"ratio docker/local {ratio:.2f} (goal <= 1.10)"
    )
    print(f"wall: local {loc['wall_s']:.1f} s, docker {dock['wall_s']:.1f} s")
    lp, dp = loc["peak"], dock["peak"]
    assert isinstance(lp, dict) and isinstance(dp, dict)
    for node in sorted(lp):
        print(
            f"  peak memory {node}: local {lp[node]:.0f} MB (process tree RSS), "
            f"docker {dp.get(node, float('nan')):.0f} MB (docker stats)"
        )


ROUND = """\
name: bench-docker-fleet
seed: 1
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, profile: {{cpu_cores: 1, memory_mb: 1024}}, count: {n}}}
workload:
  fl: {{rounds: 1, local_epochs: 1, round_timeout_s: {timeout}}}
"""


def cmd_fleet(sizes: list[int]) -> None:
    """One round with each fleet size: how many nodes completed it, wall, memory."""
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            print(
                f"[{load()}] one round with {n} node containers "
                f"({available_mb():.0f} MB available) ...",
                flush=True,
            )
            store = RunStore(Path(tmp) / f"fleet-{n}")
            t0 = time.monotonic()
            try:
                spec = parse_spec(ROUND.format(n=n, timeout=60 + 5 * n))
                res = run_experiment(spec, store, backend="docker")
            except (RuntimeError, OSError) as e:  # (TimeoutError is an OSError)
                print(f"  {n} node containers: failed ({e})  [{load()}]", flush=True)
                continue
            wall = time.monotonic() - t0
            ts = {e.kind: e.ts for e in store.events(res.run_id)}
            up = ts["fleet_ready"] - ts["fleet_starting"] if "fleet_ready" in ts else None
            started = f"fleet up in {up:.1f} s" if up is not None else "fleet never ready"
            st = [s for _r, _n, s, _w in store.round_status(res.run_id)]
            peak = [v or 0 for _r, nd, _k, v, _t in store.metrics(res.run_id, "peak_rss_mb")
                    if nd != "cloud"]  # fmt: skip
            mem = f"{min(peak):.0f}-{max(peak):.0f} MB" if peak else "?"
            if res.status != "completed":
                print(f"  reason: {res.summary.get('reason', '?')}", flush=True)
            print(
                f"  {n} node containers: run {res.status}, round 1 completed by "
                f"{st.count('completed')}/{n}, {started} (budget "
                f"{start_timeout_s(n):.0f} s), wall {wall:.1f} s, memory per node container "
                f"{mem} (docker stats), {available_mb():.0f} MB available after  [{load()}]",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("start", help="fleet start time for N node containers")
    st.add_argument("sizes", type=int, nargs="+")
    rd = sub.add_parser("rounds", help="round time and memory, docker vs local")
    rd.add_argument("--spec", type=Path, default=ROOT / "experiments" / "quickstart.yaml")
    fl = sub.add_parser("fleet", help="one FL round with N node containers")
    fl.add_argument("sizes", type=int, nargs="+")
    args = ap.parse_args()
    if args.cmd == "start":
        cmd_start(args.sizes)
    elif args.cmd == "fleet":
        cmd_fleet(args.sizes)
    else:
        cmd_rounds(args.spec)


if __name__ == "__main__":
    main()
