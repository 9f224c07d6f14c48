"""Channel models are a registry: a user model named by dotted path drives MIMOChannel."""

from __future__ import annotations

import pytest
import torch

from radio.channel import MIMOChannel
from radio.channel_models import CHANNEL_MODELS, ChannelDraw, ChannelSettings
from radio.config import SemanticMuxSpec


def identity(s: ChannelSettings) -> ChannelDraw:
    """A user model: H = I (every antenna hears only its own transmitter)."""

    def draw(batch: int, t: int) -> torch.Tensor:
        eye = torch.eye(s.num_rx_antennas, s.num_tx_antennas, dtype=torch.complex64)
        return eye[None, :, :, None, None].expand(batch, -1, -1, t, s.freqs.numel())

    return draw


PATH = "tests.radio.test_channel_models:identity"


def test_builtin_names_and_user_model_by_dotted_path() -> None:
    assert {"cdl", "tdl", "flat"} <= set(CHANNEL_MODELS.names())
    assert SemanticMuxSpec(channel_model=PATH).channel_model == PATH
    with pytest.raises(ValueError, match="channel_model: unknown channel model 'rician'"):
        SemanticMuxSpec(channel_model="rician")
    ch = MIMOChannel(model=PATH, num_tx_antennas=2, num_rx_antennas=2, subcarriers_per_block=6)
    h = ch.generate(3, 2)
    assert h.shape == (3, 2, 2, 2, 6)
    assert torch.equal(h[0, :, :, 0, 0], torch.eye(2, dtype=torch.complex64))


@pytest.mark.parametrize("model", ["flat", "tdl", "cdl"])
def test_builtin_models_draw_unit_energy_blocks(model: str) -> None:
    ch = MIMOChannel(model=model, num_tx_antennas=2, num_rx_antennas=2)
    h = ch.generate(256, 2)
    assert h.shape == (256, 2, 2, 2, 12)
    energy = float(h.abs().pow(2).mean())
    assert energy == pytest.approx(1.0, abs=0.15)  # normalised per antenna pair
