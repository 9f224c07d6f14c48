"""Short training runs through the Sionna channel beat chance on every task."""

from __future__ import annotations

import pytest
import torch

from radio.baselines import BitLevelSystem, OrthogonalStreamsSystem
from radio.channel import MIMOChannel, snr_db_to_no
from radio.config import DIGITS_TASKS
from radio.semantic import SemanticMuxSystem
from radio.tasks import build_task
from radio.train import TaskTensors, TrainConfig, evaluate_system, train_system

#: Every task must beat its majority-class accuracy by at least this much (absolute).
CHANCE_MARGIN = 0.15
#: The tiny sentiment CSV has 10 test rows (one row = 0.1), so its margin is one row.
TEXT_CHANCE_MARGIN = 0.1
EVAL_SNR_DB = 20.0


def _setup(names, rt, text_csv=None, bank=512, t=2, draws=1):
    tasks = [build_task(n, 0, None, text_csv) for n in names]
    data = TaskTensors(tasks, rt.device, rt.generator())
    ch = MIMOChannel("cdl")
    return tasks, data, ch, ch.generate(bank, t), ch.generate(data.num_test * draws, 6)


def _check(tasks, acc, margin=CHANCE_MARGIN):
    for t, a in zip(tasks, acc, strict=True):
        assert a >= t.chance_accuracy + margin, (t.name, a, t.chance_accuracy)


def test_semantic_mux_k8_beats_chance_on_every_task(rt):
    tasks, data, ch, bank, h_eval = _setup(DIGITS_TASKS, rt)
    sys_ = SemanticMuxSystem([64] * 8, [t.num_classes for t in tasks], 32, 128, 4, 8, True, ch)
    cfg = TrainConfig(300, 128, 2e-3, -5.0, 20.0, 1e-3)
    train_system(sys_, data, cfg, bank, rt.generator())
    acc = evaluate_system(sys_, data, h_eval, EVAL_SNR_DB, data.num_test, 1)
    _check(tasks, acc)


def test_baselines_beat_chance(rt):
    tasks, data, ch, bank, h_eval = _setup(["digit", "parity", "ink"], rt)
    dims, cls = [64] * 3, [t.num_classes for t in tasks]
    cfg = TrainConfig(200, 128, 2e-3, -5.0, 20.0, 0.0)
    orth = OrthogonalStreamsSystem(dims, cls, 32, 128, 2, 8, False, ch)
    assert orth.channel_uses() == 16  # 3 tasks on 2 streams: 2 time slots
    train_system(orth, data, cfg, bank, rt.generator())
    _check(tasks, evaluate_system(orth, data, h_eval, EVAL_SNR_DB, data.num_test, 1))
    bit = BitLevelSystem(dims, cls, 16, 128, 4, 0.5, 4, 20, 4, ch)
    assert bit.channel_uses() == 3 * 16 * 4 * 2 // (4 * 4)
    train_system(bit, data, cfg, None, rt.generator())
    _check(tasks, evaluate_system(bit, data, h_eval, EVAL_SNR_DB, data.num_test, 1))
    # at 40 dB the LDPC chain is error-free: decoded predictions equal the clean ones
    xs, _ = data.test_batch(0, 64)
    with torch.no_grad():
        clean = [lg.argmax(-1) for lg in bit.classify_clean(xs)]
        rx, _ = bit(xs, h_eval[:64], snr_db_to_no(torch.full((64,), 40.0)))
    assert all(torch.equal(c, r.argmax(-1)) for c, r in zip(clean, rx, strict=True))


def test_text_sentiment_task_trains(rt, root):
    csv = str(root / "tests" / "data" / "sentiment_tiny.csv")
    tasks, data, ch, bank, h_eval = _setup(
        ["text_sentiment", "parity"], rt, csv, bank=256, draws=4
    )
    sys_ = SemanticMuxSystem([t.input_dim for t in tasks], [2, 2], 32, 128, 4, 8, False, ch)
    train_system(sys_, data, TrainConfig(400, 32, 2e-3, 10.0, 20.0), bank, rt.generator())
    acc = evaluate_system(sys_, data, h_eval, EVAL_SNR_DB, data.num_test, 4)
    _check(tasks, acc, TEXT_CHANCE_MARGIN)


@pytest.mark.slow  # ~7 s of training: make test-e2e (loaders: test_radio_tasks)
def test_generated_image_and_text_tasks_train(rt):
    """shapes10 (CIFAR-10-format images) and synthetic_sentiment through the multiplexer."""
    tasks, data, ch, bank, h_eval = _setup(["shapes10", "synthetic_sentiment"], rt, bank=256)
    sys_ = SemanticMuxSystem([t.input_dim for t in tasks], [10, 2], 32, 128, 4, 8, True, ch)
    train_system(sys_, data, TrainConfig(300, 64, 2e-3, 10.0, 20.0, 1e-3), bank, rt.generator())
    acc = evaluate_system(sys_, data, h_eval, EVAL_SNR_DB, data.num_test, 1)
    _check(tasks, acc)
