"""``workload.llm_pipeline`` on the dilated clock (docs/time-dilation.md): the same run
at TDF 1 and TDF 3 gives the same emulated figures, and the stage server labels a
device it cannot stretch."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest
import torch

from kernel import dilation
from nodes.llm.model import ModelConfig
from nodes.llm.stage_server import StageNode
from nodes.llm.wire import encode
from testbed.llm import run as llm_run
from testbed.llm.schedule import emulated_clock
from testbed.runner import run_experiment
from testbed.spec.loader import parse_spec
from testbed.store import RunStore

#: The fleet's fastest profile is this host (``host``, 1.0) and the edge is an rpi5
#: (0.5): every device runs at its own speed at TDF 1 and at TDF 3 alike. Links carry
#: most of a request's time (4 steps x 2 round trips of 2 ms + 20 ms), so the host's
#: unstretched overheads (HTTP, Python, ~1-3 ms per hop-step here), which shrink by TDF
#: in emulated time, are a small share. 3 requests/s keep the two stages mostly idle.
SPEC = """\
name: llm-dilation
seed: 3
time_dilation: {tdf}
fleet:
  nodes:
    - {{id: edge, tier: edge, profile: rpi5}}
    - {{id: fog, tier: fog, profile: host}}
links:
  nodes:
    edge: {{bandwidth_mbps: 50, latency_ms: 2}}
    fog: {{bandwidth_mbps: 50, latency_ms: 20}}
workload:
  llm_pipeline:
    model: {{n_layers: 4, d_model: 128, n_heads: 4, d_ff: 256, vocab: 128, max_seq: 64}}
    replicas: [[edge, fog]]
    policy: gpipe
    gpipe: {{batch_size: 4, micro_batches: 2}}
    requests: {{prompt_tokens: 8, new_tokens: 4}}
    arrivals: {{kind: poisson, rate_rps: 3}}
    duration_s: 5
    profile_repeats: 1
"""

#: The links' floor of one request, emulated ms: each of its 4 steps crosses the edge's
#: link (2 ms each way) and the fog's (20 ms each way) there and back. At any TDF a
#: request cannot be served faster (the proxies hold each byte TDF x latency on the
#: wall); links not dilated, or times divided by TDF twice, fall below it.
LINK_FLOOR_MS = 4 * 2 * (2 + 20)

#: How much higher TDF 3's emulated p50 / lower its throughput may be than TDF 1's.
#: One-sided: the host's own overheads (HTTP, Python, this host's neighbours) are not
#: dilated and shrink by TDF in emulated time, so a loaded host raises TDF 1's figures
#: more than TDF 3's. Broken dilation is off by far more: latencies recorded on the wall
#: clock are 3x, a throughput per wall second is a third.
E2E_REL_TOL = 0.25
THROUGHPUT_REL_TOL = 0.2


def _run(tmp_path: Path, tdf: int) -> tuple[dict[str, object], list[float], list[object]]:
    store = RunStore(tmp_path / f"runs-{tdf}")
    res = run_experiment(parse_spec(SPEC.format(tdf=tdf)), store)
    assert res.status == "completed", res.summary
    rows = store.tagged_metrics(res.run_id)
    e2e = [r.value or 0.0 for r in rows if r.name == "llm_e2e_ms"]
    cuts = [json.loads(e.data or "{}")["cut"] for e in store.events(res.run_id)
            if e.kind == "llm_partition"]  # fmt: skip
    return res.summary, e2e, cuts


def test_tdf_1_and_3_give_the_same_emulated_latency_and_throughput(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Judged against what each run recorded and the physics of its links, one-sided
    where the host's load moves a figure (it moves TDF 1's more than TDF 3's)."""
    # one profile for both runs (profiling is this host's noise): the same cut
    cfg = ModelConfig(n_layers=4, d_model=128, n_heads=4, d_ff=256, vocab=128, max_seq=64)
    unit_s = llm_run.profile_units(cfg, 8, 4, 3)
    monkeypatch.setattr(llm_run, "profile_units", lambda *a: unit_s)
    drawn: list[list[float]] = []  # each run's arrivals (emulated s), as the load drew them
    real_arrivals = llm_run.make_arrivals

    def arrivals(*a: object, **k: object) -> object:
        out = real_arrivals(*a, **k)  # type: ignore[arg-type]
        drawn.append([float(t) for t in out])
        return out

    monkeypatch.setattr(llm_run, "make_arrivals", arrivals)
    s1, e2e1, cuts1 = _run(tmp_path, 1)
    s3, e2e3, cuts3 = _run(tmp_path, 3)
    assert cuts1 == cuts3
    # the same arrivals (drawn from the seed over duration_s emulated s), all served
    assert len(drawn) == 2 and drawn[0] == drawn[1]
    last_s = drawn[0][-1]
    assert s1["completed"] == s3["completed"] == len(e2e1) == len(e2e3) == len(drawn[0]) >= 8
    assert s1["failed_attempts"] == s3["failed_attempts"] == 0
    for tdf, s in ((1, s1), (3, s3)):
        wall_s, emulated_s = float(str(s["load_wall_s"])), float(str(s["load_emulated_s"]))
        # released at TDF x their emulated times on the wall clock, the last one served
        # after it arrived: TDF 3 lasted 3x longer on the wall, the same in emulated time
        assert wall_s >= tdf * (last_s + LINK_FLOOR_MS / 1e3), (tdf, wall_s, last_s)
        assert emulated_s == pytest.approx(wall_s / tdf)
        assert s["throughput_rps"] == pytest.approx(len(drawn[0]) / emulated_s)
    for e2e in (e2e1, e2e3):
        assert min(e2e) >= LINK_FLOOR_MS, (e2e1, e2e3)
    p50_1, p50_3 = statistics.median(e2e1), statistics.median(e2e3)
    assert p50_3 <= p50_1 * (1 + E2E_REL_TOL), (e2e1, e2e3)
    rps_1, rps_3 = float(str(s1["throughput_rps"])), float(str(s3["throughput_rps"]))
    assert rps_3 >= rps_1 * (1 - THROUGHPUT_REL_TOL), (rps_1, rps_3)


def _step(node: StageNode) -> dict[str, object]:
    header = {"request": "r", "pos": 0, "start": 0, "stop": 3, "next": [], "final": True}
    status, answer = node.step(encode(header, torch.tensor([1, 2, 3])))
    assert status == 200, answer
    hops: list[dict[str, object]] = answer["hops"]
    return hops[0]


def test_a_stage_is_stretched_up_to_tdf_times_this_host_and_host_speed_beyond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, vocab=16, max_seq=8)
    node = StageNode("cloud", cfg, [(0, 3)], speed=1.3, mem_bytes=1 << 30)
    monkeypatch.delenv(dilation.ENV, raising=False)
    assert _step(node)["timing"] == "host-speed"  # 1.3 x host, no dilation
    monkeypatch.setenv(dilation.ENV, "1.3")
    assert _step(node)["timing"] == "stretched"  # at its profile's speed under TDF 1.3
    monkeypatch.setenv(dilation.ENV, "1.2")
    assert _step(node)["timing"] == "host-speed"


def test_the_schedulers_clock_is_emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dilation.ENV, "4")
    before = time.monotonic() / 4
    now = emulated_clock()
    assert before <= now <= time.monotonic() / 4  # read between the two wall stamps


def test_a_stage_is_stretched_from_its_cpu_time_not_the_hosts_load() -> None:
    """A hop that waited for a core (host contention: wall time without CPU time) is
    not multiplied by 1 / speed: the device time is the hop's CPU time / speed."""
    cfg = ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, vocab=16, max_seq=8)
    node = StageNode("edge", cfg, [(0, 3)], speed=0.5, mem_bytes=1 << 30)
    stage = node.stages[(0, 3)]
    run = stage.run

    def contended(*args: object, **kw: object) -> torch.Tensor:
        time.sleep(0.2)  # wall time without CPU: another process holding the core
        return run(*args, **kw)  # type: ignore[arg-type]

    stage.run = contended  # type: ignore[method-assign]
    ms = {k: float(str(v)) for k, v in _step(node).items() if k.endswith("_ms")}
    assert ms["compute_ms"] >= 200 and ms["cpu_ms"] < 50
    # the CPU time / 0.5 is far below the wall time: the device time is the wall's (it
    # was the wall's / 0.5 when stretched from the wall time)
    assert ms["device_ms"] == pytest.approx(ms["compute_ms"], rel=0.05)
