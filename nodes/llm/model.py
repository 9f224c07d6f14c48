"""A small decoder-only transformer that can be cut into pipeline stages by layers.

Built with torch from a :class:`ModelConfig`; the weights come from the config's seed
(random weights are enough for latency; nothing is downloaded). Every stage of a cut
builds the same full parameter set from the same seed and keeps only its layers, so a
pipeline of stage processes computes exactly what the unsplit model computes.

A *stage* runs a contiguous range of the model's ``n_layers + 2`` units::

    unit 0             token + position embedding        (tokens -> hidden)
    units 1..n_layers  transformer blocks                (hidden -> hidden, KV cached)
    unit n_layers + 1  final norm + LM head + greedy pick (hidden -> next token)

so a cut is a list of unit boundaries. Activations between stages are float32
``(tokens, d_model)`` tensors; their byte size is what crosses a link.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch import nn

__all__ = ["ModelConfig", "Stage", "TinyLM", "generate", "unit_bytes"]


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the decoder-only model.

    Attributes
    ----------
    n_layers : int
        Transformer blocks.
    d_model, n_heads, d_ff : int
        Hidden size, attention heads, feed-forward size.
    vocab : int
        Vocabulary size (token ids ``0..vocab-1``).
    max_seq : int
        Longest sequence (prompt + generated tokens).
    seed : int
        Seed of the weights.
    """

    n_layers: int = 8
    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 1024
    vocab: int = 512
    max_seq: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model ({self.d_model}) must be a multiple of model.n_heads "
                f"({self.n_heads})"
            )

    @property
    def n_units(self) -> int:
        """Units a cut divides: embedding, the blocks, the head."""
        return self.n_layers + 2

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def unit_bytes(cfg: ModelConfig) -> list[int]:
    """Parameter bytes (float32) of every unit, in unit order."""
    d, f, v = cfg.d_model, cfg.d_ff, cfg.vocab
    emb = (v + cfg.max_seq) * d
    block = 4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d  # attn + mlp + 2 layer norms
    head = 2 * d + v * d + v
    return [4 * emb] + [4 * block] * cfg.n_layers + [4 * head]


class Block(nn.Module):
    """Pre-norm transformer block with a KV cache per request."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.h = cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model)
        )

    def forward(self, x: torch.Tensor, cache: dict[str, torch.Tensor] | None) -> torch.Tensor:
        """``x``: (tokens, d_model) of one request; ``cache`` holds earlier K and V."""
        t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=1)
        q, k, v = (z.view(t, self.h, d // self.h).transpose(0, 1) for z in (q, k, v))
        past = 0
        if cache is not None:
            if "k" in cache:
                past = cache["k"].shape[1]
                k, v = torch.cat([cache["k"], k], 1), torch.cat([cache["v"], v], 1)
            cache["k"], cache["v"] = k, v
        # query i (absolute position past + i) attends keys 0..past + i
        mask = torch.ones(t, past + t, dtype=torch.bool).tril(diagonal=past)
        a = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(0, 1).reshape(t, d))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class TinyLM(nn.Module):
    """The whole model (every unit), weights from ``cfg.seed``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(cfg.seed)
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)
        torch.random.set_rng_state(gen_state)
        self.eval()


@dataclass
class Stage:
    """Units ``[start, stop)`` of a model: what one pipeline stage runs.

    ``caches`` holds each request's KV caches (one dict per block of the stage).
    """

    cfg: ModelConfig
    start: int
    stop: int
    caches: dict[str, list[dict[str, torch.Tensor]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.stop <= self.cfg.n_units:
            raise ValueError(
                f"stage units [{self.start}, {self.stop}) outside 0..{self.cfg.n_units}"
            )
        full = TinyLM(self.cfg)
        lo, hi = max(self.start, 1) - 1, min(self.stop, self.cfg.n_layers + 1) - 1
        self.blocks = list(full.blocks)[lo:hi] if hi > lo else []
        self.embed = (full.tok, full.pos) if self.start == 0 else None
        self.head = (full.ln_f, full.head) if self.stop == self.cfg.n_units else None

    @property
    def param_bytes(self) -> int:
        """Parameter bytes this stage holds (float32)."""
        return sum(unit_bytes(self.cfg)[self.start : self.stop])

    @torch.inference_mode()
    def run(self, request: str, x: torch.Tensor, pos: int) -> torch.Tensor:
        """Run this stage on one step of ``request``.

        Parameters
        ----------
        request : str
            Request id (its KV caches live here until :meth:`drop`).
        x : torch.Tensor
            Token ids (int64, (tokens,)) for the first stage, else hidden states
            (float32, (tokens, d_model)).
        pos : int
            Absolute position of the first token of ``x``.

        Returns
        -------
        torch.Tensor
            Hidden states, or the greedy next token id (int64, (1,)) from the last stage.
        """
        if self.embed is not None:
            tok, posemb = self.embed
            idx = torch.arange(pos, pos + x.shape[0])
            x = tok(x) + posemb(idx)
        caches = self.caches.setdefault(request, [{} for _ in self.blocks])
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block(x, cache)
        if self.head is not None:
            ln, head = self.head
            token: torch.Tensor = head(ln(x[-1:])).argmax(dim=-1)
            return token
        return x

    def drop(self, request: str) -> None:
        """Free ``request``'s KV caches."""
        self.caches.pop(request, None)


def generate(stages: list[Stage], request: str, prompt: list[int], new_tokens: int) -> list[int]:
    """Greedy generation through ``stages`` in process (the reference for pipelines).

    Returns the ``new_tokens`` generated token ids.
    """
    out: list[int] = []
    x: torch.Tensor = torch.tensor(prompt, dtype=torch.long)
    pos = 0
    for _ in range(new_tokens):
        h = x
        for st in stages:
            h = st.run(request, h, pos)
        pos += x.shape[0]
        out.append(int(h[0]))
        x = h
    for st in stages:
        st.drop(request)
    return out
