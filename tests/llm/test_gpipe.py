"""GPipe's micro-batching on real stage processes: a micro-batch of several requests
generates what the unsplit model generates, and micro-batches overlap in the stages so
a batch of M requests takes well under M x one request's latency."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodes.llm.model import ModelConfig, Stage, generate
from nodes.llm.wire import Client
from testbed.llm.partition import even_cut
from testbed.llm.pipeline import BatchItem, Generation, generate_batch, split_micro_batches
from testbed.procs import free_port, wait_port

CFG = ModelConfig(n_layers=6, d_model=64, n_heads=4, d_ff=128, vocab=97, max_seq=64, seed=5)
SPEED = 0.05  # every stage 20x slower than this host: a step's time is mostly the stretch
OVERLAP_TOLERANCE = 0.75  # M micro-batches must take < 0.75 x M one-request latencies


@pytest.fixture(scope="module")
def stages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[tuple[int, int, int], ...]]:
    logs: Path = tmp_path_factory.mktemp("gpipe")
    procs, hops = [], []
    try:
        for i, (a, b) in enumerate(even_cut(CFG.n_layers, 3)):
            port = free_port()
            cmd = [sys.executable, "-m", "nodes.llm.stage_server", "--node", f"s{i}",
                   "--port", str(port), "--model-json", json.dumps(CFG.as_dict()),
                   "--ranges", json.dumps([[a, b]]), "--speed", str(SPEED)]  # fmt: skip
            procs.append(subprocess.Popen(cmd, stderr=open(logs / f"s{i}.log", "w")))
            hops.append((port, a, b))
        for p, (port, _a, _b) in zip(procs, hops, strict=True):
            wait_port(port, 60.0, p)
        yield tuple(hops)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_split_micro_batches() -> None:
    assert split_micro_batches(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]
    assert split_micro_batches(2, 4) == [range(0, 1), range(1, 2)]


def test_a_micro_batch_generates_what_the_unsplit_model_does(
    stages: tuple[tuple[int, int, int], ...],
) -> None:
    prompts = [[1, 2, 3], [60, 7, 7, 7, 9], [96], [4, 4]]
    news = [5, 3, 4, 1]  # requests leave the micro-batch after their last token
    items = [BatchItem(f"m{i}", p, n) for i, (p, n) in enumerate(zip(prompts, news, strict=True))]
    got = generate_batch(Client(timeout_s=60), stages, items, micro_batches=2)
    whole = Stage(CFG, 0, CFG.n_units)
    for i, (p, n) in enumerate(zip(prompts, news, strict=True)):
        g = got[i]
        assert isinstance(g, Generation)
        assert g.tokens == generate([whole], f"ref{i}", p, n)
        assert 0 < g.ttft_s <= g.e2e_s
    shares = {h["share"] for g in got if isinstance(g, Generation) for h in g.hops}
    assert shares == {0.5, 1.0}  # two requests per micro-batch, then one left


def test_micro_batches_overlap_in_the_stages(stages: tuple[tuple[int, int, int], ...]) -> None:
    client = Client(timeout_s=60)
    m, new = 6, 4

    def batch(tag: str, n: int) -> float:
        items = [BatchItem(f"{tag}{i}", [3, 1, 4, 1, 5], new) for i in range(n)]
        t0 = time.perf_counter()
        out = generate_batch(client, stages, items, micro_batches=m)
        assert all(isinstance(g, Generation) for g in out)
        return time.perf_counter() - t0

    batch("warm", 1)
    # one request, then M, back to back, three times: the host's load drifts between
    # measurements, so each ratio pairs neighbours and the median of three is judged
    ratios = []
    for k in range(3):
        one = batch(f"one{k}.", 1)
        ratios.append(batch(f"many{k}.", m) / (m * one))
    # 3 equal stages, M = 6 micro-batches of one request: ideally (M + 2) / 3 = 2.7 x one
    # request's time, a ratio of 0.44, rather than M x (a ratio of 1)
    assert sorted(ratios)[1] < OVERLAP_TOLERANCE, ratios
