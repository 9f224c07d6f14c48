"""Datasets for the compression experiment: sklearn digits (bundled) and local CIFAR-10.

Nothing is downloaded. CIFAR-10 is read from the "python version" batches
(``data_batch_1`` .. ``data_batch_5``, ``test_batch``; each a pickled dict with
``b"data"``, uint8 (N, 3072) in CHW order, and ``b"labels"``) at a user-given path,
through a restricted unpickler that only accepts numpy arrays and builtins.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
CIFAR_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR_TEST_FILE = "test_batch"


@dataclass
class Split:
    """Tensors of one split.

    Attributes
    ----------
    x : torch.Tensor
        Inputs, float32, (N, C, H, W).
    y : torch.Tensor
        Labels, int64, (N,).
    """

    x: torch.Tensor
    y: torch.Tensor


def load_digits_split(test_fraction: float, seed: int) -> tuple[Split, Split]:
    """sklearn digits as (N, 1, 8, 8) in [0, 1], split by a seeded permutation.

    Parameters
    ----------
    test_fraction : float
        Fraction of the 1797 samples held out, in (0, 1).
    seed : int
        Permutation seed.

    Returns
    -------
    train, test : Split
    """
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = max(1, int(round(test_fraction * len(y))))
    te, tr = perm[:n_test], perm[n_test:]
    return Split(x[tr], y[tr]), Split(x[te], y[te])


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickler that refuses every global except numpy array reconstruction."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("builtins", "bytes"),
    }

    def find_class(self, module: str, name: str) -> object:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"CIFAR batch refers to {module}.{name}; refused")


def _cifar_dir(path: Path) -> Path:
    path = Path(path)
    for cand in (path, path / "cifar-10-batches-py"):
        if (cand / CIFAR_TEST_FILE).is_file():
            return cand
    raise FileNotFoundError(
        f"cifar10_path {str(path)!r}: no '{CIFAR_TEST_FILE}' there or in its "
        "'cifar-10-batches-py' subfolder (expected the CIFAR-10 python-pickle batches)"
    )


def read_cifar_batch(file: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python batch file.

    Returns
    -------
    images : numpy.ndarray
        uint8, (N, 3, 32, 32).
    labels : numpy.ndarray
        int64, (N,).
    """
    with open(file, "rb") as f:
        batch = _NumpyOnlyUnpickler(f, encoding="bytes").load()
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    labels = np.asarray(batch[b"labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise ValueError(f"{file}: expected data (N, 3072) and N labels, got {data.shape}, "
                         f"{labels.shape}")
    return data.reshape(-1, 3, 32, 32), labels


def load_cifar10(path: Path | str, train: bool, limit: int | None = None) -> Split:
    """CIFAR-10 from local python-pickle batches, normalized per channel.

    Parameters
    ----------
    path : Path or str
        Folder holding the batches (or its parent with ``cifar-10-batches-py``).
    train : bool
        The five training batches (those present) or ``test_batch``.
    limit : int, optional
        Keep the first ``limit`` samples.

    Returns
    -------
    Split
        x float32 (N, 3, 32, 32), y int64 (N,).
    """
    root = _cifar_dir(Path(path))
    names = [n for n in CIFAR_TRAIN_FILES if (root / n).is_file()] if train else [CIFAR_TEST_FILE]
    if not names:
        raise FileNotFoundError(f"cifar10_path {str(root)!r}: no data_batch_* files")
    xs, ys = [], []
    total = 0
    for n in names:
        x, y = read_cifar_batch(root / n)
        xs.append(x)
        ys.append(y)
        total += len(y)
        if limit is not None and total >= limit:
            break
    xt = torch.from_numpy(np.concatenate(xs)).float() / 255.0
    yt = torch.from_numpy(np.concatenate(ys))
    if limit is not None:
        xt, yt = xt[:limit], yt[:limit]
    mean = torch.tensor(CIFAR_MEAN).reshape(1, 3, 1, 1)
    std = torch.tensor(CIFAR_STD).reshape(1, 3, 1, 1)
    return Split((xt - mean) / std, yt)
