"""Tasks for semantic multiplexing: built-in digits tasks, CIFAR-10 and CSV sentiment.

Tasks are registered by name (house rule 6, CONTRIBUTING.md). Each gives a
:class:`TaskData` with float32 inputs and integer labels, split into train and test.
Nothing here downloads anything.

Beyond the digits: ``cifar10`` and ``text_sentiment`` read user files (CIFAR-10
python-pickle batches, a ``text,label`` CSV); ``shapes10`` and ``synthetic_sentiment``
generate data here (``radio/synthetic.py``: 5,000 + 1,000 CIFAR-10-format shape images;
2,000 template reviews), write it in those formats to a temporary folder and read it back
through the same loaders. Their data set is fixed (generation seed 0); the task seed
splits the sentiment rows as it splits the digits.

Digits tasks (scikit-learn's 1,797 8x8 digit images, split 75/25 stratified, seeded):

==========  =======  ===================================================================
name        classes  label
==========  =======  ===================================================================
digit       10       the digit 0-9
parity      2        digit is odd
magnitude   2        digit >= 5
prime       2        digit in {2, 3, 5, 7}
ink         3        tercile of total ink (sum of pixel intensities; training terciles)
mod3        3        digit mod 3
loop        2        digit has a closed loop in its usual glyph: {0, 4, 6, 8, 9}
top_heavy   2        share of ink in the top half above its training median
==========  =======  ===================================================================

In a multiplexed transmission every task looks at ITS OWN input sample (K independent
images share one channel use block), so the tasks compete for the channel.
"""

from __future__ import annotations

import csv
import pickle
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from radio.task_registry import DIGITS_TASKS, FILE_TASKS, GENERATED_TASKS, TASK_BUILDERS

__all__ = [
    "DIGITS_TASKS",
    "FILE_TASKS",
    "GENERATED_TASKS",
    "TaskData",
    "TASK_BUILDERS",
    "build_task",
    "load_cifar10",
    "load_text_csv",
    "text_features",
]


@dataclass(frozen=True)
class TaskData:
    """One classification task.

    Attributes
    ----------
    name : str
    num_classes : int
    x_train, x_test : np.ndarray, float32, shape [n, input_dim]
    y_train, y_test : np.ndarray, int64, shape [n]
    """

    name: str
    num_classes: int
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def input_dim(self) -> int:
        """Feature dimension of one input sample."""
        return int(self.x_train.shape[1])

    @property
    def chance_accuracy(self) -> float:
        """Accuracy of always predicting the majority TEST class."""
        return float(np.bincount(self.y_test, minlength=self.num_classes).max() / len(self.y_test))


def _split(n: int, y: np.ndarray, seed: int, test_fraction: float = 0.25):
    from sklearn.model_selection import train_test_split

    idx = np.arange(n)
    return train_test_split(idx, test_size=test_fraction, random_state=seed, stratify=y)


def _digits(seed: int):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    tr, te = _split(len(y), y, seed)
    return x, y, d.images.astype(np.float32), tr, te


_DIGIT_LABELS: dict[str, tuple[int, Callable[[np.ndarray], np.ndarray]]] = {
    "digit": (10, lambda y: y),
    "parity": (2, lambda y: y % 2),
    "magnitude": (2, lambda y: (y >= 5).astype(np.int64)),
    "prime": (2, lambda y: np.isin(y, [2, 3, 5, 7]).astype(np.int64)),
    "mod3": (3, lambda y: y % 3),
    "loop": (2, lambda y: np.isin(y, [0, 4, 6, 8, 9]).astype(np.int64)),
}


def _digits_builder(name: str, seed: int, _cifar: str | None, _text: str | None) -> TaskData:
    return _digits_task(name, seed)


def _digits_task(name: str, seed: int) -> TaskData:
    x, y, img, tr, te = _digits(seed)
    if name in _DIGIT_LABELS:
        c, f = _DIGIT_LABELS[name]
        lab = f(y).astype(np.int64)
    elif name == "ink":
        c = 3
        ink = img.sum(axis=(1, 2))
        q = np.quantile(ink[tr], [1 / 3, 2 / 3])
        lab = np.digitize(ink, q).astype(np.int64)
    elif name == "top_heavy":
        c = 2
        share = img[:, :4].sum(axis=(1, 2)) / img.sum(axis=(1, 2))
        lab = (share > np.median(share[tr])).astype(np.int64)
    else:  # pragma: no cover - guarded by the registry
        raise ValueError(f"unknown digits task {name!r}")
    return TaskData(name, c, x[tr], lab[tr], x[te], lab[te])


def load_cifar10(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Load CIFAR-10 from the python-pickle batches in a local folder.

    Parameters
    ----------
    path : str or Path
        Folder holding ``data_batch_1`` .. ``data_batch_5`` (any subset, at least one) and
        ``test_batch`` (the layout of ``cifar-10-batches-py``). Each file is a pickled dict
        with ``b"data"`` (uint8, shape [n, 3072], channel-major 3x32x32) and ``b"labels"``.

    Returns
    -------
    x_train, y_train, x_test, y_test : np.ndarray
        Inputs float32 in [0, 1], shape [n, 3072]; labels int64 in 0..9.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"cifar10_dir: {path} is not a folder")
    train_files = sorted(path.glob("data_batch_*"))
    test_file = path / "test_batch"
    if not train_files or not test_file.exists():
        raise FileNotFoundError(
            f"cifar10_dir: {path} must hold data_batch_1..5 and test_batch "
            "(python-pickle CIFAR-10 format)"
        )

    def read(f: Path) -> tuple[np.ndarray, np.ndarray]:
        with f.open("rb") as fh:
            d = pickle.load(fh, encoding="bytes")
        data = np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3072)
        return data.astype(np.float32) / 255.0, np.asarray(d[b"labels"], dtype=np.int64)

    parts = [read(f) for f in train_files]
    x_tr = np.concatenate([p[0] for p in parts])
    y_tr = np.concatenate([p[1] for p in parts])
    x_te, y_te = read(test_file)
    return x_tr, y_tr, x_te, y_te


def _cifar_task(path: str | Path, seed: int, name: str = "cifar10") -> TaskData:
    x_tr, y_tr, x_te, y_te = load_cifar10(path)
    mean = x_tr.mean(axis=0, keepdims=True)
    return TaskData(name, 10, x_tr - mean, y_tr, x_te - mean, y_te)


#: Size of the generated data sets (``shapes10``: train, test images; sentiment: rows).
SHAPES10_SIZE = (5000, 1000)
SYNTHETIC_SENTIMENT_ROWS = 2000


def _shapes10_task(seed: int) -> TaskData:
    from radio.synthetic import write_cifar10_format

    with tempfile.TemporaryDirectory(prefix="shapes10-") as folder:
        write_cifar10_format(folder, *SHAPES10_SIZE, seed=0)
        return _cifar_task(folder, seed, "shapes10")


def _synthetic_sentiment_task(seed: int) -> TaskData:
    from radio.synthetic import write_sentiment_csv

    with tempfile.TemporaryDirectory(prefix="sentiment-") as folder:
        path = write_sentiment_csv(Path(folder) / "reviews.csv", SYNTHETIC_SENTIMENT_ROWS, 0)
        return _text_task(path, seed, "synthetic_sentiment")


def load_text_csv(path: str | Path) -> tuple[list[str], np.ndarray]:
    """Read a sentiment CSV with a header ``text,label`` (labels are integers 0..C-1).

    Returns
    -------
    texts : list of str
    labels : np.ndarray, int64, shape [n]
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"text_csv_path: {path} does not exist")
    texts, labels = [], []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or not {"text", "label"} <= set(reader.fieldnames):
            raise ValueError(f"text_csv_path: {path} needs a header with columns text,label")
        for i, row in enumerate(reader, start=2):
            try:
                labels.append(int(row["label"]))
            except (TypeError, ValueError) as e:
                raise ValueError(f"text_csv_path: {path} line {i}: label must be an int") from e
            texts.append(row["text"])
    if len(texts) < 4:
        raise ValueError(f"text_csv_path: {path} needs at least 4 rows, has {len(texts)}")
    return texts, np.asarray(labels, dtype=np.int64)


def text_features(texts: list[str], num_features: int = 256) -> np.ndarray:
    """Hashed bag of words and bigrams, L2-normalised (no vocabulary, no download).

    Returns
    -------
    np.ndarray, float32, shape [len(texts), num_features]
    """
    from sklearn.feature_extraction.text import HashingVectorizer

    vec = HashingVectorizer(
        n_features=num_features, ngram_range=(1, 2), alternate_sign=False, norm="l2"
    )
    return vec.transform(texts).toarray().astype(np.float32)


def _text_task(path: str | Path, seed: int, name: str = "text_sentiment") -> TaskData:
    texts, y = load_text_csv(path)
    x = text_features(texts)
    c = int(y.max()) + 1
    tr, te = _split(len(y), y, seed)
    return TaskData(name, c, x[tr], y[tr], x[te], y[te])


#: The built-in builders ``(seed, cifar10_dir, text_csv_path) -> TaskData``, by name;
#: registered in ``radio/task_registry.py`` as ``radio.tasks:BUILTIN.<name>``.
BUILTIN = SimpleNamespace(
    **{n: partial(_digits_builder, n) for n in DIGITS_TASKS},
    cifar10=lambda seed, c, _t: _cifar_task(c, seed),
    text_sentiment=lambda seed, _c, t: _text_task(t, seed),
    shapes10=lambda seed, _c, _t: _shapes10_task(seed),
    synthetic_sentiment=lambda seed, _c, _t: _synthetic_sentiment_task(seed),
)


def build_task(
    name: str, seed: int = 0, cifar10_dir: str | None = None, text_csv_path: str | None = None
) -> TaskData:
    """Build a registered task by name (see :data:`TASK_BUILDERS`)."""
    return TASK_BUILDERS[name](seed, cifar10_dir, text_csv_path)
