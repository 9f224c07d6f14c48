"""The scheme registry and the two baselines at the multiplexer's channel uses
(orthogonal_equal, joint_encoder); seeds aggregation of the metric rows."""

from __future__ import annotations

import pytest
import torch

from radio.aggregate import aggregate_rows
from radio.block_baselines import JointEncoderSystem, OrthogonalBlockSystem, joint_hidden_dim
from radio.channel import MIMOChannel, snr_db_to_no
from radio.config import SemanticMuxSpec
from radio.scheme_registry import BUILTIN_SCHEMES, SCHEMES
from radio.schemes import build_scheme
from radio.tasks import build_task
from radio.train import TaskTensors, TrainConfig, evaluate_system, train_system

#: Relative error of LMMSE-equalised symbols at 80 dB SNR with perfect CSI (float32).
HIGH_SNR_REL_ERR = 1e-2
#: Trained schemes must beat each task's majority-class accuracy by this much (absolute).
CHANCE_MARGIN = 0.15


def _tasks(names):
    return [build_task(n, 0) for n in names]


@pytest.mark.parametrize(
    ("k", "expected_uses"),
    # semantic_mux, joint_encoder, orthogonal_equal: L = 8 whatever K; orthogonal:
    # ceil(K/4) * 8; bit_level: K*16 features*4 bits / rate 1/2 / (4 bits x 4 streams)
    [(2, {"semantic_mux": 8, "joint_encoder": 8, "orthogonal_equal": 8, "orthogonal": 8,
          "bit_level": 16}),
     (8, {"semantic_mux": 8, "joint_encoder": 8, "orthogonal_equal": 8, "orthogonal": 16,
          "bit_level": 64})],
)
def test_registry_builds_every_scheme(rt, k, expected_uses):
    spec = SemanticMuxSpec()
    tasks = _tasks(spec.tasks[:k])
    ch = MIMOChannel("flat")
    uses = {name: build_scheme(name, spec, tasks, ch).channel_uses() for name in BUILTIN_SCHEMES}
    assert uses == expected_uses
    assert sorted(BUILTIN_SCHEMES) == SCHEMES.names()
    with pytest.raises(ValueError, match="unknown semantic-mux scheme"):
        build_scheme("tdma", spec, tasks, ch)


@pytest.mark.parametrize(("k", "per_task"), [(2, 16), (4, 8), (8, 4)])
def test_orthogonal_equal_puts_each_task_on_its_own_res(rt, k, per_task):
    tasks = _tasks(SemanticMuxSpec().tasks[:k])
    ch = MIMOChannel("cdl")
    sys_ = OrthogonalBlockSystem([64] * k, [t.num_classes for t in tasks], 16, 32, 4, 8,
                                 False, ch)
    assert (sys_.channel_uses(), sys_.active_streams(), sys_.uses) == (8, 4, per_task)
    data = TaskTensors(tasks, "cpu", rt.generator())
    xs, _ = data.test_batch(0, 16)
    with torch.no_grad():
        syms, _ = sys_.transmit(xs)
        assert [tuple(s.shape) for s in syms] == [(16, 1, per_task)] * k
        for s in syms:  # each task at unit average power on its own REs
            assert s.abs().square().mean().item() == pytest.approx(1.0, rel=1e-4)
        rx = sys_.propagate(syms, ch.generate(16, 1), snr_db_to_no(torch.full((16,), 80.0)))
    for s, (x_hat, _) in zip(syms, rx, strict=True):
        err = (x_hat - s[:, 0]).abs().norm() / s.abs().norm()
        assert err < HIGH_SNR_REL_ERR
    # the tasks' REs differ: reading task 0's symbols as task 1's would not match
    assert (rx[1][0] - syms[0][:, 0]).abs().norm() / syms[0].abs().norm() > 0.5


def test_orthogonal_equal_uneven_split_leaves_res_empty(rt):
    """K = 3 on 4 x 8: 10 REs per task, 2 empty, the block at unit power."""
    ch = MIMOChannel("flat")
    sys_ = OrthogonalBlockSystem([64] * 3, [2] * 3, 16, 32, 4, 8, False, ch)
    assert (sys_.uses, sys_.channel_uses()) == (10, 8)
    seen = []
    ch_call = ch.call

    def spy(x, h, no):
        seen.append(x)
        return ch_call(x, h, no)

    ch.call = spy
    xs = [torch.randn(5, 64) for _ in range(3)]
    with torch.no_grad():
        rx = sys_.propagate(sys_.transmit(xs)[0], ch.generate(5, 1), torch.full((5,), 0.1))
    block = seen[0]
    assert tuple(block.shape) == (5, 4, 8) and [tuple(x.shape) for x, _ in rx] == [(5, 10)] * 3
    assert torch.all(block.flatten(1)[:, 30:] == 0)
    assert torch.allclose(block.abs().square().mean(dim=(1, 2)), torch.ones(5), atol=1e-5)
    with pytest.raises(ValueError, match="between K=3 tasks; needs S\\*L >= K"):
        OrthogonalBlockSystem([64] * 3, [2] * 3, 16, 32, 1, 2, False, ch)


def test_joint_encoder_reads_all_inputs_and_trains(rt):
    names = ["digit", "parity", "ink"]
    tasks = _tasks(names)
    ch = MIMOChannel("cdl")
    sys_ = JointEncoderSystem([64] * 3, [t.num_classes for t in tasks], 32, 128, 4, 8, True, ch)
    assert len(sys_.encoders) == 1
    first = sys_.encoders[0].net[0]
    assert first.in_features == 3 * 64 and first.out_features == joint_hidden_dim(128, 3) == 222
    data = TaskTensors(tasks, "cpu", rt.generator())
    xs, _ = data.test_batch(0, 32)
    sys_.eval()
    with torch.no_grad():
        sym, extra = sys_.transmit(xs)
        assert tuple(sym.shape) == (32, 4, 8) and len(extra["aux_logits"]) == 3
        power = sym.abs().square().mean(dim=(1, 2))
        assert torch.allclose(power, torch.ones(32), atol=1e-4)
        # one encoder: changing task 2's input alone changes the whole block
        moved = sys_.transmit([xs[0], xs[1], xs[2].flip(0)])[0]
        assert (moved - sym).abs().max() > 1e-3
    bank, h_eval = ch.generate(512, 1), ch.generate(data.num_test, 1)
    train_system(sys_, data, TrainConfig(200, 128, 2e-3, -5.0, 20.0, 1e-3), bank,
                 rt.generator())
    acc = evaluate_system(sys_, data, h_eval, 20.0, data.num_test, 1)
    for t, a in zip(tasks, acc, strict=True):
        assert a >= t.chance_accuracy + CHANCE_MARGIN, (t.name, a)


def _row(name, value, seed, scheme="semantic_mux", snr=None):
    return {"name": name, "value": value, "kind": "measured", "unit": "x", "scheme": scheme,
            "num_tasks": 2, "snr_db": snr, "task": None, "seed": seed}


def test_aggregate_rows_mean_and_sample_std():
    rows = [_row("a", 1.0, 0), _row("a", 3.0, 0, snr=5.0), _row("b", 7.0, 0),
            _row("a", 2.0, 1), _row("a", 5.0, 1, snr=5.0), _row("b", 7.0, 1),
            _row("a", 6.0, 2), _row("a", 4.0, 2, snr=5.0), _row("b", 7.0, 2)]
    agg = aggregate_rows(rows)
    assert [(r["name"], r["snr_db"]) for r in agg] == [("a", None), ("a", 5.0), ("b", None)]
    assert agg[0]["value"] == pytest.approx(3.0) and agg[0]["std"] == pytest.approx(2.6457513)
    assert agg[1]["value"] == pytest.approx(4.0) and agg[1]["std"] == pytest.approx(1.0)
    assert agg[2]["std"] == 0.0 and all(r["num_seeds"] == 3 and r["seed"] is None for r in agg)
    single = aggregate_rows(rows[:3])
    assert [r["std"] for r in single] == [None] * 3 and single[0]["value"] == 1.0
