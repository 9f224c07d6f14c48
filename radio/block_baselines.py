"""Baselines that send exactly the semantic multiplexer's block: S streams x L channel uses.

Both answer a question about :class:`radio.semantic.SemanticMuxSystem` at EQUAL channel
uses, load (``S * L`` complex symbols) and transmit power:

* :class:`OrthogonalBlockSystem` (``orthogonal_equal``): the block is split orthogonally,
  every task gets its own ``floor(S * L / K)`` resource elements (streams first, then time), one
  analogue semantic stream per task as in :class:`radio.baselines.OrthogonalStreamsSystem`.
  Does merging beat dividing the same resources?
* :class:`JointEncoderSystem` (``joint_encoder``): ONE encoder reads all K inputs
  (concatenated) into one latent, a linear map puts it on the block, and the receiver is
  the multiplexer's (shared layer, per-task unbinding networks, heads). The multiplexer's
  merge is a linear map of per-task latents (bindings); this baseline drops the per-task
  structure and lets one network mix the inputs. What do the bindings add?
"""

from __future__ import annotations

import math

import torch
from sionna.phy import Block
from torch import nn

from radio.baselines import OrthogonalStreamsSystem
from radio.channel import block_res
from radio.semantic import SemanticMultiplexer, SemanticMuxSystem, TaskEncoder, normalize_power

__all__ = ["OrthogonalBlockSystem", "JointEncoderSystem", "joint_hidden_dim"]


class OrthogonalBlockSystem(OrthogonalStreamsSystem):
    """Orthogonal split of ONE ``S x L`` block between K tasks (equal channel uses).

    Task k sends ``n = floor(S * L / K)`` complex symbols on the resource elements
    ``k*n .. (k+1)*n - 1`` of the block flattened stream by stream (K = 2 on 4 x 8: two
    streams each; K = 4: one stream each; K = 8: half a stream each). The ``S*L mod K``
    resource elements left over (K = 3: 2 of 32) stay empty and the block is scaled to unit
    average power, so it carries the multiplexer's energy. All K tasks' symbols go out in
    the same L channel uses; the receiver equalises the block once (LMMSE) and each task's
    decoder reads its own resource elements.

    Parameters
    ----------
    input_dims, num_classes : list of int
        Per-task input sizes and class counts (length K).
    latent_dim, hidden_dim : int
        Encoder latent size and hidden width.
    num_streams, num_uses : int
        ``S`` and ``L`` of the block (as the multiplexer's).
    vib : bool
        Stochastic encoders with KL term.
    channel : radio.channel.MIMOChannel

    Raises
    ------
    ValueError
        If the block has fewer than K resource elements (``S * L < K``).
    """

    def __init__(
        self,
        input_dims: list[int],
        num_classes: list[int],
        latent_dim: int,
        hidden_dim: int,
        num_streams: int,
        num_uses: int,
        vib: bool,
        channel: Block,
    ):
        k = len(input_dims)
        if num_streams * num_uses < k:
            raise ValueError(
                f"mux_channel_uses: orthogonal_equal splits {num_streams} streams x "
                f"{num_uses} uses between K={k} tasks; needs S*L >= K"
            )
        per_task = num_streams * num_uses // k
        super().__init__(input_dims, num_classes, latent_dim, hidden_dim, num_streams,
                         per_task, vib, channel)
        self.block_uses = num_uses

    def channel_uses(self) -> int:
        """Channel uses per inference: the multiplexer's ``L``."""
        return self.block_uses

    def active_streams(self) -> int:
        """Streams carrying symbols in every channel use: all ``S``."""
        return self.num_streams

    def propagate(
        self, syms: list[torch.Tensor], h: torch.Tensor, no: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-task symbols [K][B, 1, n] -> one block [B, S, L] -> per-task (x_hat, no_eff)
        [B, n] each."""
        b, used = syms[0].shape[0], self.k * self.uses
        flat = torch.cat(syms, dim=2)[:, 0]  # [B, K*n]
        empty = self.num_streams * self.block_uses - used
        flat = torch.cat([flat, flat.new_zeros(b, empty)], dim=1)
        block = normalize_power(flat.reshape(b, self.num_streams, self.block_uses))
        xh, ne = self.channel(block, block_res(h, 0, self.block_uses), no)
        xh, ne = xh.flatten(1)[:, :used], ne.flatten(1)[:, :used]
        xh, ne = xh.reshape(b, self.k, self.uses), ne.reshape(b, self.k, self.uses)
        return [(xh[:, i], ne[:, i]) for i in range(self.k)]


def joint_hidden_dim(hidden_dim: int, num_tasks: int) -> int:
    """Width of the joint encoder: ``hidden_dim * sqrt(K)``, rounded.

    K per-task encoders of width h hold ~K h^2 weights in their middle layers; one
    encoder of width h sqrt(K) holds the same number there.
    """
    return round(hidden_dim * math.sqrt(num_tasks))


class JointEncoderSystem(SemanticMuxSystem):
    """One encoder over all K inputs, the multiplexer's block and receiver.

    Inputs [K][B, d_k] are concatenated, encoded (VIB as the multiplexer's encoders) into
    ONE latent of ``K * latent_dim`` reals (the size of the multiplexer's K latents
    together), standardised, mapped linearly onto ``2 S L`` reals (a single "binding" and
    the precoder), complex-reshaped and power-normalised. Receiver, heads and the auxiliary
    read-out loss (each task's linear read-out of the joint latent) are the multiplexer's.

    Parameters
    ----------
    Same as :class:`radio.semantic.SemanticMuxSystem`; the encoder's width is
    :func:`joint_hidden_dim`.
    """

    def __init__(
        self,
        input_dims: list[int],
        num_classes: list[int],
        latent_dim: int,
        hidden_dim: int,
        num_streams: int,
        num_uses: int,
        vib: bool,
        channel: Block,
    ):
        super().__init__(input_dims, num_classes, latent_dim, hidden_dim, num_streams,
                         num_uses, vib, channel)
        k = len(input_dims)
        joint = k * latent_dim
        width = joint_hidden_dim(hidden_dim, k)
        self.encoders = nn.ModuleList([TaskEncoder(sum(input_dims), joint, width, vib)])
        self.latent_norms = nn.ModuleList([nn.BatchNorm1d(joint, affine=False)])
        self.mux = SemanticMultiplexer(1, joint, num_streams, num_uses)
        self.aux_heads = nn.ModuleList(nn.Linear(joint, c) for c in num_classes)

    def transmit(self, xs: list[torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """Encode all inputs jointly: [K][B, d_k] -> symbols [B, S, L] and extras
        (``kl`` [B], ``aux_logits`` [K][B, C_k])."""
        z, kl = self.encoders[0](torch.cat(xs, dim=1))
        z = self.latent_norms[0](z)
        aux = [a(z) for a in self.aux_heads]
        return self.mux([z]), {"kl": kl, "aux_logits": aux}
