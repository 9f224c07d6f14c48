"""Small transformer text generation (Gaia's TinyLlama workload, scaled to this testbed).

A byte-level causal transformer (4 layers, width 192, 4 heads, weights from a fixed
seed: no download). Greedy decoding of ``max_new_tokens`` bytes after the prompt,
recomputing the whole context each step (no KV cache), as a small model served naively.
``load`` builds the model on the device: the cold start.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

MODEL: nn.Module | None = None
DEVICE = "cpu"
CONTEXT = 128


class TinyLM(nn.Module):
    def __init__(
        self, vocab: int = 256, width: int = 192, layers: int = 4, heads: int = 4
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(CONTEXT, width)
        layer = nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        pos = torch.arange(n, device=ids.device)
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=ids.device)
        h = self.body(self.embed(ids) + self.pos(pos), mask=mask, is_causal=True)
        logits: torch.Tensor = self.head(h[:, -1])
        return logits


def _build(device: str) -> nn.Module:
    torch.manual_seed(0)
    return TinyLM().to(device).eval()


def load(device: str) -> None:
    global MODEL, DEVICE
    DEVICE = device
    MODEL = _build(device)


def _model() -> nn.Module:
    """The model, built on ``DEVICE`` when ``load`` was not called."""
    global MODEL
    if MODEL is None:
        MODEL = _build(DEVICE)
    return MODEL


def make_request(params: dict[str, Any], i: int) -> dict[str, Any]:
    return {
        "prompt": str(params.get("prompt", "the continuum ")) + str(i),
        "max_new_tokens": int(params.get("max_new_tokens", 16)),
    }


def handler(request: dict[str, Any]) -> dict[str, Any]:
    model = _model()
    ids = list(request["prompt"].encode()[-CONTEXT:])
    out: list[int] = []
    with torch.no_grad():
        for _ in range(int(request.get("max_new_tokens", 16))):
            ctx = torch.tensor([ids[-CONTEXT:]], device=DEVICE)
            nxt = int(model(ctx).argmax(-1))
            ids.append(nxt)
            out.append(nxt)
    return {"tokens": len(out), "text": bytes(out).decode("latin-1")}
