"""Training and evaluation of the multiplexing schemes through the channel.

Training draws, per step, an independent mini-batch for every task (each task sees its own
samples), a per-sample SNR uniformly in ``[snr_min_db, snr_max_db]`` and per-sample channel
blocks from a bank of Sionna realisations (drawn once: generating TR 38.901 CDL channels
costs ~1 ms per realisation on this CPU, too slow to redraw every step). Gradients flow
through Sionna's ``ApplyOFDMChannel`` and ``lmmse_equalizer`` into the encoders.

Evaluation uses a separate bank drawn after training, fixed test-set orders per task and
the same channel realisations for every scheme (common random numbers).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from radio.baselines import BitLevelSystem
from radio.channel import snr_db_to_no
from radio.tasks import TaskData

__all__ = ["TrainConfig", "TaskTensors", "train_system", "evaluate_system", "measure_compute_s"]


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (see :class:`radio.config.SemanticMuxSpec` for meanings)."""

    steps: int
    batch_size: int
    learning_rate: float
    snr_min_db: float
    snr_max_db: float
    vib_beta: float = 0.0
    aux_weight: float = 0.5


class TaskTensors:
    """Tasks as tensors on the runtime device, with a fixed test order per task.

    Parameters
    ----------
    tasks : list of TaskData
    device : str
    gen : torch.Generator
        The single seeded random source (used for the test orders).
    """

    def __init__(self, tasks: list[TaskData], device: str, gen: torch.Generator):
        self.tasks = tasks
        f = lambda a, dt: torch.as_tensor(a, dtype=dt, device=device)  # noqa: E731
        self.x_train = [f(t.x_train, torch.float32) for t in tasks]
        self.y_train = [f(t.y_train, torch.long) for t in tasks]
        self.x_test = [f(t.x_test, torch.float32) for t in tasks]
        self.y_test = [f(t.y_test, torch.long) for t in tasks]
        self.num_test = min(len(y) for y in self.y_test)
        self.test_order = [
            torch.randperm(len(y), generator=gen, device="cpu")[: self.num_test].to(device)
            for y in self.y_test
        ]

    def subset(self, k: int) -> TaskTensors:
        """The first ``k`` tasks, sharing tensors and test orders with ``self``."""
        sub = object.__new__(TaskTensors)
        sub.tasks = self.tasks[:k]
        for name in ("x_train", "y_train", "x_test", "y_test", "test_order"):
            setattr(sub, name, getattr(self, name)[:k])
        sub.num_test = self.num_test
        return sub

    def train_batch(self, batch_size: int, gen: torch.Generator):
        """Independent random samples per task: ([K][B, d_k], [K][B])."""
        xs, ys = [], []
        for x, y in zip(self.x_train, self.y_train, strict=True):
            i = torch.randint(0, len(y), (batch_size,), generator=gen, device="cpu").to(x.device)
            xs.append(x[i])
            ys.append(y[i])
        return xs, ys

    def test_batch(self, start: int, stop: int):
        """Fixed-order test samples ``start:stop`` per task: ([K][B, d_k], [K][B])."""
        xs = [x[o[start:stop]] for x, o in zip(self.x_test, self.test_order, strict=True)]
        ys = [y[o[start:stop]] for y, o in zip(self.y_test, self.test_order, strict=True)]
        return xs, ys


def train_system(
    system: nn.Module,
    data: TaskTensors,
    cfg: TrainConfig,
    h_bank: torch.Tensor | None,
    gen: torch.Generator,
    progress: Callable[[float], None] | None = None,
) -> dict:
    """Train a scheme; bit-level trains without the channel (separation design).

    Parameters
    ----------
    system : SemanticMuxSystem | OrthogonalStreamsSystem | BitLevelSystem
    data : TaskTensors
    cfg : TrainConfig
    h_bank : torch.Tensor, complex, shape [R, M, N, T, F] or None
        Channel blocks to sample from (unused by the bit-level baseline).
    gen : torch.Generator
        The single seeded random source.
    progress : callable(fraction) or None

    Returns
    -------
    dict
        ``final_loss`` (mean of the last 10% of steps) and ``train_time_s`` (measured).
    """
    opt = torch.optim.Adam(system.parameters(), lr=cfg.learning_rate)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps)
    ce = nn.CrossEntropyLoss()
    system.train()
    losses = []
    t0 = time.perf_counter()
    digital = isinstance(system, BitLevelSystem)
    for step in range(cfg.steps):
        xs, ys = data.train_batch(cfg.batch_size, gen)
        if digital:
            assert isinstance(system, BitLevelSystem)
            logits, kl, aux_logits = system.classify_clean(xs), torch.zeros(()), None
        else:
            assert h_bank is not None, "a channel bank is needed to train through the channel"
            b = cfg.batch_size
            i = torch.randint(0, h_bank.shape[0], (b,), generator=gen, device="cpu")
            u = torch.rand(b, generator=gen, device="cpu")
            snr = cfg.snr_min_db + (cfg.snr_max_db - cfg.snr_min_db) * u
            dev = xs[0].device
            logits, extra = system(xs, h_bank[i.to(h_bank.device)], snr_db_to_no(snr).to(dev))
            kl, aux_logits = extra["kl"], extra["aux_logits"]
        loss = sum(ce(lg, y) for lg, y in zip(logits, ys, strict=True))
        if aux_logits is not None:
            # Auxiliary supervision of each encoder latent (see semantic.py): keeps every
            # task's representation informative while the tasks compete for the channel.
            loss = loss + cfg.aux_weight * sum(
                ce(lg, y) for lg, y in zip(aux_logits, ys, strict=True)
            )
        loss = loss + cfg.vib_beta * kl.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if progress and (step % 50 == 0 or step == cfg.steps - 1):
            progress((step + 1) / cfg.steps)
    system.eval()
    tail = losses[-max(1, cfg.steps // 10):]
    return {"final_loss": float(np.mean(tail)), "train_time_s": time.perf_counter() - t0}


@torch.no_grad()
def evaluate_system(
    system: nn.Module,
    data: TaskTensors,
    h_eval: torch.Tensor,
    snr_db: float,
    num_samples: int,
    draws: int,
    chunk: int = 512,
) -> list[float]:
    """Per-task test accuracy at one SNR over ``draws`` channel draws per test sample.

    Parameters
    ----------
    h_eval : torch.Tensor, complex, shape [>= num_samples * draws, M, N, T, F]
        Evaluation channel blocks (realisation ``d * num_samples + i`` for sample i, draw d).
    snr_db : float
        Average received SNR per receive antenna [dB].

    Returns
    -------
    list of float
        Accuracy per task in [0, 1].
    """
    system.eval()
    correct = torch.zeros(len(data.tasks))
    n = min(num_samples, data.num_test)
    if h_eval.shape[0] < n * draws:
        raise ValueError(f"h_eval holds {h_eval.shape[0]} blocks, needs {n} x {draws} draws")
    for d in range(draws):
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            xs, ys = data.test_batch(s, e)
            h = h_eval[d * n + s : d * n + e]
            no = snr_db_to_no(torch.full((e - s,), float(snr_db), device=h.device))
            logits, _ = system(xs, h, no)
            for k, (lg, y) in enumerate(zip(logits, ys, strict=True)):
                correct[k] += (lg.argmax(-1) == y).sum().cpu()
    return (correct / (n * draws)).tolist()


def measure_compute_s(
    system: Any, data: TaskTensors, h: torch.Tensor, batch: int, reps: int
) -> dict:
    """Median wall time [s] per inference of transmit and receive processing (measured).

    The channel itself (simulation) and the LMMSE equaliser (identical for all schemes)
    are excluded; encoders, multiplexer/precoder, LDPC encoding, QAM mapping, demapping,
    LDPC decoding, demultiplexer and task heads are included.
    """
    xs, _ = data.test_batch(0, batch)
    no = snr_db_to_no(torch.full((batch,), 10.0, device=h.device))
    tx_t, rx_t = [], []
    with torch.no_grad():
        for r in range(reps + 1):
            t0 = time.perf_counter()
            out = system.transmit(xs)
            t1 = time.perf_counter()
            sym = out[0] if isinstance(out, tuple) else out
            rx = system.propagate(sym, h[:batch], no)
            t2 = time.perf_counter()
            system.receive(rx)
            t3 = time.perf_counter()
            if r:  # the first repetition warms up
                tx_t.append((t1 - t0) / batch)
                rx_t.append((t3 - t2) / batch)
    return {"tx_s": statistics.median(tx_t), "rx_s": statistics.median(rx_t)}
