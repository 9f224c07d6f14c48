"""Semantic multiplexing (after Abdi, Meneghello, Restuccia, arXiv 2511.13779).

K task encoders each compress their own input into a latent ``z_k`` (optionally stochastic:
variational information bottleneck, which also makes the transmitted block stochastic).
Each latent is standardised, multiplied by a learned per-task binding matrix, and the K
bound latents are SUMMED into ONE representation of ``2*S*L`` reals, which a learned
linear precoder maps onto ``S`` MIMO streams x ``L`` channel uses, normalised to unit
average power per symbol. The receiver equalises (LMMSE, in
:class:`radio.channel.MIMOChannel`); a demultiplexer (shared first layer, then one
unbinding network per task) maps the equalised symbols and their noise variances back to
per-task latents, and per-task heads classify. During training a linear read-out of each
standardised latent adds an auxiliary loss (see :meth:`SemanticMuxSystem.transmit`).

The number of channel uses ``L`` does not grow with K: that is the point of the scheme.
The paper's own architecture is not public; this is our reading of its description
(learned bindings, joint processing, stochastic precoder, VIB loss). Design choices that
we found necessary for all 8 tasks to train (documented where they are made): standardised
latents, a linear transmitter after the sum, per-task receiver networks, auxiliary loss.
"""

from __future__ import annotations

import torch
from sionna.phy import Block
from torch import nn

__all__ = [
    "TaskEncoder",
    "TaskHead",
    "SemanticMultiplexer",
    "SemanticDemultiplexer",
    "SemanticMuxSystem",
    "normalize_power",
    "real_to_complex",
]


def real_to_complex(v: torch.Tensor, num_streams: int, num_uses: int) -> torch.Tensor:
    """Reshape reals [B, 2*S*L] into complex symbols [B, S, L]."""
    v = v.reshape(v.shape[0], num_streams, num_uses, 2)
    return torch.complex(v[..., 0], v[..., 1])


def normalize_power(x: torch.Tensor) -> torch.Tensor:
    """Scale each sample to unit average power per complex symbol.

    Parameters
    ----------
    x : torch.Tensor, complex, shape [B, S, L]

    Returns
    -------
    torch.Tensor, complex, shape [B, S, L] with ``mean(|x|^2) == 1`` per sample.
    """
    p = x.abs().square().mean(dim=(1, 2), keepdim=True)
    return x / torch.sqrt(p + 1e-12)


def _mlp(i: int, h: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.GELU(), nn.Linear(h, h), nn.GELU(), nn.Linear(h, o))


class TaskEncoder(Block):
    """Input [B, input_dim] -> latent [B, latent_dim] (+ KL [B] when ``stochastic``).

    With ``stochastic=True`` the encoder outputs a Gaussian posterior ``N(mu, sigma^2)``,
    samples it in training (reparameterisation; the mean at evaluation) and returns
    ``KL(q(z|x) || N(0, I))`` per sample for the VIB loss.
    """

    def __init__(self, input_dim: int, latent_dim: int, hidden_dim: int, stochastic: bool):
        super().__init__()
        self.stochastic = stochastic
        self.net = _mlp(input_dim, hidden_dim, 2 * latent_dim if stochastic else latent_dim)

    def call(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.net(x)
        if not self.stochastic:
            return out, torch.zeros(x.shape[0], device=x.device)
        mu, logvar = out.chunk(2, dim=-1)
        logvar = logvar.clamp(-10.0, 5.0)
        kl = 0.5 * (mu.square() + logvar.exp() - 1.0 - logvar).sum(-1)
        if self.training:
            eps = torch.randn(mu.shape, device=mu.device, generator=_rng(mu.device))
            mu = mu + eps * torch.exp(0.5 * logvar)
        return mu, kl


def _rng(device: torch.device) -> torch.Generator:
    from sionna.phy import config

    return config.torch_rng(str(device))


class TaskHead(Block):
    """Latent [B, latent_dim] -> logits [B, num_classes]."""

    def __init__(self, latent_dim: int, hidden_dim: int, num_classes: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(latent_dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, num_classes)
        )

    def call(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class SemanticMultiplexer(Block):
    """K latents [K][B, D] -> ONE block of channel symbols [B, S, L], unit power.

    ``m = sum_k z_k B_k`` (``z_k`` standardised per dimension) with a learned binding matrix
    ``B_k`` (D x 2SL) per task (initialised as a random projection), then a learned linear
    precoder to ``2*S*L`` reals, complex reshape and power normalisation. The merged
    representation has the same size (2SL) for any K. The joint (nonlinear) processing of
    all tasks happens in the encoders' training and in the receiver.
    """

    def __init__(self, num_tasks: int, latent_dim: int, num_streams: int, num_uses: int):
        super().__init__()
        self.num_streams, self.num_uses = num_streams, num_uses
        merged_dim = 2 * num_streams * num_uses
        gen = _rng(torch.device("cpu"))
        # Random projections as initial bindings (near-orthogonal task subspaces), learned.
        init = torch.randn(num_tasks, latent_dim, merged_dim, generator=gen) / latent_dim**0.5
        self.bindings = nn.Parameter(init)
        # Linear transmitter on purpose: with a shared nonlinear network between the sum and
        # the precoder, one task at K = 8 regularly lost the competition for the channel.
        self.precoder = nn.Linear(merged_dim, 2 * num_streams * num_uses, bias=False)

    def call(self, z: list[torch.Tensor]) -> torch.Tensor:
        # Each latent arrives standardised (batch statistics, see SemanticMuxSystem) so that
        # no task can drown the others in the power normalisation that follows, and no task
        # wastes power on a constant offset (without it, training collapses onto some tasks).
        stacked = torch.stack(z)
        merged = torch.einsum("kbd,kdm->bm", stacked, self.bindings)  # sum_k z_k B_k
        v = self.precoder(merged)
        return normalize_power(real_to_complex(v, self.num_streams, self.num_uses))


class SemanticDemultiplexer(Block):
    """Equalised symbols [B, S, L] + noise variances [B, S, L] -> K task latents [K][B, D].

    A shared first layer reads the received block (real, imaginary parts and
    ``log(1 + no_eff)``); each task then has its own unbinding network. (With a fully shared
    receiver network, one task at K = 8 regularly lost the competition for its capacity.)
    """

    def __init__(
        self, num_tasks: int, latent_dim: int, hidden_dim: int, num_streams: int, num_uses: int
    ):
        super().__init__()
        n = num_streams * num_uses
        self.shared = nn.Sequential(nn.Linear(3 * n, hidden_dim), nn.GELU())
        self.unbind = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden_dim, hidden_dim), nn.GELU(),
                          nn.Linear(hidden_dim, latent_dim))
            for _ in range(num_tasks)
        )

    def call(self, x_hat: torch.Tensor, no_eff: torch.Tensor) -> list[torch.Tensor]:
        feats = torch.cat(
            [x_hat.real.flatten(1), x_hat.imag.flatten(1), torch.log1p(no_eff.flatten(1))], 1
        )
        u = self.shared(feats)
        return [net(u) for net in self.unbind]


class SemanticMuxSystem(Block):
    """End-to-end semantic multiplexing transceiver for K tasks.

    Parameters
    ----------
    input_dims, num_classes : list of int
        Per-task input dimensions and class counts (length K).
    latent_dim, hidden_dim : int
        Latent size per task ``D`` and hidden width.
    num_streams : int
        Spatial streams ``S`` (= transmit antennas).
    num_uses : int
        Channel uses ``L`` per inference (shared by all K tasks).
    vib : bool
        Stochastic encoders with KL term (variational information bottleneck).
    channel : radio.channel.MIMOChannel
        The channel (no trainable parameters) applied between transmit and receive.
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
        super().__init__()
        k = len(input_dims)
        self.channel = channel
        self.num_streams, self.num_uses = num_streams, num_uses
        self.encoders = nn.ModuleList(
            TaskEncoder(d, latent_dim, hidden_dim, vib) for d in input_dims
        )
        self.mux = SemanticMultiplexer(k, latent_dim, num_streams, num_uses)
        self.demux = SemanticDemultiplexer(k, latent_dim, hidden_dim, num_streams, num_uses)
        self.heads = nn.ModuleList(TaskHead(latent_dim, hidden_dim, c) for c in num_classes)
        self.aux_heads = nn.ModuleList(nn.Linear(latent_dim, c) for c in num_classes)
        # Standardise every latent dimension (zero mean, unit variance; running statistics at
        # evaluation) before binding. Bindings followed by the precoder are a product of two
        # linear maps; kept separate to mirror the scheme (per-task keys, one precoder).
        self.latent_norms = nn.ModuleList(
            nn.BatchNorm1d(latent_dim, affine=False) for _ in input_dims
        )

    def channel_uses(self) -> int:
        """Channel uses per inference (all K tasks together)."""
        return self.num_uses

    def active_streams(self) -> int:
        """Streams carrying symbols in every channel use."""
        return self.num_streams

    def transmit(self, xs: list[torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """Encode + multiplex: inputs [K][B, d_k] -> symbols [B, S, L] and extras.

        Extras: ``kl`` [B] (VIB term, zeros without VIB) and ``aux_logits`` [K][B, C_k], a
        linear read-out of each task latent used only as an auxiliary training loss (without
        it, tasks learned early starve the others of channel capacity).
        """
        raw, kls = zip(*(e(x) for e, x in zip(self.encoders, xs, strict=True)), strict=True)
        zs = [n(z) for n, z in zip(self.latent_norms, raw, strict=True)]
        aux = [a(z) for a, z in zip(self.aux_heads, zs, strict=True)]
        return self.mux(list(zs)), {"kl": torch.stack(kls).sum(0), "aux_logits": aux}

    def propagate(
        self, sym: torch.Tensor, h: torch.Tensor, no: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Channel + LMMSE: symbols [B, S, L] -> (x_hat [B, S, L], no_eff [B, S, L])."""
        from radio.channel import block_res

        return self.channel(sym, block_res(h, 0, self.num_uses), no)

    def receive(self, rx: tuple[torch.Tensor, torch.Tensor]) -> list[torch.Tensor]:
        """Demultiplex + classify: (x_hat, no_eff) [B, S, L] each -> logits [K][B, C_k]."""
        return [h(u) for h, u in zip(self.heads, self.demux(*rx), strict=True)]

    def call(
        self, xs: list[torch.Tensor], h: torch.Tensor, no: torch.Tensor
    ) -> tuple[list[torch.Tensor], dict]:
        """Full link: inputs [K][B, d_k], block channel [B, M, N, T, F], noise [B].

        Returns per-task logits [K][B, C_k] and the extras of :meth:`transmit`.
        """
        sym, extra = self.transmit(xs)
        return self.receive(self.propagate(sym, h, no)), extra
