"""Built-in datasets, registered by name.

Every loader returns a :class:`Dataset` of numpy arrays; nothing here downloads at run
time. ``digits`` ships with scikit-learn, ``synthetic`` is generated (LEAF's
Synthetic(alpha, beta)), ``npz`` and ``imagefolder`` read local files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from kernel.registry import Registry, callable_hook


@dataclass(frozen=True)
class Dataset:
    """A labelled dataset held in memory.

    Attributes
    ----------
    x : numpy.ndarray
        Features, shape ``(n, C, H, W)`` for images or ``(n, d)`` for vectors, float32.
    y : numpy.ndarray
        Integer labels, shape ``(n,)``, int64.
    num_classes : int
        Number of classes.
    groups : numpy.ndarray or None
        Natural per-sample writer/device id (LEAF style), shape ``(n,)``, if any.
    """

    x: np.ndarray
    y: np.ndarray
    num_classes: int
    groups: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def subset(self, idx: np.ndarray) -> Dataset:
        """Return the samples at ``idx`` (a new dataset)."""
        g = None if self.groups is None else self.groups[idx]
        return Dataset(self.x[idx], self.y[idx], self.num_classes, g)


DatasetLoader = Callable[..., Dataset]
DATASETS: Registry[DatasetLoader] = Registry(
    "dataset", validate=callable_hook("(**loader_params) -> Dataset")
)
register_dataset = DATASETS.register


DIGITS_FILE = ("datasets", "data", "digits.csv.gz")  # in the scikit-learn package


def _digits_file() -> Path | None:
    """scikit-learn's bundled ``digits.csv.gz``, found without importing scikit-learn
    (None: not installed, or laid out otherwise)."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")  # (a top-level name: nothing imported)
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root).joinpath(*DIGITS_FILE)
        if path.is_file():
            return path
    return None


#: Built-in datasets whose samples are feature vectors, not images (no conv model).
VECTOR_DATASETS = frozenset({"synthetic"})


@register_dataset("digits")
def load_digits(**_: object) -> Dataset:
    """scikit-learn's 8x8 handwritten digits (1,797 images, 10 classes), scaled to [0, 1].

    Read from the CSV file scikit-learn ships (rows of 64 pixel values 0-16 and the
    label), as ``sklearn.datasets.load_digits`` reads it, without importing scikit-learn
    and SciPy (~1.2 s of CPU and ~1,100 modules in every process that loads the data:
    each client node and the ServerApp); scikit-learn's own loader where the file is
    not found.
    """
    path = _digits_file()
    if path is None:
        from sklearn.datasets import load_digits as _load

        d = _load()
        images, target = d.images, d.target
    else:
        import gzip

        with gzip.open(path, mode="rt", encoding="utf-8") as f:
            data = np.loadtxt(f, delimiter=",")
        images, target = data[:, :-1].reshape(-1, 8, 8), data[:, -1]
    x = (images.astype(np.float32) / 16.0)[:, None, :, :]
    return Dataset(x, target.astype(np.int64), 10)


@register_dataset("synthetic")
def load_synthetic(
    num_samples: int = 3000,
    num_features: int = 60,
    num_classes: int = 10,
    num_writers: int = 30,
    alpha: float = 1.0,
    beta: float = 1.0,
    seed: int = 0,
    **_: object,
) -> Dataset:
    """LEAF's Synthetic(alpha, beta) (Caldas et al. 2018; Shamir et al.).

    Each writer k has its own softmax model ``W_k ~ N(u_k, 1)``, ``u_k ~ N(0, alpha)``
    and feature mean ``v_k ~ N(B_k, 1)``, ``B_k ~ N(0, beta)``; features
    ``x ~ N(v_k, diag(j^-1.2))``, labels ``argmax softmax(W_k x + b_k)``.
    """
    rng = np.random.default_rng(seed)
    cov = np.array([(j + 1) ** -1.2 for j in range(num_features)])
    sizes = rng.multinomial(num_samples, np.ones(num_writers) / num_writers)
    # one writer's float64 draws at a time, stored as float32 (the same values as
    # concatenating them all first: 2 million samples peak at ~0.5 GB, not ~2.4 GB)
    x = np.empty((num_samples, num_features), dtype=np.float32)
    y = np.empty(num_samples, dtype=np.int64)
    at = 0
    for n in sizes:
        u = rng.normal(0, np.sqrt(alpha))
        b_mean = rng.normal(0, np.sqrt(beta))
        w = rng.normal(u, 1.0, (num_features, num_classes))
        b = rng.normal(u, 1.0, num_classes)
        v = rng.normal(b_mean, 1.0, num_features)
        xk = rng.normal(v, np.sqrt(cov), (n, num_features))
        y[at : at + n] = np.argmax(xk @ w + b, axis=1)
        x[at : at + n] = xk
        at += n
    mean, std = x.mean(0), x.std(0)
    x -= mean  # (in place: the same float32 arithmetic as (x - mean) / (std + 1e-6))
    x /= std + 1e-6
    groups = np.repeat(np.arange(num_writers), sizes)
    return Dataset(x, y, num_classes, groups)


def check_dataset_path(name: str, path: Path) -> None:
    """What a spec's ``dataset.path`` must be, checked when the spec is loaded (cheap:
    an ``.npz`` lists its arrays without reading them).

    Raises
    ------
    ValueError
        Naming ``path`` and what is wrong with it.
    """
    if name in {"imagefolder", "cifar10"}:
        if not path.is_dir():
            raise ValueError(f"path: no such folder: {path}")
        return
    if not path.exists():
        raise ValueError(f"path: no such file: {path}")
    if name != "npz":
        return
    try:
        with np.load(path) as f:
            arrays = list(f.files) if isinstance(f, np.lib.npyio.NpzFile) else None
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"path: {path} is not a .npz file ({exc})") from None
    if arrays is None or not {"x", "y"} <= set(arrays):
        raise ValueError(f"path: {path} must be a .npz with arrays 'x' and 'y', has {arrays}")


@register_dataset("npz")
def load_npz(path: str | None = None, **_: object) -> Dataset:
    """A local ``.npz`` with arrays ``x`` (features) and ``y`` (integer labels).

    Images may be ``(n, H, W)``, ``(n, H, W, C)`` (uint8 or float) or ``(n, C, H, W)``.
    """
    if not path:
        raise ValueError("dataset 'npz' needs dataset.path (a .npz file with 'x' and 'y')")
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"dataset.path: no such file: {p}")
    with np.load(p) as f:
        if "x" not in f or "y" not in f:
            raise ValueError(f"dataset.path: {p} must hold arrays 'x' and 'y', has {list(f)}")
        x, y = f["x"], f["y"]
    return Dataset(_to_nchw(x), y.astype(np.int64).reshape(-1), int(y.max()) + 1)


@register_dataset("imagefolder")
def load_imagefolder(path: str | None = None, image_size: int = 32, **_: object) -> Dataset:
    """A folder with one sub-folder per class holding images (PNG/JPEG), resized square."""
    from PIL import Image

    if not path:
        raise ValueError("dataset 'imagefolder' needs dataset.path (a folder of class folders)")
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ValueError(f"dataset.path: no such folder: {root}")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    if not classes:
        raise ValueError(f"dataset.path: {root} has no class sub-folders")
    xs, ys = [], []
    for label, cls in enumerate(classes):
        for f in sorted((root / cls).iterdir()):
            if f.suffix.lower() not in {".png", ".jpg", ".jpeg", ".bmp"}:
                continue
            img = Image.open(f).convert("RGB").resize((image_size, image_size))
            xs.append(np.asarray(img, dtype=np.uint8))
            ys.append(label)
    if not xs:
        raise ValueError(f"dataset.path: no images under {root}")
    return Dataset(_to_nchw(np.stack(xs)), np.array(ys, dtype=np.int64), len(classes))


@register_dataset("cifar10")
def load_cifar10(path: str | None = None, **_: object) -> Dataset:
    """CIFAR-10 from local python-pickle batches (``data_batch_*``, ``test_batch``)."""
    import pickle

    if not path:
        raise ValueError("dataset 'cifar10' needs dataset.path (cifar-10-batches-py folder)")
    root = Path(path).expanduser()
    files = sorted(root.glob("data_batch_*")) + sorted(root.glob("test_batch"))
    if not files:
        raise ValueError(f"dataset.path: no data_batch_*/test_batch files in {root}")
    xs, ys = [], []
    for f in files:
        with open(f, "rb") as fh:
            d = pickle.load(fh, encoding="bytes")
        xs.append(np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(d[b"labels"], dtype=np.int64))
    return Dataset(np.concatenate(xs).astype(np.float32) / 255.0, np.concatenate(ys), 10)


def _to_nchw(x: np.ndarray) -> np.ndarray:
    """Images to float32 ``(n, C, H, W)`` in [0, 1]; vectors pass through as float32."""
    scale = 255.0 if x.dtype == np.uint8 else 1.0
    x = x.astype(np.float32) / scale
    if x.ndim == 3:
        return x[:, None]
    if x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return x


#: Environment variable naming a folder where a generated dataset (:data:`GENERATED`) is
#: kept as ``.npy`` files: the first process of a run generates and writes it, the
#: others (a simulation's Ray workers) memory-map it instead of generating it again
#: (2 million synthetic samples: ~480 MB and seconds of CPU per process).
DATA_CACHE_ENV = "TESTBED_DATA_CACHE"
#: Datasets generated from their parameters (the same arrays in every process).
GENERATED = frozenset({"synthetic"})


@lru_cache(maxsize=8)
def load_dataset(name: str, params: tuple[tuple[str, object], ...] = ()) -> Dataset:
    """Load (and cache per process) the dataset ``name`` with keyword ``params``; a
    generated one is shared through :data:`DATA_CACHE_ENV`'s folder when it is set."""
    folder = os.environ.get(DATA_CACHE_ENV)
    if not folder or name not in GENERATED:
        return DATASETS[name](**dict(params))
    return _shared(Path(folder), name, params)


def _shared(folder: Path, name: str, params: tuple[tuple[str, object], ...]) -> Dataset:
    """The dataset from ``folder`` (memory-mapped, read-only), or generated and written
    there (each file written under a temporary name, then renamed; ``meta`` last)."""
    import hashlib
    import json

    key = hashlib.sha256(json.dumps([name, params], default=str).encode()).hexdigest()[:20]
    meta = folder / f"{key}.json"
    if meta.exists():
        info = json.loads(meta.read_text())
        arrays = {k: np.load(folder / f"{key}.{k}.npy", mmap_mode="r") for k in info["arrays"]}
        return Dataset(arrays["x"], arrays["y"], int(info["num_classes"]), arrays.get("g"))
    data = DATASETS[name](**dict(params))
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {"x": data.x, "y": data.y} | ({"g": data.groups} if data.groups is not None else {})
    for k, a in arrays.items():
        tmp = folder / f"{key}.{k}.{os.getpid()}.tmp.npy"
        np.save(tmp, a)
        os.replace(tmp, folder / f"{key}.{k}.npy")
    tmp = folder / f"{key}.{os.getpid()}.tmp.json"
    tmp.write_text(json.dumps({"arrays": sorted(arrays), "num_classes": data.num_classes}))
    os.replace(tmp, meta)
    return data
