"""A pipeline of three real stage processes generates exactly what the unsplit model
generates; a stage over its memory cap refuses to start; the model's byte count."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from nodes.llm.model import ModelConfig, Stage, TinyLM, generate, unit_bytes
from nodes.llm.wire import Client
from testbed.llm.partition import even_cut
from testbed.llm.pipeline import StepFailed, generate_remote
from testbed.procs import free_port, wait_port

CFG = ModelConfig(n_layers=6, d_model=64, n_heads=4, d_ff=128, vocab=97, max_seq=64, seed=3)


def test_unit_bytes_match_the_parameters() -> None:
    model = TinyLM(CFG)
    assert sum(unit_bytes(CFG)) == 4 * sum(p.numel() for p in model.parameters())


def test_cached_decoding_equals_full_recompute() -> None:
    """KV caching is exact: the next token from cached steps equals a fresh full pass."""
    whole = Stage(CFG, 0, CFG.n_units)
    prompt = [5, 17, 3, 42, 8]
    tokens = generate([whole], "a", prompt, 6)
    for k in range(1, 6):
        fresh = Stage(CFG, 0, CFG.n_units)
        seq = torch.tensor(prompt + tokens[:k], dtype=torch.long)
        assert int(fresh.run("b", seq, 0)[0]) == tokens[k]


@pytest.fixture
def three_stages(tmp_path: Path) -> Iterator[list[tuple[int, int, int]]]:
    cut = even_cut(CFG.n_layers, 3)
    procs, hops = [], []
    try:
        for i, (a, b) in enumerate(cut):
            port = free_port()
            cmd = [sys.executable, "-m", "nodes.llm.stage_server", "--node", f"n{i}",
                   "--port", str(port), "--model-json", json.dumps(CFG.as_dict()),
                   "--ranges", json.dumps([[a, b]]), "--speed", "0.5"]  # fmt: skip
            procs.append(subprocess.Popen(cmd, stderr=open(tmp_path / f"n{i}.log", "w")))
            hops.append((port, a, b))
        for p, (port, _a, _b) in zip(procs, hops, strict=True):
            wait_port(port, 60.0, p)
        yield hops
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_three_stage_pipeline_equals_the_unsplit_model(
    three_stages: list[tuple[int, int, int]],
) -> None:
    whole = Stage(CFG, 0, CFG.n_units)
    client = Client(timeout_s=30)
    for r, prompt in enumerate([[1, 2, 3], [60, 7, 7, 7, 9, 11, 4, 2], [96]]):
        expect = generate([whole], f"ref{r}", prompt, 5)
        got = generate_remote(client, tuple(three_stages), f"req{r}", prompt, 5)
        assert got.tokens == expect
        assert [h["node"] for h in got.hops[:3]] == ["n0", "n1", "n2"]
        assert len(got.hops) == 3 * 5
        # a slower device (speed 0.5) is stretched: its device time is twice the step's
        # CPU time (its work; contention only stretches the wall), and the hop lasts it
        assert all(h["device_ms"] >= 1.999 * h["cpu_ms"] for h in got.hops), got.hops
        assert all(h["wall_ms"] >= 0.999 * h["device_ms"] for h in got.hops), got.hops
        assert got.hops[1]["in_bytes"] == 4 * CFG.d_model * len(prompt)
        assert 0 < got.ttft_s <= got.e2e_s


def test_a_dead_hop_fails_the_request(three_stages: list[tuple[int, int, int]]) -> None:
    hops = list(three_stages)
    hops[2] = (free_port(), hops[2][1], hops[2][2])  # nothing listens there
    with pytest.raises(StepFailed, match="unreachable"):
        generate_remote(Client(timeout_s=5), tuple(hops), "x", [1, 2], 2)


def test_stage_over_its_memory_cap_refuses_to_start() -> None:
    cmd = [sys.executable, "-m", "nodes.llm.stage_server", "--node", "tiny",
           "--port", str(free_port()), "--model-json", json.dumps(CFG.as_dict()),
           "--ranges", "[[0, 8]]", "--memory-mb", "0"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "over its memory cap" in out.stderr
