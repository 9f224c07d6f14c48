"""Task registry and loaders: digits tasks, CIFAR-10 pickle batches, sentiment CSV."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from radio.config import DIGITS_TASKS
from radio.tasks import build_task, load_cifar10, load_text_csv, text_features


def test_digits_tasks_are_distinct():
    tasks = [build_task(n) for n in DIGITS_TASKS]
    assert [t.num_classes for t in tasks] == [10, 2, 2, 2, 3, 3, 2, 2]
    labels = {t.name: tuple(t.y_test) for t in tasks}
    assert len(set(labels.values())) == len(DIGITS_TASKS)
    for t in tasks:
        assert t.x_train.shape[1] == 64 and t.x_train.dtype == np.float32
        assert set(np.unique(t.y_train)) == set(range(t.num_classes))
        assert 0 < t.chance_accuracy < 0.7
    # same split for every task (same images, different labels)
    assert all(np.array_equal(tasks[0].x_test, t.x_test) for t in tasks)


def _write_cifar(folder, n_train=6, n_test=4, seed=0):
    rng = np.random.default_rng(seed)
    for name, n in (("data_batch_1", n_train), ("data_batch_2", n_train), ("test_batch", n_test)):
        d = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
             b"labels": list(rng.integers(0, 10, n)), b"batch_label": name.encode()}
        with open(folder / name, "wb") as fh:
            pickle.dump(d, fh)


def test_cifar10_loader_on_tiny_pickle(tmp_path):
    _write_cifar(tmp_path)
    x_tr, y_tr, x_te, y_te = load_cifar10(tmp_path)
    assert x_tr.shape == (12, 3072) and x_te.shape == (4, 3072)
    assert x_tr.dtype == np.float32 and 0.0 <= x_tr.min() and x_tr.max() <= 1.0
    assert y_tr.dtype == np.int64 and len(y_tr) == 12
    t = build_task("cifar10", cifar10_dir=str(tmp_path))
    assert t.num_classes == 10 and t.input_dim == 3072


def test_cifar10_loader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="cifar10_dir"):
        load_cifar10(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="test_batch"):
        load_cifar10(tmp_path)


def test_text_csv_loader(root):
    path = root / "tests" / "data" / "sentiment_tiny.csv"
    texts, labels = load_text_csv(path)
    assert len(texts) == 40 and set(labels) == {0, 1}
    x = text_features(texts)
    assert x.shape == (40, 256)
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    t = build_task("text_sentiment", text_csv_path=str(path))
    assert len(t.y_train) == 30 and len(t.y_test) == 10


def test_text_csv_errors(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("sentence,score\nhi,1\n")
    with pytest.raises(ValueError, match="text,label"):
        load_text_csv(bad)
    bad.write_text("text,label\na,1\nb,x\nc,0\nd,1\n")
    with pytest.raises(ValueError, match="line 3"):
        load_text_csv(bad)
    with pytest.raises(FileNotFoundError, match="text_csv_path"):
        load_text_csv(tmp_path / "nope.csv")
