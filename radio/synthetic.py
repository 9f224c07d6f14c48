"""Data generated here (nothing downloads): CIFAR-10-format shape images, sentiment texts.

Two tasks beyond the 8x8 digits need files in the formats of real data sets; without a
download we generate them, write them in those formats and read them back through the
real loaders (:func:`radio.tasks.load_cifar10`, :func:`radio.tasks.load_text_csv`):

* :func:`write_cifar10_format`: ``shapes10``, 32x32 RGB images of ten procedural classes
  (disc, square, triangle, ring, cross, horizontal bars, vertical bars, diagonal stripes,
  checkerboard, two dots) with random colours, size, position and pixel noise, written as
  the python-pickle batches of ``cifar-10-batches-py`` (``data_batch_1..N``,
  ``test_batch``, ``batches.meta``). Not CIFAR-10: an easier stand-in in its file format.
* :func:`write_sentiment_csv`: short product/film reviews from templates (positive and
  negative words, intensifiers, negation that flips the sentiment, "A but B" where the
  second clause decides), written as ``text,label`` CSV (1 = positive).

Usage::

    python -m radio.synthetic cifar10 DIR [NUM_TRAIN NUM_TEST]
    python -m radio.synthetic sentiment FILE.csv [NUM_ROWS]
"""

from __future__ import annotations

import csv
import pickle
import sys
from pathlib import Path

import numpy as np

__all__ = ["SHAPE_CLASSES", "shape_images", "write_cifar10_format", "sentiment_texts",
           "write_sentiment_csv"]

SHAPE_CLASSES: tuple[str, ...] = ("disc", "square", "triangle", "ring", "cross", "hbars",
                                  "vbars", "diagonal", "checker", "two_dots")
SIDE = 32
PIXEL_NOISE_STD = 0.12  # std of the Gaussian pixel noise, intensities in [0, 1]


def _mask(cls: int, rng: np.random.Generator) -> np.ndarray:
    """Boolean [32, 32] mask of one shape of class ``cls`` at a random place and size."""
    yy, xx = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32)
    r = rng.uniform(6.0, 11.0)
    cy, cx = rng.uniform(r, SIDE - r, size=2)
    dy, dx = yy - cy, xx - cx
    period = rng.uniform(5.0, 8.0)
    phase = rng.uniform(0, period)
    masks = (
        lambda: dy**2 + dx**2 <= r**2,
        lambda: (abs(dy) <= r * 0.8) & (abs(dx) <= r * 0.8),
        lambda: (dy <= r * 0.8) & (dy >= -r) & (abs(dx) <= (dy + r) * 0.55),
        lambda: (dy**2 + dx**2 <= r**2) & (dy**2 + dx**2 >= (0.55 * r) ** 2),
        lambda: ((abs(dy) <= r * 0.28) | (abs(dx) <= r * 0.28)) & (abs(dy) <= r) & (abs(dx) <= r),
        lambda: ((yy + phase) % period) < period / 2,
        lambda: ((xx + phase) % period) < period / 2,
        lambda: ((xx + yy + phase) % (1.4 * period)) < 0.7 * period,
        lambda: (((yy + phase) // (period / 1.5)) + ((xx + phase) // (period / 1.5))) % 2 == 0,
        lambda: ((dy**2 + (dx - r * 0.6) ** 2) <= (0.35 * r) ** 2)
        | ((dy**2 + (dx + r * 0.6) ** 2) <= (0.35 * r) ** 2),
    )
    return np.asarray(masks[cls](), dtype=bool)


def shape_images(num: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``num`` images of the ten shape classes (balanced, shuffled).

    Returns
    -------
    data : np.ndarray, uint8, shape [num, 3072]
        Channel-major 3x32x32 (CIFAR-10's layout).
    labels : np.ndarray, int64, shape [num]
        Class index into :data:`SHAPE_CLASSES`.
    """
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(num) % len(SHAPE_CLASSES)).astype(np.int64)
    out = np.empty((num, 3, SIDE, SIDE), dtype=np.uint8)
    for i, c in enumerate(labels):
        fg, bg = rng.uniform(0, 1, 3), rng.uniform(0, 1, 3)
        while np.abs(fg - bg).sum() < 0.6:  # keep the shape visible
            fg = rng.uniform(0, 1, 3)
        m = _mask(int(c), rng)
        img = np.where(m[None], fg[:, None, None], bg[:, None, None])
        img = img + rng.normal(0, PIXEL_NOISE_STD, img.shape)
        out[i] = np.clip(np.round(img * 255), 0, 255).astype(np.uint8)
    return out.reshape(num, 3 * SIDE * SIDE), labels


def write_cifar10_format(folder: str | Path, num_train: int = 5000, num_test: int = 1000,
                         seed: int = 0, num_batches: int = 5) -> Path:
    """Write shape images as CIFAR-10 python-pickle batches into ``folder``.

    ``num_train`` images are split over ``data_batch_1 .. data_batch_<num_batches>``; the
    ``num_test`` images go to ``test_batch``; ``batches.meta`` names the classes.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if num_train < num_batches or num_test < 1:
        raise ValueError(f"num_train must be >= num_batches ({num_batches}) and num_test >= 1")
    x, y = shape_images(num_train + num_test, seed)
    parts = np.array_split(np.arange(num_train), num_batches)
    files = [(f"data_batch_{j + 1}", idx) for j, idx in enumerate(parts)]
    files.append(("test_batch", np.arange(num_train, num_train + num_test)))
    for name, idx in files:
        doc = {b"batch_label": name.encode(), b"labels": [int(v) for v in y[idx]],
               b"data": x[idx], b"filenames": [f"{name}_{i}.png".encode() for i in idx]}
        with (folder / name).open("wb") as fh:
            pickle.dump(doc, fh, protocol=2)
    meta = {b"label_names": [c.encode() for c in SHAPE_CLASSES],
            b"num_cases_per_batch": len(parts[0]), b"num_vis": 3 * SIDE * SIDE}
    with (folder / "batches.meta").open("wb") as fh:
        pickle.dump(meta, fh, protocol=2)
    return folder


_POS = ("good", "great", "wonderful", "excellent", "lovely", "brilliant", "superb", "enjoyable",
        "delightful", "solid", "charming", "moving", "fun", "impressive", "beautiful")
_NEG = ("bad", "awful", "terrible", "boring", "dull", "poor", "weak", "horrible", "annoying",
        "disappointing", "messy", "bland", "tedious", "ugly", "clumsy")
_NOUNS = ("film", "story", "acting", "plot", "product", "ending", "soundtrack", "service",
          "design", "book", "camera", "script", "battery", "cast", "meal")
_INTENS = ("", "", "really ", "very ", "quite ", "truly ", "rather ")
_NEGATORS = ("not", "never", "hardly")


def _clause(rng: np.random.Generator) -> tuple[str, int]:
    """One clause and its polarity (1 positive, 0 negative); negation flips it."""
    positive = bool(rng.integers(2))
    word = str(rng.choice(_POS if positive else _NEG))
    noun = str(rng.choice(_NOUNS))
    intens = str(rng.choice(_INTENS))
    if rng.uniform() < 0.3:
        neg = str(rng.choice(_NEGATORS))
        return f"the {noun} was {neg} {intens}{word}", int(not positive)
    return f"the {noun} was {intens}{word}", int(positive)


def sentiment_texts(num: int, seed: int) -> tuple[list[str], np.ndarray]:
    """``num`` review sentences and labels (1 positive, 0 negative).

    A third are "A but B": the label is B's polarity.
    """
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(num):
        text, label = _clause(rng)
        if rng.uniform() < 1 / 3:
            second, label = _clause(rng)
            text = f"{text} but {second}"
        texts.append(text)
        labels.append(label)
    return texts, np.asarray(labels, dtype=np.int64)


def write_sentiment_csv(path: str | Path, num: int = 2000, seed: int = 0) -> Path:
    """Write :func:`sentiment_texts` as a ``text,label`` CSV file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    texts, labels = sentiment_texts(num, seed)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["text", "label"])
        w.writerows(zip(texts, labels.tolist(), strict=True))
    return path


def main(argv: list[str]) -> int:
    """``cifar10 DIR [NUM_TRAIN NUM_TEST]`` or ``sentiment FILE [NUM_ROWS]``."""
    if len(argv) >= 2 and argv[0] == "cifar10":
        sizes = [int(v) for v in argv[2:4]]
        print(write_cifar10_format(argv[1], *sizes))
        return 0
    if len(argv) >= 2 and argv[0] == "sentiment":
        print(write_sentiment_csv(argv[1], *[int(v) for v in argv[2:3]]))
        return 0
    print(__doc__.split("Usage::")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
