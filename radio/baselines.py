"""Baselines for semantic multiplexing.

(a) :class:`OrthogonalStreamsSystem`: one semantic (DeepJSCC-style, analogue) stream per
    task, orthogonal in space first and then in time: task k goes to stream ``k mod S`` of
    time slot ``k // S``; each slot lasts ``L_a`` channel uses, so K tasks need
    ``ceil(K / S) * L_a`` channel uses. Trained end to end through the same channel.
(b) :class:`BitLevelSystem`: separation-based digital transmission. Task features are
    learned without the channel, uniformly quantised, concatenated for all K tasks into one
    5G NR LDPC codeword (Sionna ``LDPC5GEncoder``/``LDPC5GDecoder``), QAM-mapped (Sionna
    ``Mapper``/``Demapper``), spatially multiplexed over all S streams, LMMSE-equalised,
    decoded, dequantised and classified.
"""

from __future__ import annotations

import math

import torch
from sionna.phy import Block
from sionna.phy.fec.ldpc import LDPC5GDecoder, LDPC5GEncoder
from sionna.phy.mapping import Demapper, Mapper
from torch import nn

from radio.channel import block_res
from radio.semantic import TaskEncoder, TaskHead, _mlp, normalize_power, real_to_complex

__all__ = ["OrthogonalStreamsSystem", "BitLevelSystem", "quantize"]


class OrthogonalStreamsSystem(Block):
    """Baseline (a): one semantic stream per task, orthogonal in streams, then time.

    Parameters
    ----------
    input_dims, num_classes : list of int
        Per-task input sizes and class counts (length K).
    latent_dim, hidden_dim : int
        Encoder latent size and hidden width.
    num_streams : int
        Spatial streams ``S``.
    uses_per_task : int
        ``L_a``, channel uses of one task's stream.
    vib : bool
        Stochastic encoders with KL term.
    channel : radio.channel.MIMOChannel
    """

    def __init__(
        self,
        input_dims: list[int],
        num_classes: list[int],
        latent_dim: int,
        hidden_dim: int,
        num_streams: int,
        uses_per_task: int,
        vib: bool,
        channel: Block,
    ):
        super().__init__()
        self.channel = channel
        self.k, self.num_streams, self.uses = len(input_dims), num_streams, uses_per_task
        self.encoders = nn.ModuleList(
            TaskEncoder(d, latent_dim, hidden_dim, vib) for d in input_dims
        )
        self.to_symbols = nn.ModuleList(
            nn.Linear(latent_dim, 2 * uses_per_task) for _ in input_dims
        )
        self.decoders = nn.ModuleList(
            _mlp(3 * uses_per_task, hidden_dim, latent_dim) for _ in input_dims
        )
        self.heads = nn.ModuleList(TaskHead(latent_dim, hidden_dim, c) for c in num_classes)
        self.aux_heads = nn.ModuleList(nn.Linear(latent_dim, c) for c in num_classes)

    @property
    def num_slots(self) -> int:
        """Time slots needed: ``ceil(K / S)``."""
        return math.ceil(self.k / self.num_streams)

    def channel_uses(self) -> int:
        """Channel uses per inference: ``ceil(K / S) * L_a``."""
        return self.num_slots * self.uses

    def active_streams(self) -> float:
        """Average streams carrying symbols per channel use: ``K / ceil(K / S)``."""
        return self.k / self.num_slots

    def transmit(self, xs: list[torch.Tensor]) -> tuple[list[torch.Tensor], dict]:
        """Inputs [K][B, d_k] -> per-task unit-power symbols [K][B, 1, L_a] and extras.

        Extras as in :meth:`radio.semantic.SemanticMuxSystem.transmit` (same auxiliary loss,
        so both learned schemes are trained alike).
        """
        syms, kls, aux = [], [], []
        for enc, proj, a, x in zip(self.encoders, self.to_symbols, self.aux_heads, xs,
                                   strict=True):
            z, kl = enc(x)
            syms.append(normalize_power(real_to_complex(proj(z), 1, self.uses)))
            kls.append(kl)
            aux.append(a(z))
        return syms, {"kl": torch.stack(kls).sum(0), "aux_logits": aux}

    def receive(self, rx: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
        """Per-task (x_hat [B, L_a], no_eff [B, L_a]) -> logits [K][B, C_k]."""
        out = []
        for (xh, ne), dec, head in zip(rx, self.decoders, self.heads, strict=True):
            f = torch.cat([xh.real, xh.imag, torch.log1p(ne)], dim=1)
            out.append(head(dec(f)))
        return out

    def call(
        self, xs: list[torch.Tensor], h: torch.Tensor, no: torch.Tensor
    ) -> tuple[list[torch.Tensor], dict]:
        """Inputs [K][B, d_k], block channel [B, M, N, T, F], noise [B] -> logits, extras."""
        syms, extra = self.transmit(xs)
        return self.receive(self.propagate(syms, h, no)), extra

    def propagate(
        self, syms: list[torch.Tensor], h: torch.Tensor, no: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Slot by slot over the channel: [K][B, 1, L_a] -> per-task (x_hat, no_eff) [B, L_a]."""
        rx: list[tuple[torch.Tensor, torch.Tensor]] = []
        for j in range(self.num_slots):
            tasks = range(j * self.num_streams, min(self.k, (j + 1) * self.num_streams))
            x = torch.cat([syms[t] for t in tasks], dim=1)  # [B, S_j, L_a]
            xh, ne = self.channel(x, block_res(h, j * self.uses, self.uses), no)
            rx.extend((xh[:, i], ne[:, i]) for i in range(len(tasks)))
        return rx


def quantize(f: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Uniform quantiser on [-1, 1] with ``2**bits`` levels and a straight-through gradient.

    Returns
    -------
    deq : torch.Tensor, float, same shape as ``f``
        Dequantised values (gradient passes straight through).
    idx : torch.Tensor, int64, same shape as ``f``
        Level indices in ``0 .. 2**bits - 1``.
    """
    levels = 2**bits - 1
    idx = torch.round((f.clamp(-1, 1) + 1) / 2 * levels)
    deq = idx / levels * 2 - 1
    return f + (deq - f).detach(), idx.long()


class BitLevelSystem(Block):
    """Baseline (b): quantised features -> 5G LDPC -> QAM -> MIMO -> decode -> classify.

    Parameters
    ----------
    input_dims, num_classes : list of int
        Per-task input sizes and class counts (length K).
    feature_dim : int
        Features per task (``tanh``-bounded, then quantised).
    hidden_dim : int
        Hidden width of encoders/heads.
    quantization_bits : int
        Bits per feature.
    code_rate : float
        LDPC code rate; ``n`` is rounded up to fill whole channel uses on all streams.
    bits_per_symbol : int
        QAM order in bits.
    num_iterations : int
        LDPC belief-propagation iterations.
    num_streams : int
        Spatial streams ``S``.
    channel : radio.channel.MIMOChannel
    """

    def __init__(
        self,
        input_dims: list[int],
        num_classes: list[int],
        feature_dim: int,
        hidden_dim: int,
        quantization_bits: int,
        code_rate: float,
        bits_per_symbol: int,
        num_iterations: int,
        num_streams: int,
        channel: Block,
    ):
        super().__init__()
        self.channel = channel
        self.k_tasks, self.num_streams = len(input_dims), num_streams
        self.feature_dim, self.qbits, self.m = feature_dim, quantization_bits, bits_per_symbol
        self.encoders = nn.ModuleList(_mlp(d, hidden_dim, feature_dim) for d in input_dims)
        self.heads = nn.ModuleList(TaskHead(feature_dim, hidden_dim, c) for c in num_classes)
        self.info_bits = self.k_tasks * feature_dim * quantization_bits
        per_use = bits_per_symbol * num_streams
        self.code_bits = math.ceil(self.info_bits / code_rate / per_use) * per_use
        self.uses = self.code_bits // per_use
        self.ldpc_enc = LDPC5GEncoder(self.info_bits, self.code_bits, bits_per_symbol)
        self.ldpc_dec = LDPC5GDecoder(self.ldpc_enc, num_iter=num_iterations, hard_out=True)
        self.mapper = Mapper("qam", bits_per_symbol)
        self.demapper = Demapper("app", "qam", bits_per_symbol)

    def channel_uses(self) -> int:
        """Channel uses per inference: ``n / (bits_per_symbol * S)``."""
        return self.uses

    def active_streams(self) -> int:
        """Streams carrying symbols in every channel use."""
        return self.num_streams

    def features(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Inputs [K][B, d_k] -> bounded features [K][B, feature_dim] in [-1, 1]."""
        return [torch.tanh(e(x)) for e, x in zip(self.encoders, xs, strict=True)]

    def classify_clean(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Training path without the channel: quantised features -> logits [K][B, C_k]."""
        return [h(quantize(f, self.qbits)[0]) for h, f in zip(self.heads, self.features(xs),
                                                                  strict=True)]

    def transmit(self, xs: list[torch.Tensor]) -> torch.Tensor:
        """Inputs -> QAM symbols [B, S, L_b] (features -> bits -> LDPC -> QAM)."""
        idx = torch.cat([quantize(f, self.qbits)[1] for f in self.features(xs)], dim=1)
        shifts = torch.arange(self.qbits - 1, -1, -1, device=idx.device)
        bits = ((idx[..., None] >> shifts) & 1).flatten(1).float()  # [B, info_bits], MSB first
        cw = self.ldpc_enc(bits)  # [B, n]
        sym = self.mapper(cw)  # [B, n / m]
        b = sym.shape[0]
        return sym.reshape(b, self.uses, self.num_streams).transpose(1, 2)

    def propagate(
        self, sym: torch.Tensor, h: torch.Tensor, no: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Channel + LMMSE: symbols [B, S, L_b] -> (x_hat, no_eff), each [B, S, L_b]."""
        return self.channel(sym, block_res(h, 0, self.uses), no)

    def receive(self, rx: tuple[torch.Tensor, torch.Tensor]) -> list[torch.Tensor]:
        """Equalised [B, S, L_b] -> LLRs -> LDPC decode -> dequantise -> logits [K][B, C_k]."""
        x_hat, no_eff = rx
        b = x_hat.shape[0]
        y = x_hat.transpose(1, 2).reshape(b, -1)
        no = no_eff.transpose(1, 2).reshape(b, -1)
        llr = self.demapper(y, no)
        bits = self.ldpc_dec(llr).long()  # [B, info_bits]
        weights = 2 ** torch.arange(self.qbits - 1, -1, -1, device=bits.device)
        idx = (bits.reshape(b, -1, self.qbits) * weights).sum(-1).float()
        deq = idx / (2**self.qbits - 1) * 2 - 1
        feats = deq.reshape(b, self.k_tasks, self.feature_dim)
        return [h(feats[:, i]) for i, h in enumerate(self.heads)]

    @torch.no_grad()
    def call(
        self, xs: list[torch.Tensor], h: torch.Tensor, no: torch.Tensor
    ) -> tuple[list[torch.Tensor], dict]:
        """Inputs [K][B, d_k], block channel [B, M, N, T, F], noise [B] -> logits, extras."""
        sym = self.transmit(xs)
        zeros = torch.zeros(sym.shape[0], device=sym.device)
        return self.receive(self.propagate(sym, h, no)), {"kl": zeros, "aux_logits": None}
