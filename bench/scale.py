"""How many real SuperNodes fit on this machine: fleet start, round time, memory per node.

For each N (default 10, 30, 60): a cloud SuperLink and N client nodes (host profile,
digits, ``--rounds`` rounds of FedAvg, 1 local epoch) run with ``run_experiment`` on the
local backend. Printed per N: fleet start time (``fleet_starting`` -> ``fleet_ready``),
median round time, peak RSS and PSS per node (whole process tree, median over nodes),
the peak of the nodes' summed PSS, the machine's memory in use (drop of MemAvailable),
the SuperLink process's CPU seconds per round and its share of a core over the rounds
(sampled every second), and whether all rounds completed. Before each N the expected
memory (N x the PSS per node measured so far, or the capacity check's per-node figure
before any measurement, ``testbed/capacity.py``) is compared with MemAvailable;
an N that cannot fit is skipped (reported, not started), so the machine is never driven
out of memory. The largest N that completed every round is printed at the end.

    python bench/scale.py [--nodes 10 30 60] [--rounds 3] [--timing flower|fast] [--keep DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from bench.nodemem import PeakSampler, testbed_nodes, zygotes  # noqa: E402
from testbed.capacity import FOOTPRINTS  # noqa: E402
from testbed.reaper import processes_in  # noqa: E402
from testbed.runner import run_experiment  # noqa: E402
from testbed.spec.loader import parse_spec  # noqa: E402
from testbed.store import RunStore  # noqa: E402

FIRST_GUESS_MB = FOOTPRINTS["local"]["client"].memory_mb  # (the capacity check's, measured)
HEADROOM_MB = 2048.0  # left to the system and the SuperLink


def mem_available_mb() -> float:
    """``MemAvailable`` from ``/proc/meminfo``, MB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def spec_text(n: int, rounds: int, timing: str) -> str:
    """A cloud SuperLink and ``n`` client nodes at host speed, no link shaping."""
    return f"""\
name: scale-{n}
seed: 5
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, count: {n}}}
links: {{mode: none}}
workload:
  fl:
    rounds: {rounds}
    local_epochs: 1
    round_timeout_s: 240
    protocol_timing: {timing}
"""


class MinAvailable:
    """Lowest MemAvailable seen while running, MB (sampled every second)."""

    def __init__(self) -> None:
        self.low = mem_available_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.low = min(self.low, mem_available_mb())

    def __enter__(self) -> MinAvailable:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


class SuperLinkCPU:
    """CPU seconds (user + system) of the run's ``flower-superlink`` process, sampled
    every second with the wall clock: :meth:`between` gives the CPU it used in a window
    of the run (e.g. its rounds)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.samples: list[tuple[float, float]] = []  # (time.time(), cpu s)
        self._proc: psutil.Process | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _find(self) -> psutil.Process | None:
        for proc in processes_in(self.work):
            try:
                if any("flower-superlink" in c for c in proc.cmdline()):
                    return proc
            except psutil.Error:
                continue
        return None

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self._proc = self._proc or self._find()
                if self._proc is not None:
                    cpu = self._proc.cpu_times()
                    self.samples.append((time.time(), cpu.user + cpu.system))
            except psutil.Error:  # (it ended with the run; a restarted one is found anew)
                self._proc = None

    def between(self, t0: float, t1: float) -> float:
        """CPU seconds between the samples nearest ``t0`` and ``t1`` (nan without two)."""
        inside = [(t, c) for t, c in self.samples if t0 - 1.0 <= t <= t1 + 1.0]
        return inside[-1][1] - inside[0][1] if len(inside) >= 2 else float("nan")

    def __enter__(self) -> SuperLinkCPU:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def one(n: int, rounds: int, timing: str, work: Path) -> dict[str, Any]:
    """Run ``n`` nodes; return the measurements."""
    store = RunStore(work / "runs")
    before = mem_available_mb()
    t0 = time.time()
    sampler = PeakSampler(lambda: testbed_nodes(work), 2.0)
    sampler.shared = lambda: zygotes(work)
    with MinAvailable() as low, sampler as mem, SuperLinkCPU(work) as link:
        res = run_experiment(parse_spec(spec_text(n, rounds, timing)), store, spec_path="bench")
    events = store.events(res.run_id)
    ev = {e.kind: e.ts for e in events}
    rounds_s = [v for _r, _n, _k, v, _t in store.metrics(res.run_id, "round_duration_s")]
    starts = [e.ts for e in events if e.kind == "round_start"]
    ends = [e.ts for e in events if e.kind == "round_end"]
    window = (starts[0], ends[-1]) if starts and ends else (float("nan"),) * 2
    link_cpu = link.between(*window)
    return {
        "n": n,
        "status": res.status,
        "wall_s": time.time() - t0,
        "start_s": ev.get("fleet_ready", float("nan")) - ev.get("fleet_starting", float("nan")),
        "round_s": statistics.median(rounds_s) if rounds_s else float("nan"),
        "rounds_done": len(rounds_s),
        "rss_mb": statistics.median(mem.rss.values()) if mem.rss else float("nan"),
        "pss_mb": statistics.median(mem.pss.values()) if mem.pss else float("nan"),
        "sum_pss_mb": mem.total_pss,
        "zygote_mb": mem.shared_pss,
        "used_mb": before - low.low,
        # the SuperLink's CPU from the first round's start to the last round's end: per
        # round, and as a share of one core over that window
        "link_cpu_round_s": link_cpu / len(rounds_s) if rounds_s else float("nan"),
        "link_cores": link_cpu / (window[1] - window[0]) if rounds_s else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[10, 30, 60])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timing", choices=("flower", "fast"), default="flower")
    ap.add_argument("--keep", type=Path, default=None, help="keep each N's run folder here")
    args = ap.parse_args()
    per_node, rows, best = FIRST_GUESS_MB, [], 0
    for n in args.nodes:
        need, have = n * per_node, mem_available_mb() - HEADROOM_MB
        if need > have:
            print(
                f"N={n}: skipped, needs ~{need:.0f} MB ({per_node:.0f} MB x {n}), "
                f"{have:.0f} MB available",
                flush=True,
            )
            continue
        print(f"N={n}: starting ({args.timing} timing) ...", flush=True)
        if args.keep is not None:  # logs and store stay for a post-mortem
            (args.keep / f"n{n}").mkdir(parents=True, exist_ok=True)
            row = one(n, args.rounds, args.timing, (args.keep / f"n{n}").resolve())
        else:
            with tempfile.TemporaryDirectory() as d:
                row = one(n, args.rounds, args.timing, Path(d))
        rows.append(row)
        print(f"N={n}: {row}", flush=True)  # (kept if a later N runs out of time)
        per_node = max(row["pss_mb"], 1.0)
        if row["status"] == "completed" and row["rounds_done"] >= args.rounds:
            best = n
    cols = (
        "n",
        "status",
        "start_s",
        "round_s",
        "rss_mb",
        "pss_mb",
        "sum_pss_mb",
        "zygote_mb",
        "used_mb",
        "link_cpu_round_s",
        "link_cores",
        "wall_s",
    )
    width = {c: max(12, len(c) + 2) for c in cols}
    print("\n" + "".join(f"{c:>{width[c]}s}" for c in cols))
    for row in rows:
        print(
            "".join(
                f"{row[c]:>{width[c]}.2f}"
                if isinstance(row[c], float)
                else f"{row[c]!s:>{width[c]}s}"
                for c in cols
            )
        )
    print(f"\nlargest N that completed {args.rounds} rounds: {best}")


if __name__ == "__main__":
    main()
