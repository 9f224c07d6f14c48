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
- ``ready N``: the fleet's ready time (issue 26) on ``local`` and on ``docker`` back to
  back, same generated spec (N client nodes + the server, warm executors, ``links.mode:
  proxy``, fl): seconds from ``start()`` called to returned (every SuperNode
  registered), as a run starts its fleet; their ratio docker/local (goal <= 1.5). The
  backend that goes first alternates from one start to the next (local first at the
  first). ``--backends local`` measures one backend only.
- ``continuum``: experiments/continuum.yaml, shortened (:data:`CONTINUUM_SETS`), run
  by ``python -m testbed run`` on ``local`` then on ``docker``, each into a store of
  its own; wall time and each workload's headline figures side by side, read from the
  stores' run summaries. ``--read LOCAL_STORE[:RUN] DOCKER_STORE[:RUN]`` prints the
  comparison of runs already made (default: each store's latest run) without running.
- ``functions``: experiments/gaia.yaml's functions under the ``gaia`` policy alone (its
  sweep over policies dropped), ``--duration`` s of load, seeds 0..``--seeds``-1, on
  ``local`` then on ``docker``; per function SLO attainment, p95, promotions and
  demotions (mean ± sample std over the seeds, and each seed), and over all requests.
  ``--read LOCAL_STORE DOCKER_STORE`` prints stores already made.
- ``offload``: experiments/semantic_offload.yaml (two UEs on mmWave links, a fog;
  ``--requests`` inferences per device and scheme, ``--train-steps`` per scheme), seeds
  0..``--seeds``-1, on ``local`` then on ``docker``; per scheme the task accuracy (mean
  of the K tasks) and an inference's end-to-end time (mean ± sample std over the seeds,
  each seed, and the gap of the two backends' means). ``--read`` as for ``functions``.

    python bench/docker_fleet.py start 4 16 32
    python bench/docker_fleet.py rounds [--spec experiments/quickstart.yaml]
    python bench/docker_fleet.py fleet 16 32
    python bench/docker_fleet.py ready 4 16 32 [--repeat 1] [--backends local docker]
    python bench/docker_fleet.py continuum [--out DIR]
    python bench/docker_fleet.py functions [--seeds 3] [--duration 40] [--out DIR]
    python bench/docker_fleet.py offload [--seeds 3] [--requests 40] [--out DIR]

Run it against the private engine of ``make test-docker`` with
``bash docker/with-engine.sh python bench/docker_fleet.py ...`` (root).
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.backends import preflight  # noqa: E402
from testbed.backends.docker import DockerBackend, connect, remove_containers  # noqa: E402
from testbed.backends.docker_net import start_timeout_s  # noqa: E402
from testbed.backends.local import LocalBackend  # noqa: E402
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


def loadavg() -> str:
    """The machine's load average, 1/5/15 min."""
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


def load() -> str:
    """The machine's load average (1, 5, 15 min) and CPU count, as a label."""
    return f"load {loadavg()} on {os.cpu_count()} CPUs"


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


READY = """\
name: bench-docker-ready
seed: 1
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, profile: {{cpu_cores: 1, memory_mb: 1024}}, count: {n}}}
links:
  mode: proxy
  defaults:
    edge-cloud: {{bandwidth_mbps: 100, latency_ms: 20}}
workload:
  fl: {{rounds: 1}}
"""
READY_GOAL = 1.5  # docker / local ready time (issue 26)


def ready_once(backend: str, n: int, work: Path) -> tuple[float, int]:
    """Start the :data:`READY` fleet of ``n`` client nodes on ``backend`` as a run does
    (its preflight, its class with the run's default options: warm executors), then stop
    it; return the seconds ``start()`` took (it returns once every SuperNode registered
    or its wait ran out) and how many client nodes had registered by then."""
    exp = parse_spec(READY.format(n=n))
    cls = preflight(backend, [exp])  # (the engine and image too, for docker)
    run_dir = work / f"ready-{backend}-{n}-{secrets.token_hex(3)}"  # (names its containers)
    run_dir.mkdir(parents=True)  # (as the runner makes it before the backend starts)
    be = cls(make_plan(exp), run_dir)
    assert isinstance(be, LocalBackend)  # (docker's is one too)
    t0 = time.monotonic()
    try:
        be.start()
        up = time.monotonic() - t0
        return up, len(be.registered())
    finally:
        be.stop()


def ready_order(trial: int, backends: list[str]) -> list[str]:
    """The backends in the order start ``trial`` (0, 1, ...) measures them: as given at
    even trials, reversed at odd ones (neither always starts on a quiet machine)."""
    return list(backends) if trial % 2 == 0 else list(reversed(backends))


def cmd_ready(sizes: list[int], backends: list[str], repeat: int) -> None:
    """Per fleet size, the ready time on each backend (median of ``repeat`` starts)
    and the ratio docker/local; then one table of them all."""
    rows = []
    trial = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            before = loadavg()
            got: dict[str, list[float]] = {b: [] for b in backends}
            for _ in range(repeat):
                order = ready_order(trial, backends)
                trial += 1
                print(f"[{load()}] {n} client nodes, {' then '.join(order)} ...", flush=True)
                for b in order:
                    try:
                        up, reg = ready_once(b, n, Path(tmp))
                    except Exception as e:  # (a fleet that never gets ready is a result)
                        print(f"  {b}: failed to start ({e})  [{load()}]", flush=True)
                        continue
                    got[b].append(up)
                    print(f"  {b}: ready in {up:.2f} s, {reg}/{n} registered  [{load()}]",
                          flush=True)  # fmt: skip
            med = {b: statistics.median(v) if v else float("nan") for b, v in got.items()}
            rows.append((n, med, before, loadavg()))
    print(f"\nready time, measured (median of {repeat}; start() called to returned):")
    print("| client nodes | " + " | ".join(f"{b} s" for b in backends)
          + " | docker/local | load (1/5/15 min) before -> after |")  # fmt: skip
    print("|---" * (len(backends) + 3) + "|")
    for n, med, before, after in rows:
        ratio = med["docker"] / med["local"] if {"docker", "local"} <= set(med) else None
        ratio_s = f"{ratio:.2f} (goal <= {READY_GOAL})" if ratio is not None else "-"
        times = " | ".join(f"{med[b]:.2f}" for b in backends)
        print(f"| {n} | {times} | {ratio_s} | {before} -> {after} |")


CONTINUUM = ROOT / "experiments" / "continuum.yaml"
#: The shortened continuum run (about 1.5 min of workload instead of 3-4).
CONTINUUM_SETS = (
    "workload.fl.rounds=3",
    "workload.functions.duration_s=40",
    "workload.semantic_offload.requests=60",
    "workload.semantic_offload.model.quick_train_steps=60",
)
CONTINUUM_ARGS = tuple(a for s in CONTINUUM_SETS for a in ("--set", s))
MEASURED = "measured"
Figures = dict[str, tuple[str, Any]]  # figure -> (how it was obtained, value)


def run_cli(
    backend: str, out: Path, spec: Path = CONTINUUM, args: Sequence[str] = CONTINUUM_ARGS
) -> tuple[float, int]:
    """``python -m testbed run`` ``spec`` (default: the shortened continuum spec) with
    ``args`` on ``backend`` into the store ``out`` (its output in
    ``out/testbed-run.log``); its wall time and exit code."""
    cmd = [sys.executable, "-m", "testbed", "run", str(spec), "--backend", backend,
           "--out", str(out), *args]  # fmt: skip
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(out / "testbed-run.log", "w") as log:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    return time.monotonic() - t0, rc


def pick_run(where: str) -> tuple[RunStore, str]:
    """The store and run named by ``STORE[:RUN]`` (a run id or unique prefix; default:
    the store's latest run)."""
    root, _, run = where.partition(":")
    store = RunStore(root)
    if run:
        return store, store.run(run).run_id
    runs = store.runs()
    if not runs:
        raise LookupError(f"{root}: no run in this store")
    return store, runs[-1].run_id


def run_figures(store: RunStore, run_id: str) -> Figures:
    """The run's status, wall time (its summary's ``wall_s``) and fleet start time
    (``fleet_starting`` to ``fleet_ready``), then each workload's headline figures."""
    row = store.run(run_id)
    summary = row.summary_dict
    ts: dict[str, float] = {}
    for e in store.events(run_id):
        ts.setdefault(e.kind, e.ts)
    start, ready = ts.get("fleet_starting"), ts.get("fleet_ready")
    why = f": {summary['reason'][:80]}" if "reason" in summary else ""
    out: Figures = {
        "run": ("", f"{run_id} ({row.backend})"),
        "status": ("", row.status + why),
        "wall, the run's own (s)": (MEASURED, summary.get("wall_s")),
        "fleet start -> ready (s)": (MEASURED, ready - start if start and ready else None),
    }
    wl = summary.get("workloads", {})  # (a run of one workload: its figures at the top)
    out.update(fl_figures(wl.get("fl", summary if "final_global_acc" in summary else {})))
    out.update(functions_figures(wl.get("functions", {})))
    out.update(offload_figures(wl.get("semantic_offload", {})))
    return out


def fl_figures(fl: dict[str, Any]) -> Figures:
    """FL: final global accuracy, median round time, (round, node) pairs completed."""
    if not fl:
        return {}
    dur = list(fl.get("round_duration_s", {}).values())
    st = [s for rounds in fl.get("node_status", {}).values() for s in rounds.values()]
    return {
        "fl: final_global_acc": (MEASURED, fl.get("final_global_acc")),
        "fl: median round time (s)": (MEASURED, statistics.median(dur) if dur else None),
        "fl: (round, node) completed": (MEASURED, f"{st.count('completed')}/{len(st)}"),
    }


def functions_figures(fn: dict[str, Any]) -> Figures:
    """Functions: per function, SLO attainment, p95 and requests (latency: measured
    network time plus the node's device time, as its ``timing`` tag says), and where it
    ran; then the requests answered, failed and unanswered."""
    out: Figures = {}
    for name, f in fn.get("functions", {}).items():
        how = f"{MEASURED} (device time: {', '.join(f.get('timing', [])) or '?'})"
        viol = f.get("slo_violation_pct")
        met = None if viol is None else 100.0 - viol
        where = f"{f.get('node')}, {f.get('start_backend')} -> {f.get('end_backend')}"
        out[f"functions {name}: SLO {f.get('slo_ms')} ms attained (%)"] = (how, met)
        out[f"functions {name}: p95 (ms)"] = (how, f.get("p95_ms"))
        out[f"functions {name}: requests (errors)"] = (
            MEASURED,
            f"{f.get('requests')} ({f.get('errors')})",
        )
        out[f"functions {name}: node, backend start -> end"] = ("", where)
    if fn:
        keys = ("requests_ok", "requests_failed", "requests_unanswered")
        counts = " / ".join(str(fn.get(k)) for k in keys)
        out["functions: requests ok / failed / unanswered"] = (MEASURED, counts)
    return out


def offload_figures(so: dict[str, Any]) -> Figures:
    """Semantic offload: per scheme, the tasks' accuracy (mean, and each) and the
    end-to-end time of an inference (device times stretched), answers."""
    out: Figures = {}
    if so:
        out["semantic_offload: status"] = ("", so.get("status"))
    acc_how = so.get("kinds", {}).get("accuracy", MEASURED)
    for scheme, r in so.get("schemes", {}).items():
        acc, e2e = r.get("accuracy", {}), r.get("e2e_s")
        head = f"semantic_offload {scheme}"
        mean = statistics.mean(acc.values()) if acc else None
        out[f"{head}: accuracy, mean of tasks"] = (acc_how, mean)
        out[f"{head}: accuracy per task"] = (
            acc_how,
            ", ".join(f"{t} {a:.3f}" for t, a in acc.items()),
        )
        e2e_ms = None if e2e is None else 1000 * e2e
        out[f"{head}: e2e (ms)"] = (f"{MEASURED} (device times stretched)", e2e_ms)
        out[f"{head}: answers"] = (MEASURED, r.get("answers"))
    return out


def cell(v: Any) -> str:
    """A figure as a markdown table cell."""
    if v is None:
        return "-"
    text = f"{v:.4g}" if isinstance(v, float) else str(v)
    return " ".join(text.split()).replace("|", "\\|")


def time_ratio(key: str, local: Any, docker: Any) -> str:
    """docker / local of a time (a figure in s or ms), else ``-``."""
    timed = key.endswith(("(s)", "(ms)"))
    if timed and isinstance(local, float) and isinstance(docker, float) and local:
        return f"{docker / local:.2f}"
    return "-"


def side_by_side(local: Figures, docker: Figures) -> str:
    """A markdown table of both runs' figures (those of either), with the ratio
    docker/local of the times."""
    lines = ["| figure | how | local | docker | docker/local |", "|---|---|---|---|---|"]
    for key in dict.fromkeys([*local, *docker]):
        how = local.get(key, docker.get(key, ("", None)))[0]
        lv, dv = local.get(key, ("", None))[1], docker.get(key, ("", None))[1]
        ratio = time_ratio(key, lv, dv)
        lines.append(f"| {key} | {how} | {cell(lv)} | {cell(dv)} | {ratio} |")
    return "\n".join(lines)


def cmd_continuum(out: Path | None, read: list[str] | None) -> None:
    """Run the shortened continuum spec on local then docker (or read runs already
    made: ``read``) and print their figures side by side."""
    figs: dict[str, Figures] = {}
    if read:
        for backend, where in zip(("local", "docker"), read, strict=True):
            figs[backend] = run_figures(*pick_run(where))
        print(side_by_side(figs["local"], figs["docker"]))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = out or Path(tmp)
        for backend in ("local", "docker"):
            print(f"[{load()}] continuum (shortened) on {backend} ...", flush=True)
            before = loadavg()
            wall, rc = run_cli(backend, root / backend)
            print(f"  {backend}: exit {rc}, {wall:.1f} s  [{load()}]; its output: "
                  f"{root / backend / 'testbed-run.log'}", flush=True)  # fmt: skip
            figs[backend] = {
                "load (1/5/15 min) before -> after": ("", f"{before} -> {loadavg()}"),
                "wall, `testbed run` process (s)": (MEASURED, wall),
            }
            try:
                figs[backend].update(run_figures(*pick_run(str(root / backend))))
            except LookupError as e:  # (refused before it was recorded: see its output)
                figs[backend]["status"] = ("", f"no run recorded, exit {rc} ({e})")
        print(side_by_side(figs["local"], figs["docker"]))


GAIA = ROOT / "experiments" / "gaia.yaml"


def gaia_spec(seeds: int, duration_s: float) -> str:
    """experiments/gaia.yaml under the ``gaia`` policy alone, ``seeds`` repetitions."""
    import yaml

    raw = yaml.safe_load(GAIA.read_text())
    raw.pop("sweep", None)
    raw["name"], raw["repetitions"] = "gaia-parity", seeds
    raw["workload"]["functions"].update(policy="gaia", duration_s=duration_s)
    return yaml.safe_dump(raw, sort_keys=False)


def function_rows(stores: dict[str, RunStore]) -> list[str]:
    """A markdown table: per function and over all requests, each backend's figures
    (mean ± sample std over its completed runs' seeds, then each seed)."""
    from testbed.functions.report import figures_of
    from testbed.functions.seeds import fmt_seeds
    from testbed.stats import fmt_mean_std

    def cell(values: list[float | None]) -> str:
        return f"{fmt_mean_std(values)} ({fmt_seeds(values)})"

    runs = {
        b: sorted(
            (figures_of(st, r) for r in st.runs() if r.status == "completed"),
            key=lambda f: f.seed,
        )
        for b, st in stores.items()
    }
    head = " | ".join(f"{b} (seeds {', '.join(str(r.seed) for r in rs)})" for b, rs in runs.items())
    lines = [f"| function | figure | {head} |", "|---|---|" + "---|" * len(runs)]
    metrics = ("attain_pct", "p95_ms", "promotions", "demotions")
    for name in next(iter(runs.values()))[0].functions:
        for m in metrics:
            cells = " | ".join(cell([r.fn(name, m) for r in rs]) for rs in runs.values())
            lines.append(f"| {name} | {m} | {cells} |")
    cells = " | ".join(cell([r.total("attain_pct") for r in rs]) for rs in runs.values())
    lines.append(f"| all requests | attain_pct | {cells} |")
    return lines


def seeded_parity(
    name: str,
    text: str,
    spec_dir: Path,
    rows: Callable[[dict[str, RunStore]], list[str]],
    out: Path | None,
    read: list[str] | None,
) -> None:
    """Run the spec ``text`` (its seeds as repetitions) on local then docker, each into
    a store of its own under ``out`` (default: a temp dir), or read stores already made
    (``read``: local, docker); print ``rows`` of both stores."""
    if read:
        print("\n".join(rows(dict(zip(("local", "docker"), map(RunStore, read), strict=True)))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = out or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        spec = root / f"{name}.yaml"
        spec.write_text(text)
        for backend in ("local", "docker"):
            print(f"[{load()}] {spec.name} on {backend} ...", flush=True)
            wall, rc = run_cli(backend, root / backend, spec, ("--spec-dir", str(spec_dir)))
            print(f"  {backend}: exit {rc}, {wall:.1f} s  [{load()}]", flush=True)
        print("\n".join(rows({b: RunStore(root / b) for b in ("local", "docker")})))


def cmd_functions(seeds: int, duration_s: float, out: Path | None, read: list[str] | None) -> None:
    """Run the gaia functions spec on local then docker (or read stores already made)
    and print the per-function table."""
    text = gaia_spec(seeds, duration_s)
    seeded_parity("gaia-parity", text, GAIA.parent, function_rows, out, read)


OFFLOAD = ROOT / "experiments" / "semantic_offload.yaml"


def offload_spec(seeds: int, requests: int, train_steps: int) -> str:
    """experiments/semantic_offload.yaml, ``seeds`` repetitions, ``requests`` inferences
    per device and scheme, ``train_steps`` training steps per scheme."""
    import yaml

    raw = yaml.safe_load(OFFLOAD.read_text())
    raw["name"], raw["repetitions"] = "offload-parity", seeds
    so = raw["workload"]["semantic_offload"]
    so["requests"] = requests
    so["model"]["quick_train_steps"] = train_steps
    return yaml.safe_dump(raw, sort_keys=False)


def offload_rows(stores: dict[str, RunStore]) -> list[str]:
    """A markdown table: per scheme, each backend's task accuracy (mean of the K tasks)
    and median end-to-end time of an inference, mean ± sample std over the seeds, then
    each seed; and the gap of the means."""
    from testbed.functions.seeds import fmt_seeds
    from testbed.stats import fmt_mean_std

    runs = {
        b: sorted((r for r in st.runs() if r.status == "completed"), key=lambda r: r.seed or 0)
        for b, st in stores.items()
    }

    def offload(r: Any) -> dict[str, Any]:  # (alone, the run's summary is the workload's)
        s = r.summary_dict
        return dict(s.get("workloads", {}).get("semantic_offload", s))

    def figure(r: Any, scheme: str, what: str) -> float | None:
        one = offload(r).get("schemes", {}).get(scheme, {})
        if what == "accuracy":
            acc = one.get("accuracy") or {}
            return statistics.mean(acc.values()) if acc else None
        e2e = one.get("e2e_s")
        return None if e2e is None else 1000.0 * e2e

    head = " | ".join(f"{b} (seeds {', '.join(str(r.seed) for r in rs)})" for b, rs in runs.items())
    lines = [f"| scheme | figure | {head} | gap of means |", "|---|---|" + "---|" * (len(runs) + 1)]
    first = next(iter(runs.values()))
    schemes = list(offload(first[0]).get("schemes", {})) if first else []
    for scheme in schemes:
        for what in ("accuracy", "e2e_ms"):
            vals = {b: [figure(r, scheme, what) for r in rs] for b, rs in runs.items()}
            cells = " | ".join(f"{fmt_mean_std(v, 3)} ({fmt_seeds(v, 3)})" for v in vals.values())
            means = [statistics.mean(x for x in v if x is not None) for v in vals.values()
                     if any(x is not None for x in v)]  # fmt: skip
            gap = f"{abs(means[0] - means[-1]):.3f}" if len(means) == 2 else "-"
            lines.append(f"| {scheme} | {what} | {cells} | {gap} |")
    return lines


def cmd_offload(seeds: int, requests: int, steps: int, out: Path | None,
                read: list[str] | None) -> None:  # fmt: skip
    """Run the semantic offload spec on local then docker (or read stores already made)
    and print the per-scheme table."""
    text = offload_spec(seeds, requests, steps)
    seeded_parity("offload-parity", text, OFFLOAD.parent, offload_rows, out, read)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("start", help="fleet start time for N node containers")
    st.add_argument("sizes", type=int, nargs="+")
    rd = sub.add_parser("rounds", help="round time and memory, docker vs local")
    rd.add_argument("--spec", type=Path, default=ROOT / "experiments" / "quickstart.yaml")
    fl = sub.add_parser("fleet", help="one FL round with N node containers")
    fl.add_argument("sizes", type=int, nargs="+")
    ry = sub.add_parser("ready", help="fleet ready time, docker vs local")
    ry.add_argument("sizes", type=int, nargs="+")
    ry.add_argument("--backends", nargs="+", choices=("local", "docker"),
                    default=["local", "docker"])  # fmt: skip
    ry.add_argument("--repeat", type=int, default=1, help="starts per size and backend")
    co = sub.add_parser("continuum", help="continuum.yaml (shortened), local vs docker")
    co.add_argument("--out", type=Path, help="keep both run stores here (default: a temp dir)")
    co.add_argument("--read", nargs=2, metavar=("LOCAL_STORE[:RUN]", "DOCKER_STORE[:RUN]"),
                    help="print runs already made, run nothing")  # fmt: skip
    fn = sub.add_parser("functions", help="gaia.yaml's functions (gaia policy), local vs docker")
    fn.add_argument("--seeds", type=int, default=3)
    fn.add_argument("--duration", type=float, default=40.0, help="s of load per run")
    fn.add_argument("--out", type=Path, help="keep both run stores here (default: a temp dir)")
    fn.add_argument("--read", nargs=2, metavar=("LOCAL_STORE", "DOCKER_STORE"),
                    help="print stores already made, run nothing")  # fmt: skip
    so = sub.add_parser("offload", help="semantic_offload.yaml, local vs docker, by seed")
    so.add_argument("--seeds", type=int, default=3)
    so.add_argument("--requests", type=int, default=40, help="per device and scheme")
    so.add_argument("--train-steps", type=int, default=150, help="per scheme")
    so.add_argument("--out", type=Path, help="keep both run stores here (default: a temp dir)")
    so.add_argument("--read", nargs=2, metavar=("LOCAL_STORE", "DOCKER_STORE"),
                    help="print stores already made, run nothing")  # fmt: skip
    args = ap.parse_args()
    if args.cmd == "offload":
        cmd_offload(args.seeds, args.requests, args.train_steps, args.out, args.read)
    elif args.cmd == "functions":
        cmd_functions(args.seeds, args.duration, args.out, args.read)
    elif args.cmd == "start":
        cmd_start(args.sizes)
    elif args.cmd == "fleet":
        cmd_fleet(args.sizes)
    elif args.cmd == "ready":
        cmd_ready(args.sizes, args.backends, args.repeat)
    elif args.cmd == "continuum":
        cmd_continuum(args.out, args.read)
    else:
        cmd_rounds(args.spec)


if __name__ == "__main__":
    main()
