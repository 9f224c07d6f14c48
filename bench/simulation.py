"""``--backend simulation`` at scale, against bare Flower's Simulation Engine, in ONE run.

1. Same app, same clients: bare Flower (``_run_simulation`` with the testbed's own
   ServerApp and ClientApp, no virtual clock, no control plane) vs ours
   (``run_experiment(..., backend="simulation")``: clock, faults engine, store).
   Wall seconds per round = gaps between the ServerApp's ``round_end`` records
   (rounds 2.., so Ray's start-up is not in it); ratio ours / bare (goal <= 1.2).
2. 1,000 clients, all sampled: wall s per round (goal <= 10 s on 2 cores).
3. 10,000 clients registered, 100 sampled (``fraction_train: 0.01``): wall s per round
   (goal <= 2 s) and peak memory of the whole run: the sum of the resident memory of
   this process and all its descendants (control plane, simulation process, Ray's GCS,
   raylet and workers), sampled every 0.5 s by :class:`TreeMemory` (goal <= 6 GB).

    python bench/simulation.py [--rounds 3] [--same-clients 100] [--scale 1000,10000]
    python bench/simulation.py --clients 10000 --sample 100 [--rounds 4]   # one case
    python bench/simulation.py --virtual 10000,100000,1000000 [--rounds 3] [--bare-max N]
                                       # virtual clients, 1,000 sampled (docs/simulation.md)
    python bench/simulation.py --calibration [--timing flower|fast]
        [--variants local,simulation,grid] [--keep DIR] [--spec protocol|links|latency]
                                                       # docs/results/calibration.md
    python bench/simulation.py --latency-sweep 0,50,100,150,250 [--mbps 20]
        [--timing fast] [--keep DIR]        # protocol time vs latency, local fleet only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.backends.simulation import SimulationBackend  # noqa: E402
from testbed.planner import make_plan  # noqa: E402
from testbed.runner import run_experiment  # noqa: E402
from testbed.simulation.calibration import replay  # noqa: E402
from testbed.simulation.clock import protocol_delay_s, startup_s  # noqa: E402
from testbed.spec.loader import parse_spec  # noqa: E402
from testbed.store import RunStore  # noqa: E402


def spec_text(clients: int, rounds: int, fraction: float, dataset: str) -> str:
    """A cross-device spec: ``clients`` edge nodes of a profile mix, mlp, one epoch."""
    frac = (
        f"\n    strategy: {{name: fedavg, params: {{fraction_train: {fraction}, "
        f"fraction_evaluate: {fraction}}}}}"
        if fraction < 1
        else ""
    )
    return f"""\
name: bench-sim-{clients}
seed: 1
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - id: phone
      tier: edge
      count: {clients}
      profile_mix: {{rpi5: 0.5, jetson-orin-nano: 0.3, host: 0.2}}
links:
  defaults:
    edge-cloud: {{bandwidth_mbps: 20, latency_ms: 30, jitter_ms: 5}}
workload:
  fl:
    rounds: {rounds}
    local_epochs: 1
    round_timeout_s: 600
    model: {{name: mlp, width: 32}}
    dataset: {dataset}{frac}
"""


def dataset_for(clients: int) -> str:
    """Digits up to 100 clients; LEAF synthetic with ~25 samples per client beyond."""
    if clients <= 100:
        return "{name: digits}"
    return f"{{name: synthetic, num_samples: {25 * clients}}}"


def per_round(telemetry: Path) -> list[float]:
    """Wall seconds between consecutive ``round_end`` records (round 2 onwards)."""
    ends = [
        r["t"]
        for r in map(json.loads, telemetry.read_text().splitlines())
        if r.get("kind") == "event" and r.get("name") == "round_end"
    ]
    return [b - a for a, b in zip(ends, ends[1:], strict=False)]


class TreeMemory:
    """Peak of the summed resident memory of this process and all its descendants, MB.

    Sampled every ``interval_s`` on a thread while used as a context manager. A page
    shared by several processes (Ray's object store, copy-on-write pages) counts once
    per process: the sum is an upper bound of the tree's physical memory.
    """

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.peak_mb = 0.0
        self.peak_procs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> float:
        """One sample: summed RSS of the tree now, MB (also updates the peak)."""
        me = psutil.Process()
        total, procs = 0, 0
        for q in [me, *me.children(recursive=True)]:
            try:
                total += q.memory_info().rss
                procs += 1
            except psutil.Error:
                pass
        mb = total / 2**20
        if mb > self.peak_mb:
            self.peak_mb, self.peak_procs = mb, procs
        return mb

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def ours(text: str, work: Path) -> dict[str, Any]:
    """The testbed on --backend simulation; per-round wall, total, peak memory."""
    store = RunStore(work / "runs")
    t0 = time.time()
    with TreeMemory() as mem:
        res = run_experiment(parse_spec(text), store, spec_path="bench", backend="simulation")
    wall = time.time() - t0
    peak = {str(m.node): m.value for m in store.metrics(res.run_id, "peak_rss_mb")}
    rounds = per_round(res.artifact_dir / "telemetry.jsonl")
    return {
        "status": res.status,
        "wall_s": wall,
        "rounds": rounds,
        "round_s": statistics.median(rounds) if rounds else float("nan"),
        "sim_peak_mb": peak.get("simulation", float("nan")),
        "tree_peak_mb": mem.peak_mb,
        "tree_procs": mem.peak_procs,
        "acc": res.summary.get("final_global_acc"),
        "artifact_dir": str(res.artifact_dir),
    }


def bare(text: str, work: Path) -> dict[str, Any]:
    """Bare Flower Simulation Engine: the same apps, run config and Ray settings."""
    exp = parse_spec(text)
    plan = make_plan(exp)
    assert exp.workload.fl is not None
    work.mkdir(parents=True, exist_ok=True)
    tel = work / "telemetry.jsonl"
    run_config = {
        "fl-spec": exp.workload.fl.model_dump_json(),
        "seed": plan.seed,
        "node-names": plan.client_names_json(),
        "telemetry-path": str(tel),
        "artifact-dir": "",
        "resume": 0,
    }
    settings = SimulationBackend(plan, work).settings(run_config) | {"bare": True}
    (work / "simulation.json").write_text(json.dumps(settings))
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(ROOT))
    t0 = time.time()
    cmd = [sys.executable, "-m", "testbed.simulation.runner", str(work / "simulation.json")]
    with open(work / "bare.log", "w") as log:
        subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    rounds = per_round(tel)
    return {"wall_s": time.time() - t0, "rounds": rounds, "round_s": statistics.median(rounds)}


#: The calibration fleet: 3 x rpi5 + 2 x Jetson Orin Nano behind their edge links; seed
#: 11 (``{name}``, the edge link's ``{mbps}`` and ``{ms}`` to fill).
FLEET = """\
name: {name}
seed: 11
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: pi, tier: edge, profile: rpi5, count: 3}}
    - {{id: jet, tier: edge, profile: jetson-orin-nano, count: 2}}
links:
  defaults:
    edge-cloud: {{bandwidth_mbps: {mbps}, latency_ms: {ms}}}
"""

#: The calibration specs' template: :data:`FLEET`, ``jet-2`` on a link of its own, a
#: straggler (``pi-2``, rounds 2-3), 5 rounds; ``{timing}`` is left for
#: ``workload.fl.protocol_timing``.
CALIBRATION_FLEET = (
    FLEET
    + """\
  nodes:
    jet-2: {{bandwidth_mbps: {jet_mbps}, latency_ms: {jet_ms}}}
workload:
  fl:
    rounds: 5
    local_epochs: {epochs}
    round_timeout_s: {timeout_s}
    protocol_timing: {{timing}}
faults:
  - {{kind: straggler, node: pi-2, at_round: 2, factor: {factor}, rounds: 2}}
"""
)

#: The first calibration spec: rounds are mostly Flower's protocol (fast links, one
#: local epoch, a light straggler).
CALIBRATION = CALIBRATION_FLEET.format(
    name="calibration", mbps=20, ms=30, jet_mbps=5, jet_ms=60, epochs=1, timeout_s=60, factor=3
)

#: A second calibration spec in which the clock's own model (device + link) is most of
#: the round, not Flower's protocol waits: slow edge links (the model's 154 kB each way
#: is 0.6-1.2 s), ten local epochs (~0.2 s of host CPU, 0.4 s on an rpi5) and a straggler
#: (pi-2, factor 6, rounds 2-3) whose stretched compute (~2.4 s) sets those rounds.
CALIBRATION_LINKS = CALIBRATION_FLEET.format(
    name="calibration-links",
    mbps=2,
    ms=40,
    jet_mbps=1,
    jet_ms=80,
    epochs=10,
    timeout_s=90,
    factor=6,
)

#: A third, held out from the runs the clock's defaults were read off: long links, one
#: of them fast and long (window-bound: 50 Mbit/s, 180 ms), the others 10 Mbit/s, 100 ms.
CALIBRATION_LATENCY = CALIBRATION_FLEET.format(
    name="calibration-latency",
    mbps=10,
    ms=100,
    jet_mbps=50,
    jet_ms=180,
    epochs=3,
    timeout_s=90,
    factor=6,
)

#: The calibration specs by name (``--spec``).
CALIBRATION_SPECS = {
    "protocol": CALIBRATION,
    "links": CALIBRATION_LINKS,
    "latency": CALIBRATION_LATENCY,
}

#: Calibration variants: the local fleet, and the simulation with the poll waits as
#: their expected value (the default) or played on Flower's poll grids.
VARIANTS = {"local": "", "simulation": "", "grid": "simulation: {poll_grid: true}\n"}


def _per_round(store: RunStore, run_id: str, metric: str) -> dict[int, float]:
    """``metric`` per round of a run."""
    return {int(m.round): m.value for m in store.metrics(run_id, metric) if m.round is not None}


#: The latency sweep's spec: :data:`FLEET`, all five clients on the edge link.
SWEEP = (
    FLEET
    + """\
workload:
  fl:
    rounds: 5
    local_epochs: 1
    round_timeout_s: 60
    protocol_timing: {timing}
"""
)


def latency_sweep(work: Path, timing: str, mbps: float, latencies: list[float]) -> str:
    """Local runs only, one per one-way latency: the protocol time (measured round less
    the clock's replayed device + link), what the protocol-on-the-link terms add in the
    replay, and the constant part left (medians over rounds 2-5; round 1's excess)."""
    store = RunStore(work / "runs")
    rows = [
        f"timing {timing}, {mbps:g} Mbit/s",
        "| latency ms | round s | protocol s | on the link s | constant s | round-1 excess s |",
        "|---|---|---|---|---|---|",
    ]
    for lat in latencies:
        name = f"latency-sweep-{mbps}-{lat}"
        exp = parse_spec(SWEEP.format(name=name, mbps=mbps, ms=lat, timing=timing))
        r = run_experiment(exp, store, spec_path="sweep", backend="local")
        assert r.status == "completed", r.summary
        m = _per_round(store, r.run_id, "round_duration_s")
        rep = replay(store, r.run_id, exp)
        link, full = rep.link_s, rep.full_s
        steady = [k for k in m if k > 1]
        const = statistics.median(m[k] - full[k] for k in steady)
        rows.append(
            f"| {lat:g} | {statistics.median(m[k] for k in steady):.2f} "
            f"| {statistics.median(m[k] - link[k] for k in steady):.2f} "
            f"| {statistics.median(full[k] - link[k] for k in steady):.2f} "
            f"| {const:.2f} | {m[1] - full[1] - const:+.2f} |"
        )
        print(rows[-1], flush=True)
    return "\n".join(rows)


def calibration(
    work: Path,
    timing: str,
    variants: tuple[str, ...] = ("local", "simulation"),
    spec: str = "protocol",
) -> str:
    """The same spec on local and simulation, same seed: a markdown table per round.

    Beside the virtual rounds, the clock replayed on the local run's own measurements
    (:func:`testbed.simulation.calibration.replay`): device + link only, and
    with the protocol-on-the-link terms but without the constant ones; the measured
    round less the latter is what ``protocol_delay_s`` (``+ startup_s`` in round 1)
    stand for.
    """
    store = RunStore(work / "runs")
    res = {}
    text = CALIBRATION_SPECS[spec].replace("{timing}", timing)
    for variant in variants:
        backend = "local" if variant == "local" else "simulation"
        t0 = time.strftime("%H:%M:%S", time.gmtime())
        r = run_experiment(
            parse_spec(text + VARIANTS[variant]), store, spec_path="cal", backend=backend
        )
        print(f"# {variant}: {t0}-{time.strftime('%H:%M:%S', time.gmtime())} UTC", flush=True)
        assert r.status == "completed", r.summary
        res[variant] = r
    if "local" not in res:
        return f"runs kept in {work}"
    sims = [v for v in variants if v != "local"]
    local = res["local"].run_id
    measured = _per_round(store, local, "round_duration_s")
    rep = replay(store, local, parse_spec(text))
    virtual = {v: _per_round(store, res[v].run_id, "virtual_round_s") for v in sims}
    rows = [
        f"spec {spec}, protocol_timing {timing}: protocol_delay_s "
        f"{protocol_delay_s(timing):.2f}, startup_s {startup_s(timing):.2f}",
        "| round | measured (local) s | "
        + "".join(f"virtual ({v}) s | error % | " for v in sims)
        + "replay: device + link s | replay: + protocol on the link s | constant part s |",
        "|---|---|" + "---|---|" * len(sims) + "---|---|---|",
    ]
    nan = float("nan")
    for r in sorted(measured):
        m = measured[r]
        cells = [f"| {r} | {m:.2f} |"]
        for v in sims:
            x = virtual[v].get(r, nan)
            cells.append(f" {x:.2f} | {100 * (x - m) / m:+.1f} |")
        full = rep.full_s.get(r, nan)
        cells.append(f" {rep.link_s.get(r, nan):.2f} | {full:.2f} | {m - full:.2f} |")
        rows.append("".join(cells))
    acc = ", ".join(f"{v} {res[v].summary.get('final_global_acc'):.4f}" for v in variants)
    rows.append(f"\nfinal global accuracy: {acc}")
    return "\n".join(rows)


def scale_case(clients: int, sample: int, rounds: int, work: Path) -> None:
    """``clients`` registered, ``sample`` of them sampled per round: print the figures."""
    frac = min(1.0, sample / clients)
    text = spec_text(clients, rounds, frac, dataset_for(clients))
    r = ours(text, work / f"scale-{clients}-{sample}")
    print(
        f"{clients} clients, {int(clients * frac)} sampled: {r['round_s']:.2f} s/round "
        f"(rounds {[round(x, 2) for x in r['rounds']]}, wall {r['wall_s']:.1f} s, "
        f"{r['status']}); peak memory of the whole tree {r['tree_peak_mb']:.0f} MB "
        f"({r['tree_procs']} processes; simulation tree as the control plane sampled it "
        f"{r['sim_peak_mb']:.0f} MB)",
        flush=True,
    )


#: The virtual-client scale spec (issue 30's acceptance: rpi5 phones, two synthetic
#: samples per client, mlp, 1,000 sampled per round: 0.1 % of a million);
#: ``{clients}``, ``{samples}``, ``{fraction}``, ``{rounds}``.
VIRTUAL = """\
name: virtual-{clients}
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: phone, tier: edge, profile: rpi5, count: {clients}}}
workload:
  fl:
    dataset: {{name: synthetic, num_samples: {samples}}}
    model: {{name: mlp}}
    strategy:
      name: fedavg
      params: {{fraction_train: {fraction}, fraction_evaluate: {fraction}}}
    rounds: {rounds}
"""


def _events(telemetry: Path, *names: str) -> list[tuple[str, int | None, float]]:
    """(name, round, time) of the ServerApp's events named ``names``, in order."""
    out = []
    for r in map(json.loads, telemetry.read_text().splitlines()):
        if r.get("kind") == "event" and r.get("name") in names:
            out.append((str(r["name"]), r.get("round"), float(r["t"])))
    return out


def startup(t0: float, telemetry: Path) -> dict[str, float]:
    """Start-up of a run begun at ``t0`` (epoch s): until round 1 starts, plus round 1's
    excess over the later rounds' median (Ray and its workers starting, the workers'
    first data load: the Simulation Engine starts them beside the first round).
    Round times are the gaps between ``round_start`` and ``round_end`` of each round."""
    ev = _events(telemetry, "round_start", "round_end")
    starts = {r: t for n, r, t in ev if n == "round_start" and r is not None}
    ends = {r: t for n, r, t in ev if n == "round_end" and r is not None}
    rounds = {r: ends[r] - starts[r] for r in sorted(ends) if r in starts}
    later = [v for r, v in rounds.items() if r > 1]
    steady = statistics.median(later) if later else float("nan")
    first = starts.get(1, float("nan")) - t0
    excess = max(0.0, rounds.get(1, float("nan")) - steady) if later else 0.0
    return {
        "to_round1_s": first,
        "round1_s": rounds.get(1, float("nan")),
        "round_s": steady,
        "startup_s": first + excess,
    }


def virtual_case(clients: int, rounds: int, work: Path, bare_too: bool) -> None:
    """``clients`` registered, 1,000 sampled per round (:data:`VIRTUAL`): ours, and bare
    Flower's Simulation Engine on the same apps and settings when ``bare_too``. Prints
    start-up, round time and the whole tree's peak memory."""
    frac = min(1.0, 1000 / clients)
    text = VIRTUAL.format(clients=clients, rounds=rounds, samples=2 * clients, fraction=frac)
    t0 = time.time()
    r = ours(text, work / f"virtual-{clients}")
    s = startup(t0, Path(r["artifact_dir"]) / "telemetry.jsonl")
    print(
        f"ours, {clients} registered / {round(clients * frac)} sampled: {r['status']}, "
        f"start-up {s['startup_s']:.1f} s (round 1 starts at {s['to_round1_s']:.1f} s, "
        f"round 1 {s['round1_s']:.2f} s), round {s['round_s']:.2f} s, wall "
        f"{r['wall_s']:.1f} s, peak memory of the whole tree {r['tree_peak_mb']:.0f} MB "
        f"({r['tree_procs']} processes)",
        flush=True,
    )
    if not bare_too:
        return
    t0 = time.time()
    with TreeMemory() as mem:
        b = bare(text, work / f"bare-{clients}")
    s = startup(t0, work / f"bare-{clients}" / "telemetry.jsonl")
    print(
        f"bare Flower, {clients} registered: start-up {s['startup_s']:.1f} s (round 1 "
        f"starts at {s['to_round1_s']:.1f} s, round 1 {s['round1_s']:.2f} s), round "
        f"{s['round_s']:.2f} s, wall {b['wall_s']:.1f} s, peak memory of the whole tree "
        f"{mem.peak_mb:.0f} MB",
        flush=True,
    )


def same_app(n: int, rounds: int, work: Path) -> None:
    """Bare Flower vs ours, the same app and clients: print the ratio."""
    text = spec_text(n, rounds + 1, 1.0, dataset_for(n))
    b = bare(text, work / "bare")
    print(f"bare: {b}", flush=True)
    o = ours(text, work / "ours")
    print(
        f"same app, {n} clients, {rounds + 1} rounds: bare {b['round_s']:.2f} s/round "
        f"(wall {b['wall_s']:.1f} s), ours {o['round_s']:.2f} s/round (wall "
        f"{o['wall_s']:.1f} s); ratio {o['round_s'] / b['round_s']:.2f} (goal <= 1.2)",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--same-clients", type=int, default=100, help="0: skip bare vs ours")
    ap.add_argument("--scale", default="1000,10000", help="client counts (>1000: 100 sampled)")
    ap.add_argument("--clients", type=int, help="only this case: clients registered ...")
    ap.add_argument("--sample", type=int, default=100, help="... and sampled per round")
    ap.add_argument(
        "--virtual",
        metavar="N,N,...",
        help="only virtual-client scale: N registered, 1,000 sampled (issue 30's spec)",
    )
    ap.add_argument(
        "--bare-max", type=int, default=0, help="--virtual: bare Flower too, up to this N"
    )
    ap.add_argument("--calibration", action="store_true", help="only the calibration table")
    ap.add_argument("--timing", default="flower", help="calibration: workload.fl.protocol_timing")
    ap.add_argument(
        "--variants", default="local,simulation", help=f"calibration: of {sorted(VARIANTS)}"
    )
    ap.add_argument("--keep", type=Path, help="calibration: keep the runs in this folder")
    ap.add_argument(
        "--latency-sweep",
        metavar="MS,MS,...",
        help="only a latency sweep on the local fleet (docs/results/calibration.md)",
    )
    ap.add_argument("--mbps", type=float, default=20.0, help="latency sweep: link rate")
    ap.add_argument(
        "--spec",
        default="protocol",
        choices=sorted(CALIBRATION_SPECS),
        help="calibration: protocol (protocol-bound rounds), links (device + link bound) "
        "or latency (long links, held out from the defaults' runs)",
    )
    args = ap.parse_args()
    print(
        f"# bench/simulation.py  load(1 min) at start {os.getloadavg()[0]:.2f}, "
        f"{os.cpu_count()} CPUs",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        work = Path(tmp)
        if args.virtual:
            for n in (int(x) for x in args.virtual.split(",") if x):
                virtual_case(n, args.rounds, work, n <= args.bare_max)
        elif args.latency_sweep:
            lats = [float(x) for x in args.latency_sweep.split(",")]
            print(latency_sweep(args.keep or work, args.timing, args.mbps, lats))
        elif args.calibration:
            variants = tuple(args.variants.split(","))
            print(calibration(args.keep or work, args.timing, variants, args.spec))
        elif args.clients:
            scale_case(args.clients, args.sample, args.rounds, work)
        else:
            if args.same_clients:
                same_app(args.same_clients, args.rounds, work)
            for clients in (int(x) for x in args.scale.split(",") if x):
                scale_case(clients, clients if clients <= 1000 else 100, args.rounds, work)
    print(f"# load(1 min) at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
