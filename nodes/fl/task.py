"""Data splits, training and evaluation shared by the ClientApp and the ServerApp."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

import numpy as np

from nodes.data.datasets import Dataset, load_dataset
from nodes.data.partition import partition
from nodes.fl.config import FLSpec, UplinkSpec

if TYPE_CHECKING:
    import torch
    from flwr.app import ArrayRecord, RecordDict

    from nodes.compression.svd import SvdStats


class SiloSplits:
    """Each silo's local train and test split, made on first use and kept.

    Silo ``p`` shuffles its indices with ``default_rng([seed, p])`` and keeps
    ``max(1, round(len * local_test_fraction))`` of them for test: the same splits as
    made eagerly, but a run of a million virtual clients makes only the sampled ones.

    Parameters
    ----------
    data : Dataset
        The whole dataset.
    pool : numpy.ndarray
        Indices into ``data`` of the samples left after the server's test set.
    parts : sequence of numpy.ndarray
        Each silo's indices into ``pool`` (a partitioner's result).
    seed : int
        The run's seed.
    local_test_fraction : float
        Share of a silo's samples held out for its local test.
    """

    def __init__(
        self,
        data: Dataset,
        pool: np.ndarray,
        parts: Sequence[np.ndarray],
        seed: int,
        local_test_fraction: float,
    ) -> None:
        self.data, self.pool, self.parts, self.seed = data, pool, parts, seed
        self.local_test_fraction = local_test_fraction
        self._made: dict[int, tuple[Dataset, Dataset]] = {}

    def __len__(self) -> int:
        return len(self.parts)

    def split(self, p: int) -> tuple[Dataset, Dataset]:
        """(train, test) of silo ``p``."""
        if not 0 <= p < len(self.parts):
            raise IndexError(p)
        got = self._made.get(p)
        if got is None:
            local = np.random.default_rng([self.seed, p]).permutation(self.parts[p])
            k = max(1, int(round(len(local) * self.local_test_fraction)))
            train, test = self.pool[local[k:]], self.pool[local[:k]]
            got = self._made[p] = (self.data.subset(train), self.data.subset(test))
        return got


class Silos(Sequence[Dataset]):
    """One side (``0``: train, ``1``: test) of :class:`SiloSplits`, as a sequence."""

    def __init__(self, splits: SiloSplits, side: int) -> None:
        self.splits, self.side = splits, side

    def __len__(self) -> int:
        return len(self.splits)

    def __getitem__(self, p: int) -> Dataset:  # type: ignore[override]
        if p < 0:
            p += len(self)
        return self.splits.split(int(p))[self.side]

    def __iter__(self) -> Iterator[Dataset]:
        return (self[p] for p in range(len(self)))


@dataclass(frozen=True, eq=False)
class Splits:
    """Server test set and each silo's local train/test split (made on first use: a
    ClientApp never copies the server's test set out of the data).

    Attributes
    ----------
    data : Dataset
        The whole dataset (possibly memory-mapped: :func:`nodes.data.datasets.load_dataset`).
    server_idx : numpy.ndarray
        Indices of the server's test set in ``data``.
    silo_train, silo_test : sequence of Dataset
        Each silo's local splits, by partition id.
    """

    data: Dataset
    server_idx: np.ndarray
    silo_train: Sequence[Dataset]
    silo_test: Sequence[Dataset]

    @cached_property
    def server_test(self) -> Dataset:
        """The server's test set (copied out of the data on first use)."""
        return self.data.subset(self.server_idx)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input sample."""
        return tuple(self.data.x.shape[1:])

    @property
    def num_classes(self) -> int:
        """Number of classes of the task."""
        return self.data.num_classes


@lru_cache(maxsize=4)
def _splits(spec_json: str, seed: int, num_partitions: int) -> Splits:
    spec = FLSpec.model_validate_json(spec_json)
    data = load_dataset(spec.dataset.name, spec.dataset.loader_params(seed))
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(data))
    n_test = int(round(len(data) * spec.dataset.test_fraction))
    pool = perm[n_test:]  # (indices: the samples are copied per silo, on first use)
    parts = partition(
        spec.partitioner.name,
        data.y[pool],
        num_partitions,
        seed,
        alpha=spec.partitioner.alpha,
        classes_per_silo=spec.partitioner.classes_per_silo,
        min_partition_size=spec.partitioner.min_partition_size,
    )
    silos = SiloSplits(data, pool, parts, seed, spec.dataset.local_test_fraction)
    return Splits(data, perm[:n_test], Silos(silos, 0), Silos(silos, 1))


def deterministic_torch() -> None:
    """One thread and deterministic kernels: the same seed gives the same numbers."""
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)


def get_splits(spec: FLSpec, seed: int, num_partitions: int) -> Splits:
    """Deterministic splits for ``seed`` (cached per process: warm nodes load once)."""
    return _splits(spec.model_dump_json(), seed, num_partitions)


@lru_cache(maxsize=4)
def parse_spec(spec_json: str) -> FLSpec:
    """Validate the run config's JSON settings once per process."""
    return FLSpec.model_validate(json.loads(spec_json))


def make_model(spec: FLSpec, splits: Splits) -> torch.nn.Module:
    """Build the task model for these data."""
    from nodes.models import build_model

    model: torch.nn.Module = build_model(
        spec.model.name, splits.input_shape, splits.num_classes, width=spec.model.width
    )
    return model


def train(
    model: torch.nn.Module,
    data: Dataset,
    spec: FLSpec,
    seed: int,
    lr: float | None = None,
    proximal_mu: float = 0.0,
) -> float:
    """Train ``model`` in place for ``spec.local_epochs``; return the mean training loss.

    Parameters
    ----------
    proximal_mu : float
        FedProx (Li et al. 2020): each step minimises the data loss plus
        ``(mu / 2) * ||w - w_global||^2``, with ``w_global`` the weights ``model`` has on
        entry (the received global model). The returned loss is the data loss only.
    """
    import torch

    torch.manual_seed(seed)
    x, y = torch.from_numpy(data.x), torch.from_numpy(data.y)
    lr = spec.lr if lr is None else lr
    opt: torch.optim.Optimizer
    if spec.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=spec.momentum)
    anchor = [p.detach().clone() for p in model.parameters()] if proximal_mu > 0 else []
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    total, count = 0.0, 0
    for _ in range(spec.local_epochs):
        perm = torch.randperm(len(y))
        for i in range(0, len(y), spec.batch_size):
            b = perm[i : i + spec.batch_size]
            opt.zero_grad()
            loss = loss_fn(model(x[b]), y[b])
            objective = loss + _proximal_term(model, anchor, proximal_mu) if anchor else loss
            objective.backward()
            opt.step()
            total += loss.item() * len(b)
            count += len(b)
    return total / max(count, 1)


def _proximal_term(model: torch.nn.Module, anchor: list[torch.Tensor], mu: float) -> torch.Tensor:
    """FedProx's ``(mu / 2) * ||w - w_anchor||^2`` over all parameters (differentiable)."""
    sq = sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor, strict=True))
    return (mu / 2) * sq  # type: ignore[return-value]  # sum of tensors is a tensor


def evaluate(model: torch.nn.Module, data: Dataset) -> tuple[float, float]:
    """Return (mean cross-entropy loss, accuracy) of ``model`` on ``data``."""
    import torch

    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(data.x))
        y = torch.from_numpy(data.y)
        loss = float(torch.nn.functional.cross_entropy(logits, y))
        acc = float((logits.argmax(1) == y).float().mean())
    return loss, acc


def class_accuracy(model: torch.nn.Module, data: Dataset) -> list[float]:
    """Accuracy per class (NaN for a class absent from ``data``)."""
    import torch

    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(data.x)).argmax(1).numpy()
    return [
        float(np.mean(pred[data.y == c] == c)) if np.any(data.y == c) else float("nan")
        for c in range(data.num_classes)
    ]


def load(model: torch.nn.Module, arrays: ArrayRecord) -> torch.nn.Module:
    """Load an ArrayRecord into ``model`` and return it."""
    model.load_state_dict(arrays.to_torch_state_dict())
    return model


def weighted_average(records: list[ArrayRecord], weights: list[float]) -> ArrayRecord:
    """FedAvg of ArrayRecords (numpy), as an ArrayRecord."""
    from collections import OrderedDict

    from flwr.app import Array, ArrayRecord

    total = float(sum(weights))
    keys = list(records[0].keys())
    out: OrderedDict[str, Array] = OrderedDict()
    for k in keys:
        acc = np.zeros(records[0][k].numpy().shape, dtype=np.float64)
        for r, w in zip(records, weights, strict=True):
            acc += r[k].numpy().astype(np.float64) * w
        out[k] = Array(np.ascontiguousarray((acc / total).astype(records[0][k].numpy().dtype)))
    return ArrayRecord(out)


def flip_labels(data: Dataset, seed: int) -> Dataset:
    """A faulty silo: labels mapped through a fixed derangement of the classes."""
    rng = np.random.default_rng(seed)
    perm = np.roll(rng.permutation(data.num_classes), 1)
    return Dataset(data.x, perm[data.y], data.num_classes, data.groups)


def corrupt(model: torch.nn.Module, mode: str, std: float, seed: int) -> None:
    """A faulty update: add Gaussian noise of ``std`` to every weight, or make it NaN."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if mode == "nan":
                p.fill_(float("nan"))
            else:
                p.add_(torch.randn(p.shape, generator=gen) * std)


def encode_delta(
    model: torch.nn.Module,
    received: ArrayRecord,
    uplink: UplinkSpec,
    state: RecordDict | None = None,
    stats: SvdStats | None = None,
) -> ArrayRecord:
    """TT-encode ``model``'s update against the ``received`` global ArrayRecord.

    With ``uplink.error_feedback`` the part of the update the codec dropped last time
    (kept in the node's Flower ``context.state`` as ``tt-residual``) is added to this
    update before encoding, and the new residual is stored back (Seide et al. 2014;
    Karimireddy et al. 2019), so compression error does not accumulate in the model.
    """
    from flwr.app import Array, ArrayRecord

    from nodes.compression.codec import decode_update, encode_update
    from nodes.compression.packed import pack

    glob = {k: v.numpy() for k, v in received.items()}
    delta = {k: v.detach().cpu().numpy() - glob[k] for k, v in model.state_dict().items()}
    if uplink.error_feedback and state is not None and "tt-residual" in state:
        res = state.array_records["tt-residual"]
        delta = {k: d + res[k].numpy() if k in res else d for k, d in delta.items()}
    enc = encode_update(
        delta, uplink.eps, uplink.max_rank, uplink.min_numel, uplink.svd_backend, stats,
        uplink.tensorization,
    )
    if uplink.wire_dtype == "float16":  # halve the bytes of cores and raw float tensors
        enc = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in enc.items()}
    if uplink.error_feedback and state is not None:
        dec = decode_update(_widen(enc))
        state["tt-residual"] = ArrayRecord(
            {k: Array(np.ascontiguousarray(delta[k] - dec[k])) for k in delta}
        )
    if uplink.packed:  # one array per dtype: no 128-byte .npy header per core
        enc = pack(enc)
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in enc.items()})


def _widen(enc: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float16 wire arrays back to float32 for the codec."""
    return {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in enc.items()}


def decode_delta(encoded: ArrayRecord, glob: Mapping[str, np.ndarray]) -> ArrayRecord:
    """Rebuild full weights (global + decoded update) as an ArrayRecord."""
    from collections import OrderedDict

    from flwr.app import Array, ArrayRecord

    from nodes.compression.codec import decode_update

    delta = decode_update(_widen({k: v.numpy() for k, v in encoded.items()}))
    full = OrderedDict((k, Array(np.ascontiguousarray(glob[k] + delta[k]))) for k in glob)
    return ArrayRecord(full)


def array_nbytes(record: ArrayRecord) -> int:
    """Serialized payload bytes of a Flower ``ArrayRecord`` (sum of its arrays' buffers)."""
    return int(sum(len(a.data) for a in record.values()))
