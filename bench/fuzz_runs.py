"""Run-level fuzz: mutated valid experiments run end to end; count what should never happen.

Every case starts from one of the ``experiments/*.yaml`` that have an FL workload and
mutates it into a small, one-round run: the fleet cut to its server and 2-4 clients
(entries and ``count`` drawn from the spec's own client entries), ``rounds: 1``,
``protocol_timing: fast``, ``local_epochs: 1``, ``round_timeout_s: 30``, and drawn from
the registries: the clients' device profiles (``testbed.spec.catalog.CATALOG``), the
dataset (``DATASETS``, those that need no ``path``), model (``MODELS``), strategy
(``STRATEGIES``), partitioner (``PARTITIONERS``), 0-2 per-node links (a kind from
``LINK_KINDS``, a bandwidth and a latency) and 0-2 faults at round 1 (a kind from
``FAULT_KINDS``, with ``bench/soak.py``'s short parameters). Sweeps, repetitions, other
workloads and ``workload.fl.nodes`` are dropped (one configuration, every client in FL),
and the ``space`` section when no space node is left. Each case runs as ``python -m
testbed run CASE.yaml --backend B --out DIR/store`` in a subprocess with a timeout
(SIGINT, then SIGKILL 30 s later), and is counted:

- **tracebacks**: ``Traceback (most recent call last)`` in the command's output (goal 0:
  the CLI names a cause, never a traceback);
- **failed without cause**: a run the store marks ``failed`` whose cause
  (``testbed.cause.failure_cause``, what ``testbed show`` prints) is None (goal 0);
- **orphans**: processes left whose command line or ``FLWR_HOME`` is in the store
  (``testbed.reaper.processes_in``) once the command has exited (goal 0); they are
  killed after being counted, so the next case starts clean;
- **refused**: exit 2, the spec refused by validation or preflight (fine: a mutation
  may be invalid; counted apart);
- **timeouts**: cases stopped by the timeout (reported, with their spec);
- completed and failed (with a cause) runs.

Prints one row per backend and the totals, writes ``DIR/fuzz_runs.json`` (figures,
and every case: spec file, exit code, run status, cause, seconds) and prints it as one
JSON line; exits 1 if a goal is missed. Cases are reproducible from ``--seed``
(case ``i`` draws from ``Random(seed * 100_003 + i)``), and each spec is kept in
``DIR/specs/``.

    python bench/fuzz_runs.py --local 200 --simulation 50 --seed 1 --out /tmp/fuzz

Cost, measured on this 2-core machine under load 10-16 (other engineers' fleets beside
it; seed 1, 12 local + 3 simulation cases): a local case took 23-110 s (mean 52 s: fleet
start, one round, teardown; the longest ones with node faults whose nodes missed the
round and a 30 s deadline), a simulation case 19-30 s (mean 25 s, Ray start included), a
refused case a few seconds. The full run (200 local + 50 simulation) therefore takes
about 200 x 52 s + 50 x 25 s = 3.2 hours (up to about 6.5 hours if every local case were
as slow as the slowest); on an idle machine less.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from soak import PARAMS  # noqa: E402  (short parameters for every fault kind)

from nodes.data.datasets import DATASETS, VECTOR_DATASETS  # noqa: E402
from nodes.data.partition import PARTITIONERS  # noqa: E402
from nodes.fl.config import DatasetSpec  # noqa: E402
from nodes.fl.strategies import STRATEGIES  # noqa: E402
from nodes.models import IMAGE_MODELS, MODELS  # noqa: E402
from testbed.cause import failure_cause  # noqa: E402
from testbed.emulation.kinds import LINK_KINDS  # noqa: E402
from testbed.faults import FAULT_KINDS  # noqa: E402
from testbed.reaper import processes_in  # noqa: E402
from testbed.spec.catalog import CATALOG  # noqa: E402
from testbed.store import RunStore  # noqa: E402

BACKENDS = ("local", "simulation")
TIMEOUT_S = {"local": 240.0, "simulation": 300.0}  # per case, s
KILL_AFTER_S = 30.0  # after the SIGINT of a timed-out case
TRACEBACK = "Traceback (most recent call last)"
ROUND_TIMEOUT_S = 30


def base_specs() -> dict[str, dict[str, Any]]:
    """The experiments with an FL workload and a fleet, parsed."""
    out = {}
    for p in sorted((ROOT / "experiments").glob("*.yaml")):
        doc = yaml.safe_load(p.read_text())
        if isinstance(doc, dict) and "fleet" in doc and "fl" in (doc.get("workload") or {}):
            out[p.name] = doc
    return out


def pathless_datasets() -> list[str]:
    """Registered datasets that a spec may name without a ``path`` (files we lack)."""
    out = []
    for name in sorted(DATASETS):
        try:
            DatasetSpec(name=name)
        except ValueError:
            continue
        out.append(name)
    return out


def _small_fleet(rng: random.Random, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first cloud entry (the server) and client entries with 2-4 clients in all."""
    server = next(n for n in nodes if n.get("tier") == "cloud")
    clients = [dict(n) for n in nodes if n is not server]
    rng.shuffle(clients)
    want, out = rng.randint(2, 4), [dict(server)]
    for i, entry in enumerate(clients):
        if want <= 0:
            break
        count = int(entry.get("count", 1))
        if entry.get("tier") == "space":  # the space section names these nodes: as they are
            if count > want:
                continue
        else:  # the last entry takes what is left
            entry["count"] = count = want if i == len(clients) - 1 else rng.randint(1, want)
        if rng.random() < 0.5:
            entry["profile"] = rng.choice(sorted(CATALOG))
        want -= count
        out.append(entry)
    return out


def client_names(fleet: list[dict[str, Any]]) -> list[str]:
    """Node names of the client entries (``id`` or ``id-k`` with ``count``)."""
    names = []
    for n in fleet[1:]:
        count = int(n.get("count", 1))
        names += [n["id"]] if count == 1 else [f"{n['id']}-{k}" for k in range(1, count + 1)]
    return names


def _links(rng: random.Random, doc: dict[str, Any], names: list[str]) -> None:
    links = doc.setdefault("links", {}) or {}
    doc["links"] = links
    kept = {k: v for k, v in (links.get("nodes") or {}).items() if k in names}
    for name in rng.sample(names, rng.randint(0, min(2, len(names)))):
        link: dict[str, Any] = {"latency_ms": rng.choice([0, 5, 40, 150])}
        if rng.random() < 0.3:
            link["kind"] = rng.choice(sorted(LINK_KINDS))
        if link.get("kind") != "mmwave":
            link["bandwidth_mbps"] = rng.choice([1, 10, 100])
        kept[name] = link
    links["nodes"] = kept


def _faults(rng: random.Random, names: list[str]) -> list[dict[str, Any]]:
    out = []
    for _ in range(rng.randint(0, 2)):
        kind = rng.choice(sorted(PARAMS))  # the built-in kinds (soak's parameters)
        fault: dict[str, Any] = {"kind": kind, "at_round": 1}
        if FAULT_KINDS[kind].target != "server":
            fault["node"] = rng.choice(names)
        fault["phase"] = rng.choice(["before", "during"])
        if fault["phase"] == "during":
            fault["delay_s"] = rng.choice([0, 1, 3])
        fault |= yaml.safe_load("{" + PARAMS[kind] + "}") or {}
        out.append(fault)
    return out


def mutate(rng: random.Random, name: str, doc: dict[str, Any]) -> dict[str, Any]:
    """A one-round, small-fleet variant of experiment ``doc`` (see the module doc)."""
    doc = copy.deepcopy(doc)
    for key in ("sweep", "repetitions"):
        doc.pop(key, None)
    doc["name"] = f"fuzz-{Path(name).stem}"
    doc["seed"] = rng.randint(0, 10_000)
    doc["fleet"]["nodes"] = _small_fleet(rng, doc["fleet"]["nodes"])
    names = client_names(doc["fleet"]["nodes"])
    if not any(n.get("tier") == "space" for n in doc["fleet"]["nodes"]):
        doc.pop("space", None)  # it names the space nodes dropped
    fl = doc["workload"]["fl"]
    doc["workload"] = {"fl": fl}
    fl.pop("nodes", None)
    fl |= {"rounds": 1, "local_epochs": 1, "protocol_timing": "fast"}
    fl |= {"round_timeout_s": ROUND_TIMEOUT_S, "min_participants": 1}
    if rng.random() < 0.5:
        fl["dataset"] = {"name": rng.choice(pathless_datasets())}
    if rng.random() < 0.3:
        fl["model"] = {"name": rng.choice(sorted(MODELS))}
    vectors = fl.get("dataset", {}).get("name") in VECTOR_DATASETS
    if vectors and fl.get("model", {}).get("name", "cnn") in IMAGE_MODELS and rng.random() < 0.9:
        fl["model"] = {"name": "mlp"}  # (mostly runs; the rest checks the refusal)
    if rng.random() < 0.3:
        fl["strategy"] = {"name": rng.choice(sorted(STRATEGIES))}
    if rng.random() < 0.3:
        fl["partitioner"] = {"name": rng.choice(sorted(PARTITIONERS))}
    _links(rng, doc, names)
    doc["faults"] = _faults(rng, names)
    return doc


@dataclass
class Case:
    """One fuzzed run and what it left."""

    backend: str
    base: str
    spec: str
    exit_code: int | None = None
    seconds: float = 0.0
    timed_out: bool = False
    tracebacks: int = 0
    runs: list[dict[str, Any]] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)


def _run(cmd: list[str], timeout_s: float, log: Path) -> tuple[int | None, bool, str]:
    """Exit code, whether it timed out, and the output of ``cmd``."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )
        timed_out = False
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the runner ends the run itself
            try:
                proc.wait(KILL_AFTER_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return proc.returncode, timed_out, log.read_text(errors="replace")


def run_case(case: Case, store_dir: Path, log: Path) -> None:
    """Run ``case`` and record what it left (runs, tracebacks, orphans)."""
    store = RunStore(store_dir)
    before = {r.run_id for r in store.runs()}
    cmd = [sys.executable, "-m", "testbed", "run", case.spec]
    cmd += ["--backend", case.backend, "--out", str(store_dir)]
    t0 = time.time()
    case.exit_code, case.timed_out, output = _run(cmd, TIMEOUT_S[case.backend], log)
    case.seconds = round(time.time() - t0, 1)
    case.tracebacks = output.count(TRACEBACK)
    for run in store.runs():
        if run.run_id in before:
            continue
        cause = failure_cause(store, run) if run.status == "failed" else None
        case.runs.append(
            {"run_id": run.run_id, "status": run.status, "cause": cause and cause.as_dict()}
        )
    time.sleep(1.0)  # a process that is on its way out is not an orphan
    left = processes_in(store_dir)
    case.orphans = [f"{p.pid} {' '.join(p.cmdline())[:160]}" for p in _alive(left)]
    for p in left:  # started by this case: stopped, so that the next case starts clean
        try:
            p.kill()
        except Exception:  # noqa: BLE001 (gone meanwhile)
            pass
    store.close()


def _alive(procs: list[Any]) -> list[Any]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != "zombie":
                out.append(p)
        except Exception:  # noqa: BLE001 (gone meanwhile)
            continue
    return out


def figures(cases: list[Case]) -> dict[str, Any]:
    """Counts over ``cases``."""
    runs = [r for c in cases for r in c.runs]
    secs = [c.seconds for c in cases if c.exit_code != 2 and not c.timed_out]
    return {
        "cases": len(cases),
        "completed": sum(r["status"] == "completed" for r in runs),
        "failed_with_cause": sum(r["status"] == "failed" and r["cause"] is not None for r in runs),
        "failed_without_cause": sum(r["status"] == "failed" and r["cause"] is None for r in runs),
        "other_status": sum(r["status"] not in ("completed", "failed") for r in runs),
        "refused": sum(c.exit_code == 2 for c in cases),
        "timeouts": sum(c.timed_out for c in cases),
        "tracebacks": sum(c.tracebacks for c in cases),
        "orphans": sum(len(c.orphans) for c in cases),
        "mean_s_per_run": round(sum(secs) / len(secs), 1) if secs else None,
    }


GOALS = ("tracebacks", "failed_without_cause", "orphans")
COLUMNS = ("cases", "completed", "failed_with_cause", "failed_without_cause", "refused")
COLUMNS += ("timeouts", "tracebacks", "orphans", "mean_s_per_run")


def table(rows: dict[str, dict[str, Any]]) -> str:
    """The figures as a text table, one row per backend."""
    lines = ["backend     " + " ".join(f"{c:>{max(len(c), 6)}}" for c in COLUMNS)]
    for name, row in rows.items():
        cells = [f"{'-' if row[c] is None else row[c]!s:>{max(len(c), 6)}}" for c in COLUMNS]
        lines.append(f"{name:<12}" + " ".join(cells))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--local", type=int, default=200, help="cases on the local backend")
    ap.add_argument("--simulation", type=int, default=50, help="cases on the simulation backend")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True, help="folder for specs, logs, store")
    a = ap.parse_args()
    specs, logs, store = a.out / "specs", a.out / "logs", a.out / "store"
    for d in (specs, logs, store):
        d.mkdir(parents=True, exist_ok=True)
    bases = base_specs()
    plan = [("local", i) for i in range(a.local)]
    plan += [("simulation", a.local + i) for i in range(a.simulation)]
    cases: list[Case] = []
    for backend, i in plan:
        rng = random.Random(a.seed * 100_003 + i)
        base = rng.choice(sorted(bases))
        path = specs / f"case-{i:03d}-{backend}.yaml"
        path.write_text(yaml.safe_dump(mutate(rng, base, bases[base]), sort_keys=False))
        case = Case(backend, base, str(path))
        run_case(case, store, logs / f"{path.stem}.log")
        cases.append(case)
        print(
            f"[{len(cases)}/{len(plan)}] {path.name} ({base}): exit {case.exit_code}, "
            f"{[r['status'] for r in case.runs]}, {case.seconds} s"
            + (", TIMEOUT" if case.timed_out else "")
            + (f", {case.tracebacks} traceback(s)" if case.tracebacks else "")
            + (f", {len(case.orphans)} orphan(s)" if case.orphans else ""),
            flush=True,
        )
    rows = {b: figures([c for c in cases if c.backend == b]) for b in BACKENDS}
    rows["all"] = figures(cases)
    result = {
        "seed": a.seed,
        "figures": rows,
        "goals_missed": [g for g in GOALS if rows["all"][g]],
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
        "cases": [asdict(c) for c in cases],
    }
    (a.out / "fuzz_runs.json").write_text(json.dumps(result, indent=1))
    print(table(rows))
    print(json.dumps({k: v for k, v in result.items() if k != "cases"}))
    return 1 if result["goals_missed"] else 0


if __name__ == "__main__":
    sys.exit(main())
