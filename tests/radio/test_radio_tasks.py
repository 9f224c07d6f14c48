"""Task registry and loaders: digits tasks, CIFAR-10 pickle batches, sentiment CSV, and the
generated shapes10 / synthetic_sentiment data read by those loaders."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from radio.config import DIGITS_TASKS
from radio.synthetic import SHAPE_CLASSES, sentiment_texts, shape_images, write_cifar10_format
from radio.tasks import (
    SHAPES10_SIZE,
    SYNTHETIC_SENTIMENT_ROWS,
    build_task,
    load_cifar10,
    load_text_csv,
    text_features,
)


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


def test_generated_cifar10_format_files_read_by_the_real_loader(root, tmp_path):
    """tests/data/cifar10_tiny was written by ``write_cifar10_format(.., 20, 10, seed=0,
    num_batches=2)``: the loader reads it, and the generator still makes the same images."""
    folder = root / "tests" / "data" / "cifar10_tiny"
    x_tr, y_tr, x_te, y_te = load_cifar10(folder)
    assert x_tr.shape == (20, 3072) and x_te.shape == (10, 3072)
    data, labels = shape_images(30, 0)
    assert np.array_equal(np.round(x_tr * 255).astype(np.uint8), data[:20])
    assert np.array_equal(np.round(x_te * 255).astype(np.uint8), data[20:])
    assert np.array_equal(y_tr, labels[:20]) and np.array_equal(y_te, labels[20:])
    with (folder / "batches.meta").open("rb") as fh:
        meta = pickle.load(fh, encoding="bytes")
    assert [n.decode() for n in meta[b"label_names"]] == list(SHAPE_CLASSES)
    # a fresh folder with more batches holds the same images, split over the batches
    write_cifar10_format(tmp_path, 20, 10, seed=0, num_batches=4)
    assert len(list(tmp_path.glob("data_batch_*"))) == 4
    assert np.array_equal(load_cifar10(tmp_path)[0], x_tr)
    with pytest.raises(ValueError, match="num_train"):
        write_cifar10_format(tmp_path, 2, 1, num_batches=5)


def test_shape_images_are_balanced_and_seeded():
    data, labels = shape_images(400, 3)
    assert np.bincount(labels).tolist() == [40] * 10
    again, _ = shape_images(400, 3)
    assert np.array_equal(data, again) and not np.array_equal(data, shape_images(400, 4)[0])


def test_generated_sentiment_csv_read_by_the_real_loader(root):
    path = root / "tests" / "data" / "sentiment_synthetic_tiny.csv"
    texts, labels = load_text_csv(path)
    assert (texts, labels.tolist()) == (lambda t, y: (t, y.tolist()))(*sentiment_texts(40, 0))
    assert set(labels.tolist()) == {0, 1}
    # negation flips the label, "A but B" takes B's
    for text, y in zip(texts, labels, strict=True):
        last = text.split(" but ")[-1]
        positive = any(w in last.split() for w in ("good", "great", "wonderful", "excellent",
                       "lovely", "brilliant", "superb", "enjoyable", "delightful", "solid",
                       "charming", "moving", "fun", "impressive", "beautiful"))
        negated = any(n in last.split() for n in ("not", "never", "hardly"))
        assert y == int(positive != negated), text


def test_generated_tasks_build_from_their_files():
    shapes = build_task("shapes10", 1)
    assert (shapes.name, shapes.num_classes, shapes.input_dim) == ("shapes10", 10, 3072)
    assert (len(shapes.y_train), len(shapes.y_test)) == SHAPES10_SIZE
    text = build_task("synthetic_sentiment", 1)
    assert (text.name, text.num_classes, text.input_dim) == ("synthetic_sentiment", 2, 256)
    assert len(text.y_train) + len(text.y_test) == SYNTHETIC_SENTIMENT_ROWS
    # the task seed splits the rows; the data set itself is fixed
    other = build_task("synthetic_sentiment", 2)
    assert not np.array_equal(other.y_test, text.y_test)
    assert np.array_equal(np.sort(np.concatenate([other.x_train, other.x_test]), axis=0),
                          np.sort(np.concatenate([text.x_train, text.x_test]), axis=0))
