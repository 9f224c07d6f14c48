"""Channel models as a registry: ``semantic_mux.channel_model`` names one of them.

Each model is one function registered under its name in :data:`CHANNEL_MODELS`. It takes
the link's :class:`ChannelSettings` and returns a ``draw(batch, num_ofdm_symbols)``
callable giving channel frequency responses of shape ``[B, M, N, T, F]`` (complex64, unit
average energy per antenna pair over a block). :class:`radio.channel.MIMOChannel` applies
whichever model is named, so a new model is one registered function::

    from radio.channel_models import CHANNEL_MODELS

    @CHANNEL_MODELS.register("awgn")
    def awgn(s):
        def draw(batch, t):
            eye = torch.eye(s.num_rx_antennas, s.num_tx_antennas, dtype=torch.complex64)
            return eye[None, :, :, None, None].expand(batch, -1, -1, t, s.freqs.numel())
        return draw

A user model may also be named by dotted path (``package.module:function``). Sionna is
imported by the models themselves, so validating a spec does not load it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernel.registry import Registry, callable_hook

if TYPE_CHECKING:  # (validating a spec loads neither torch nor Sionna)
    import torch

__all__ = ["CHANNEL_MODELS", "ChannelDraw", "ChannelSettings"]

#: ``(batch, num_ofdm_symbols) -> H [B, M, N, T, F]``
ChannelDraw = Callable[[int, int], "torch.Tensor"]


@dataclass(frozen=True)
class ChannelSettings:
    """What a channel model needs to know about the link.

    Attributes
    ----------
    profile : str
        3GPP TR 38.901 CDL/TDL profile letter ("A".."E").
    carrier_frequency_hz : float
        Carrier frequency, Hz.
    num_tx_antennas, num_rx_antennas : int
        Antennas at the edge device (transmitter) and the fog node (receiver).
    delay_spread_s : float
        RMS delay spread, s.
    max_speed_mps : float
        Largest device speed (Doppler), m/s.
    flat_correlation : float
        Exponential Kronecker correlation of the flat-fading model, in [0, 1).
    sampling_frequency_hz : float
        OFDM symbol rate (1 / symbol duration), Hz.
    freqs : torch.Tensor
        Subcarrier frequencies of one block relative to the carrier, Hz (``F`` values).
    device : str or None
        Torch device the tensors live on.
    """

    profile: str
    carrier_frequency_hz: float
    num_tx_antennas: int
    num_rx_antennas: int
    delay_spread_s: float
    max_speed_mps: float
    flat_correlation: float
    sampling_frequency_hz: float
    freqs: torch.Tensor
    device: str | None


CHANNEL_MODELS: Registry[Callable[[ChannelSettings], ChannelDraw]] = Registry(
    "channel model",
    validate=callable_hook("(ChannelSettings) -> draw(batch, num_ofdm_symbols) -> H"),
)


def _ofdm_draw(gen: Any, s: ChannelSettings) -> ChannelDraw:
    """Frequency responses of a channel impulse response generator (CDL, TDL)."""
    from sionna.phy.channel import cir_to_ofdm_channel

    def draw(batch: int, t: int) -> torch.Tensor:
        a, tau = gen(batch, t, s.sampling_frequency_hz)
        h = cir_to_ofdm_channel(s.freqs, a, tau, normalize=True)
        return h[:, 0, :, 0]  # [B, M, N, T, F]

    return draw


@CHANNEL_MODELS.register("cdl")
def cdl(s: ChannelSettings) -> ChannelDraw:
    """3GPP CDL with dual-polarised cross arrays at both ends (uplink: UT -> BS)."""
    from sionna.phy.channel.tr38901 import CDL, AntennaArray

    for name, n in (("num_tx_antennas", s.num_tx_antennas), ("num_rx_antennas", s.num_rx_antennas)):
        if n % 2:
            raise ValueError(f"{name} must be even for CDL (dual polarisation), got {n}")
    arrays = [
        AntennaArray(
            num_rows=1,
            num_cols=n // 2,
            polarization="dual",
            polarization_type="cross",
            antenna_pattern="38.901",
            carrier_frequency=s.carrier_frequency_hz,
            device=s.device,
        )
        for n in (s.num_tx_antennas, s.num_rx_antennas)
    ]
    gen = CDL(
        s.profile,
        s.delay_spread_s,
        s.carrier_frequency_hz,
        ut_array=arrays[0],
        bs_array=arrays[1],
        direction="uplink",
        min_speed=0.0,
        max_speed=s.max_speed_mps,
        device=s.device,
    )
    return _ofdm_draw(gen, s)


@CHANNEL_MODELS.register("tdl")
def tdl(s: ChannelSettings) -> ChannelDraw:
    """3GPP TDL, i.i.d. across antenna pairs."""
    from sionna.phy.channel.tr38901 import TDL

    gen = TDL(
        s.profile,
        s.delay_spread_s,
        s.carrier_frequency_hz,
        min_speed=0.0,
        max_speed=s.max_speed_mps,
        num_rx_ant=s.num_rx_antennas,
        num_tx_ant=s.num_tx_antennas,
        device=s.device,
    )
    return _ofdm_draw(gen, s)


@CHANNEL_MODELS.register("flat")
def flat(s: ChannelSettings) -> ChannelDraw:
    """Rayleigh flat fading, constant over a block, with exponential Kronecker correlation."""
    from sionna.phy.channel import GenerateFlatFadingChannel, KroneckerModel
    from sionna.phy.channel.utils import exp_corr_mat

    corr = None
    if s.flat_correlation > 0:
        corr = KroneckerModel(
            exp_corr_mat(s.flat_correlation, s.num_tx_antennas, device=s.device),
            exp_corr_mat(s.flat_correlation, s.num_rx_antennas, device=s.device),
        )
    gen = GenerateFlatFadingChannel(
        s.num_tx_antennas, s.num_rx_antennas, spatial_corr=corr, device=s.device
    )
    f = int(s.freqs.numel())

    def draw(batch: int, t: int) -> torch.Tensor:
        h = gen(batch)  # [B, M, N]
        return h[..., None, None].expand(-1, -1, -1, t, f).contiguous()

    return draw
