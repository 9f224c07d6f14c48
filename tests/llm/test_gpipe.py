"""GPipe's micro-batching on real stage processes: a micro-batch of several requests
generates what the unsplit model generates, and micro-batches overlap in the stages (the
stages are busy at once, by their own records)."""

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
from testbed.functions.load import http_call
from testbed.llm.partition import even_cut
from testbed.llm.pipeline import BatchItem, Generation, generate_batch, split_micro_batches
from testbed.procs import free_port, wait_port

CFG = ModelConfig(n_layers=6, d_model=64, n_heads=4, d_ff=128, vocab=97, max_seq=64, seed=5)
SPEED = 0.05  # every stage 20x slower than this host: a step's time is mostly the stretch


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
    """Judged on the stages' own records (``/stats``: busy seconds, steps), not on a
    wall-clock ratio: stages that served one micro-batch at a time would be busy in
    disjoint spans, together no longer than the batch's wall time; busy for longer,
    two of them served at once (the pipeline overlapped)."""
    client = Client(timeout_s=60)
    m, new = 6, 4

    def stats() -> list[dict[str, float]]:
        return [http_call(port, "GET", "/stats", timeout=60.0) for port, _a, _b in stages]

    warm = [BatchItem("warm0", [3, 1, 4, 1, 5], new)]
    generate_batch(client, stages, warm, micro_batches=m)
    items = [BatchItem(f"many{i}", [3, 1, 4, 1, 5], new) for i in range(m)]
    before = stats()
    t0 = time.perf_counter()
    out = generate_batch(client, stages, items, micro_batches=m)
    wall_s = time.perf_counter() - t0
    after = stats()
    assert all(isinstance(g, Generation) for g in out)
    # M micro-batches of one request, each a message per step through every stage
    assert [a["steps"] - b["steps"] for a, b in zip(after, before, strict=True)] == [m * new] * 3
    busy_s = sum(a["busy_s"] - b["busy_s"] for a, b in zip(after, before, strict=True))
    # 3 equal stages, M = 6: ideally busy 3 x 6 step-times in (M + 2) = 8, 2.25 x the wall
    assert busy_s > wall_s, (busy_s, wall_s)
