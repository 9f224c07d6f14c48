"""Nothing outlives a run: many runs that end normally, by an error, by Ctrl-C and by a
SIGKILL of the runner, each followed by a check of the host.

After every run: 0 processes whose command line or ``FLWR_HOME`` points into the store,
0 network namespaces and 0 node cgroups of its own (its tag, its agents' pids) that were
not there before (a neighbour's runs on the host are not counted), 0 listening sockets
of any process the run had, and the run's status says how it ended (a SIGKILLed runner's
watchdog marks it ``interrupted``). ``ORPHAN_RUNS`` sets the number of runs (default
:data:`DEFAULT_RUNS`; see ``docs/resume.md`` for the measured cost per run).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from testbed.emulation.netem import support
from testbed.store import RunStore
from tests.conftest import processes_under
from tests.fleet_kill import (
    PidSampler,
    cli,
    has_event,
    listening,
    netns,
    node_cgroups,
    own_cgroups,
    own_netns,
    run_pids,
    wait_store,
)

pytestmark = pytest.mark.slow

DEFAULT_RUNS = 50  # the count; ~16 min on 2 cores (docs/resume.md)
RUNS = int(os.environ.get("ORPHAN_RUNS", DEFAULT_RUNS))
REAP_S = 20.0  # the longest a killed run's watchdog may take to reap (s): 0.5 poll + 3 grace
ENDINGS = ("normal", "error", "ctrl-c", "sigkill")
#: Where a run is stopped: the first event of that kind (and round) in the store.
KILL_POINTS = (("fleet_starting", None), ("fleet_ready", None), ("round_start", 1))
#: What each ending leaves in the store.
STATUS = {
    "normal": "completed",
    "error": "failed",
    "ctrl-c": "interrupted",
    "sigkill": "interrupted",
}
NETEM = support()["ok"]


def spec(i: int, ending: str, objects_npz: Path) -> str:
    """The fastest real fleets: 1 server + 2 clients, 1 round of 1 epoch; links
    alternate proxy / none / netem (where the kernel allows); errors alternate a crash of
    the ServerApp (a data file that validates but holds pickled objects, which it cannot
    load) and nodes that die while starting (64 MB)."""
    modes = ["proxy", "none"] + (["netem"] if NETEM else [])
    mode = modes[i % len(modes)]
    fl = "{rounds: 1, local_epochs: 1, round_timeout_s: 30}"
    profile = "rpi5"
    if ending == "error" and (i // len(ENDINGS)) % 2 == 0:
        fl = f"{{rounds: 1, local_epochs: 1, dataset: {{name: npz, path: {objects_npz}}}}}"
    elif ending == "error":
        profile = "tiny"
    return f"""\
name: orphans-{i}
seed: {i}
profiles:
  tiny: {{cpu_speed_factor: 1.0, cpu_cores: 1, memory_mb: 64, uplink_mbps: 100, power_w: 1}}
fleet:
  nodes:
    - {{id: cloud, tier: cloud}}
    - {{id: edge, tier: edge, profile: {profile}, count: 2}}
links:
  mode: {mode}
workload:
  fl: {fl}
"""


def one_run(tmp_path: Path, i: int) -> dict[str, object]:
    """Start run ``i``, end it the way its index says, then check the host."""
    ending = ENDINGS[i % len(ENDINGS)]
    out = tmp_path / f"r{i}"
    file = tmp_path / f"orphans-{i}.yaml"
    objects = tmp_path / "objects.npz"
    if not objects.exists():
        np.savez(objects, x=np.array([{"a": 1}], dtype=object), y=np.array([0]))
    file.write_text(spec(i, ending, objects))
    ns0, cg0 = netns(), node_cgroups()
    t0 = time.monotonic()
    proc = cli(out, "run", str(file))
    sampler = PidSampler(out)
    seen: set[int] = {proc.pid}
    if ending in ("ctrl-c", "sigkill"):
        kind, rnd = KILL_POINTS[(i // len(ENDINGS)) % len(KILL_POINTS)]
        wait_store(out, has_event(kind, rnd), proc, 180)
        seen |= {p.pid for p in processes_under(out)}
        proc.send_signal(signal.SIGINT if ending == "ctrl-c" else signal.SIGKILL)
    text, _ = proc.communicate(timeout=180)
    ours = sampler.stop() | run_pids(out) | seen
    deadline = time.monotonic() + REAP_S
    while processes_under(out) and time.monotonic() < deadline:
        time.sleep(0.25)
    left = processes_under(out)
    assert left == [], (i, ending, [p.cmdline() for p in left], text)
    assert own_netns(netns() - ns0, out) == set(), (i, ending)
    assert own_cgroups(node_cgroups() - cg0, ours) == set(), (i, ending)
    assert listening(seen) == set(), (i, ending)
    want = {"normal": 0, "error": 1, "ctrl-c": 130, "sigkill": -signal.SIGKILL}[ending]
    assert proc.returncode == want, (i, ending, text)
    [run] = RunStore(out).runs()
    assert run.status == STATUS[ending], (i, ending, run.status, text)
    return {"ending": ending, "wall_s": time.monotonic() - t0}


def test_no_orphans_over_many_runs(tmp_path: Path) -> None:
    t0 = time.monotonic()
    done = [one_run(tmp_path, i) for i in range(RUNS)]
    per = {e: [d["wall_s"] for d in done if d["ending"] == e] for e in ENDINGS}
    print(
        f"\n{RUNS} runs in {time.monotonic() - t0:.0f} s; mean s per ending:",
        {e: round(sum(v) / len(v), 1) for e, v in per.items() if v},
    )  # type: ignore[arg-type]
