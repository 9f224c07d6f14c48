"""Datasets (on small local files) and partitioners."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from nodes.data.datasets import (
    load_cifar10,
    load_digits,
    load_imagefolder,
    load_npz,
    load_synthetic,
)
from nodes.data.partition import partition


def test_digits_shape() -> None:
    d = load_digits()
    assert d.x.shape == (1797, 1, 8, 8) and d.num_classes == 10 and d.x.max() <= 1.0


def test_digits_read_from_the_file_equal_scikit_learns_loader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bundled CSV read directly gives exactly what sklearn's loader gives, and the
    fallback (sklearn's loader, when the file is not found) the same arrays."""
    from sklearn.datasets import load_digits as sk_load

    import nodes.data.datasets as ds

    ref = sk_load()
    d = load_digits()
    assert ds._digits_file() is not None  # (else this test compares the fallback only)
    assert np.array_equal(d.x[:, 0], (ref.images / 16.0).astype(np.float32))
    assert np.array_equal(d.y, ref.target) and d.x.dtype == np.float32
    monkeypatch.setattr(ds, "_digits_file", lambda: None)
    fb = load_digits()
    assert np.array_equal(fb.x, d.x) and np.array_equal(fb.y, d.y)


def test_digits_load_without_importing_scikit_learn() -> None:
    """A node (and the ServerApp) that loads digits does not pay for sklearn/SciPy."""
    import subprocess
    import sys

    code = (
        "import sys; from nodes.data.datasets import load_digits; load_digits(); "
        "print([m for m in ('sklearn', 'scipy') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert out.stdout.strip() == "[]"


def test_synthetic_is_deterministic_and_grouped() -> None:
    a, b = load_synthetic(num_samples=500, seed=3), load_synthetic(num_samples=500, seed=3)
    assert np.array_equal(a.x, b.x) and len(a) == 500 and a.groups is not None
    assert len(np.unique(a.y)) > 2


def test_npz_loader(tmp_path: Path) -> None:
    f = tmp_path / "d.npz"
    np.savez(
        f,
        x=np.random.default_rng(0).integers(0, 255, (20, 6, 6, 3), dtype=np.uint8),
        y=np.arange(20) % 4,
    )
    d = load_npz(path=str(f))
    assert d.x.shape == (20, 3, 6, 6) and d.num_classes == 4 and d.x.max() <= 1.0
    with pytest.raises(ValueError, match="dataset.path"):
        load_npz(path=str(tmp_path / "missing.npz"))


def test_imagefolder_loader(tmp_path: Path) -> None:
    from PIL import Image

    for c in ("cat", "dog"):
        (tmp_path / c).mkdir()
        for i in range(3):
            Image.new("RGB", (10, 12), (i * 40, 0, 0)).save(tmp_path / c / f"{i}.png")
    d = load_imagefolder(path=str(tmp_path), image_size=8)
    assert d.x.shape == (6, 3, 8, 8) and list(d.y) == [0, 0, 0, 1, 1, 1]


def test_cifar10_loader_on_tiny_pickle(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for name in ("data_batch_1", "test_batch"):
        with open(tmp_path / name, "wb") as f:
            pickle.dump(
                {b"data": rng.integers(0, 255, (4, 3072), dtype=np.uint8), b"labels": [0, 1, 2, 9]},
                f,
            )
    d = load_cifar10(path=str(tmp_path))
    assert d.x.shape == (8, 3, 32, 32) and d.num_classes == 10


@pytest.mark.parametrize("name", ["iid", "dirichlet", "k-classes", "quantity-skew"])
def test_partitions_are_disjoint_and_cover(name: str) -> None:
    y = np.repeat(np.arange(10), 50)
    parts = partition(name, y, 5, seed=1, alpha=0.5, classes_per_silo=2)
    allidx = np.concatenate(parts)
    assert len(parts) == 5 and len(np.unique(allidx)) == len(allidx)
    if name != "k-classes":
        assert len(allidx) == len(y)


def test_dirichlet_skew_grows_as_alpha_shrinks() -> None:
    y = np.repeat(np.arange(10), 100)

    def mean_classes(alpha: float) -> float:
        parts = partition("dirichlet", y, 5, seed=0, alpha=alpha, min_partition_size=1)
        return float(np.mean([np.sum(np.bincount(y[p], minlength=10) > 5) for p in parts]))

    assert mean_classes(0.1) < mean_classes(100.0) - 3  # named margin: 3 classes fewer


def test_k_classes_holds_k_classes() -> None:
    y = np.repeat(np.arange(10), 20)
    for p in partition("k-classes", y, 5, seed=0, classes_per_silo=2):
        assert len(np.unique(y[p])) == 2
