"""The trained offload schemes, split between the device (encode) and the fog (decode).

The run's process trains each scheme once (:func:`train_offload`, reusing
:mod:`radio.experiment` and :mod:`radio.train`) and writes into a folder every node
reads: ``meta.json`` (tasks, channel, SNR, seed), ``<scheme>.pt`` (weights),
``inputs.npz`` (the test samples the devices send, in order) and ``channel.pt`` (the
Sionna channel block of every sample: the fog applies exactly the realisation the
in-process evaluation used; only the noise is drawn anew).

On the wire (one inference = one sample of each of the K tasks):

- ``semantic_mux``: the ONE merged block, ``S x L`` complex64 symbols;
- ``orthogonal``: the K per-task streams, ``K x L_a`` complex64 symbols;
- ``bit_level``: the LDPC codeword's bits, packed 8 per byte (the fog maps them to QAM).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nodes.semantic.config import SemanticOffloadSpec
from radio.config import SemanticMuxSpec

__all__ = ["OffloadModel", "TaskShape", "train_offload"]


@dataclass(frozen=True)
class TaskShape:
    """What building a scheme needs of a task."""

    name: str
    input_dim: int
    num_classes: int


def _mux_spec(spec: SemanticOffloadSpec, num_samples: int, snr_db: float) -> SemanticMuxSpec:
    """The ``semantic_mux`` settings of the offload: one K, one SNR, enough test samples."""
    data = spec.model.model_dump()
    data.update(
        num_tasks_list=(spec.num_tasks,), snr_db_list=(snr_db,), quick=True, device="cpu",
        quick_eval_samples=max(num_samples, 10), quick_train_steps=spec.model.effective_train_steps,
    )
    return SemanticMuxSpec.model_validate(data)


def train_offload(
    spec: SemanticOffloadSpec,
    seed: int,
    snr_db: float,
    num_samples: int,
    out_dir: Path,
    say: Callable[[str, float], None],
) -> dict[str, Any]:
    """Train every scheme, evaluate it in-process, write the nodes' folder.

    Parameters
    ----------
    spec : SemanticOffloadSpec
    seed : int
        Seed of Sionna's random source (weights, data order, channels).
    snr_db : float
        SNR [dB] of the evaluation (and of the fog's channel).
    num_samples : int
        Test samples the devices will send (all devices together).
    out_dir : Path
        The folder the nodes read.
    say : callable
        Progress ``(description, fraction)``.

    Returns
    -------
    dict
        ``labels`` [K][n] (int lists), ``in_process`` {scheme: [K] accuracies},
        ``channel_uses`` {scheme: int}, ``num_samples`` n, ``train`` {scheme: dict}.
    """
    import torch

    from radio.experiment import _build, _prepare
    from radio.train import evaluate_system, train_system

    mspec = _mux_spec(spec, num_samples, snr_db)
    st = _prepare(mspec, seed, say)
    k = spec.num_tasks
    n = min(num_samples, st.n_eval)
    data = st.data_all.subset(k)
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"in_process": {}, "channel_uses": {}, "train": {}, "num_samples": n}
    for j, scheme in enumerate(spec.schemes):
        say(f"training {scheme}", 0.1 + 0.8 * j / len(spec.schemes))
        system = _build(scheme, mspec, st.tasks[:k], st.train_channel).to("cpu")
        tr = train_system(system, data, st.cfg, st.h_train, st.gen)
        system.channel = st.channel
        acc = evaluate_system(system, data, st.h_eval, snr_db, n, 1)
        result["in_process"][scheme] = [float(a) for a in acc]
        result["channel_uses"][scheme] = int(system.channel_uses())
        result["train"][scheme] = tr
        torch.save(system.state_dict(), out_dir / f"{scheme}.pt")
    xs, ys = data.test_batch(0, n)
    np.savez(out_dir / "inputs.npz", **{f"x{i}": x.cpu().numpy() for i, x in enumerate(xs)})
    torch.save(st.h_eval[:n].clone(), out_dir / "channel.pt")
    tasks = [TaskShape(t.name, t.input_dim, t.num_classes) for t in st.tasks[:k]]
    meta = {
        "seed": seed, "snr_db": snr_db, "num_samples": n, "schemes": list(spec.schemes),
        "model": mspec.model_dump(mode="json"), "tasks": [t.__dict__ for t in tasks],
    }
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    result["labels"] = [y.cpu().tolist() for y in ys]
    result["tasks"] = [t.name for t in tasks]
    return result


class OffloadModel:
    """One scheme as a node holds it: built from the folder, weights loaded.

    Parameters
    ----------
    folder : Path
        What :func:`train_offload` wrote.
    scheme : str
        ``semantic_mux``, ``orthogonal`` or ``bit_level``.
    """

    def __init__(self, folder: Path, scheme: str) -> None:
        import torch

        from radio.channel import MIMOChannel
        from radio.experiment import _build
        from radio.numerology import Numerology

        meta = json.loads((folder / "meta.json").read_text())
        self.spec = SemanticMuxSpec.model_validate(meta["model"])
        self.snr_db = float(meta["snr_db"])
        self.scheme = scheme
        s = self.spec
        self.numerology = Numerology(s.subcarrier_spacing_hz, s.num_resource_blocks)
        channel = MIMOChannel(
            s.channel_model, s.channel_profile, s.carrier_frequency_hz, self.numerology,
            s.num_tx_antennas, s.num_rx_antennas, s.delay_spread_s, s.max_speed_mps,
            s.subcarriers_per_block, s.flat_correlation, device="cpu",
        )
        tasks = [TaskShape(**t) for t in meta["tasks"]]
        self.system: Any = _build(scheme, s, tasks, channel)
        self.system.load_state_dict(torch.load(folder / f"{scheme}.pt", weights_only=True))
        self.system.eval()
        self.k = len(tasks)

    def channel_uses(self) -> int:
        """Resource elements one inference occupies."""
        return int(self.system.channel_uses())

    # -- device side ---------------------------------------------------------------------
    def encode(self, xs: list[np.ndarray]) -> bytes:
        """The K task inputs of one sample ([K][1, d_k]) -> the bytes sent."""
        import torch

        with torch.no_grad():
            t = [torch.as_tensor(x, dtype=torch.float32) for x in xs]
            if self.scheme == "bit_level":
                return self._codeword(t)
            sym, _extra = self.system.transmit(t)
            if self.scheme == "orthogonal":
                sym = torch.cat(sym, dim=1)  # [1, K, L_a]
            return bytes(sym.numpy().astype(np.complex64).tobytes())

    def _codeword(self, xs: list[Any]) -> bytes:
        import torch

        from radio.baselines import quantize

        sys_ = self.system
        idx = torch.cat([quantize(f, sys_.qbits)[1] for f in sys_.features(xs)], dim=1)
        shifts = torch.arange(sys_.qbits - 1, -1, -1)
        bits = ((idx[..., None] >> shifts) & 1).flatten(1).float()
        cw = sys_.ldpc_enc(bits)  # [1, n]
        return bytes(np.packbits(cw.numpy().astype(np.uint8).reshape(-1)).tobytes())

    # -- fog side ------------------------------------------------------------------------
    def decode(self, payload: bytes, h: Any, snr_db: float) -> list[int]:
        """Channel (Sionna, block ``h`` [1, M, N, T, F]), equaliser, demultiplexer and
        heads: the bytes of one inference -> one predicted class per task."""
        import torch

        from radio.channel import snr_db_to_no

        no = snr_db_to_no(torch.full((1,), float(snr_db)))
        with torch.no_grad():
            rx = self.system.propagate(self._symbols(payload), h, no)
            logits = self.system.receive(rx)
        return [int(lg.argmax(-1)[0]) for lg in logits]

    def _symbols(self, payload: bytes) -> Any:
        import torch

        sys_ = self.system
        if self.scheme == "bit_level":
            bits = np.unpackbits(np.frombuffer(payload, dtype=np.uint8))[: sys_.code_bits]
            sym = sys_.mapper(torch.as_tensor(bits[None], dtype=torch.float32))
            return sym.reshape(1, sys_.uses, sys_.num_streams).transpose(1, 2)
        arr = torch.from_numpy(np.frombuffer(payload, dtype=np.complex64).copy())
        if self.scheme == "orthogonal":
            per = arr.reshape(1, self.k, -1)
            return [per[:, i : i + 1] for i in range(self.k)]
        return arr.reshape(1, sys_.num_streams, sys_.num_uses)

    def airtime_s(self) -> dict[str, float]:
        """MODELLED airtime of one inference: whole OFDM symbols / slots of the carrier."""
        uses = self.channel_uses()
        return {
            "symbol": self.numerology.airtime_s(uses, "symbol"),
            "slot": self.numerology.airtime_s(uses, "slot"),
            "ofdm_symbols": float(self.numerology.symbols_needed(uses)),
        }
