"""MIMO-OFDM channel layer on Sionna 2.x: 3GPP TR 38.901 CDL/TDL, flat fading, LMMSE.

One *transmission block* is the time-frequency patch an inference occupies: ``T`` OFDM
symbols x ``F`` subcarriers (``F = subcarriers_per_block``). A scheme that needs ``L``
channel uses occupies ``L`` resource elements (REs) of the block frequency-first
(:func:`block_res`); the rest of the block is not used and not counted.

Signal model per resource element (RE), with ``S`` active streams on the first ``S`` of
the ``N`` transmit antennas and ``M`` receive antennas::

    y = H[:, :S] x / sqrt(S) + n,    E|x_s|^2 = 1,    n ~ CN(0, no I_M)

so the total transmit power per channel use is 1 whatever ``S`` is, the channel is
normalised to unit average energy per antenna pair over the block (Sionna's
``normalize=True``), and ``snr_db = -10 log10(no)`` is the average received SNR per receive
antenna. The receiver knows ``H`` (perfect CSI at the receiver, none at the transmitter)
and applies Sionna's LMMSE equaliser.
"""

from __future__ import annotations

import math

import torch
from sionna.phy import Block
from sionna.phy.channel import ApplyOFDMChannel, subcarrier_frequencies
from sionna.phy.mimo import lmmse_equalizer

from radio.channel_models import CHANNEL_MODELS, ChannelSettings
from radio.numerology import Numerology

__all__ = ["MIMOChannel", "block_res", "snr_db_to_no"]


def snr_db_to_no(snr_db: torch.Tensor) -> torch.Tensor:
    """Noise variance per complex receive sample for an SNR [dB]: ``10**(-snr_db/10)``."""
    return torch.pow(10.0, -snr_db / 10.0)


def block_res(h: torch.Tensor, start: int, num: int) -> torch.Tensor:
    """Channel of ``num`` consecutive resource elements of a block, frequency first.

    Parameters
    ----------
    h : torch.Tensor, complex, shape [B, M, N, T, F]
        Block channel from :meth:`MIMOChannel.generate`.
    start, num : int
        First RE (``t * F + f``) and number of REs.

    Returns
    -------
    torch.Tensor, complex, shape [B, M, N, num]
    """
    flat = h.flatten(-2)
    assert start + num <= flat.shape[-1], f"REs {start}..{start + num} exceed the block"
    return flat[..., start : start + num]


class MIMOChannel(Block):
    """MIMO channel + AWGN + LMMSE equaliser, with 3GPP CDL/TDL or flat-fading matrices.

    Static parameters go to the constructor; :meth:`generate` draws channel realisations
    (from Sionna's seeded random source); :meth:`call` is pure given ``h`` and the noise
    draw and is differentiable with respect to ``x``.

    Parameters
    ----------
    model : str
        A name in :data:`radio.channel_models.CHANNEL_MODELS` ("cdl", "tdl", "flat") or a
        user model's ``package.module:function``.
        ``cdl``: TR 38.901 CDL with 1x2 cross-polarised 38.901-pattern panels at both ends
        (``num_tx_antennas``/``num_rx_antennas`` = 2 x columns); ``tdl``: TR 38.901 TDL,
        i.i.d. across antenna pairs; ``flat``: Rayleigh flat fading with exponential
        Kronecker correlation ``flat_correlation`` (the fast path; constant over a block).
    profile : str
        CDL/TDL profile ``"A"`` .. ``"E"``.
    carrier_frequency_hz : float
        Carrier frequency [Hz].
    numerology : Numerology
        OFDM numerology (subcarrier spacing sets the subcarrier frequencies and the symbol
        duration used to sample the channel's time evolution).
    num_tx_antennas, num_rx_antennas : int
        Antenna counts ``N`` and ``M``. CDL needs even counts (dual polarisation).
    delay_spread_s : float
        RMS delay spread [s] of the CDL/TDL profile.
    max_speed_mps : float
        Terminal speeds are drawn uniformly in ``[0, max_speed_mps]`` [m/s].
    subcarriers_per_block : int
        ``F``, subcarriers of one transmission block.
    flat_correlation : float
        Exponential correlation coefficient of the flat-fading Kronecker model.
    """

    def __init__(
        self,
        model: str = "cdl",
        profile: str = "C",
        carrier_frequency_hz: float = 28e9,
        numerology: Numerology | None = None,
        num_tx_antennas: int = 4,
        num_rx_antennas: int = 4,
        delay_spread_s: float = 30e-9,
        max_speed_mps: float = 3.0,
        subcarriers_per_block: int = 12,
        flat_correlation: float = 0.0,
        precision: str | None = None,
        device: str | None = None,
    ) -> None:
        super().__init__(precision=precision, device=device)
        self.model = CHANNEL_MODELS.check(model)
        self.numerology = numerology or Numerology()
        self.num_tx_antennas = num_tx_antennas
        self.num_rx_antennas = num_rx_antennas
        self.subcarriers_per_block = subcarriers_per_block
        settings = ChannelSettings(
            profile=profile,
            carrier_frequency_hz=carrier_frequency_hz,
            num_tx_antennas=num_tx_antennas,
            num_rx_antennas=num_rx_antennas,
            delay_spread_s=delay_spread_s,
            max_speed_mps=max_speed_mps,
            flat_correlation=flat_correlation,
            sampling_frequency_hz=1.0 / self.numerology.ofdm_symbol_duration_s,
            freqs=subcarrier_frequencies(
                subcarriers_per_block, self.numerology.subcarrier_spacing_hz, device=self.device
            ),
            device=self.device,
        )
        self._draw = CHANNEL_MODELS[model](settings)
        self._apply_channel = ApplyOFDMChannel(add_awgn=True, device=self.device)

    def num_ofdm_symbols(self, channel_uses: int) -> int:
        """OFDM symbols ``T`` a block needs for ``channel_uses`` REs."""
        return max(1, math.ceil(channel_uses / self.subcarriers_per_block))

    @torch.no_grad()
    def generate(self, batch_size: int, num_ofdm_symbols: int) -> torch.Tensor:
        """Draw channel frequency responses for ``batch_size`` blocks.

        Returns
        -------
        torch.Tensor, complex64, shape [B, M, N, T, F]
            ``M`` receive and ``N`` transmit antennas, ``T`` OFDM symbols, ``F`` subcarriers;
            unit average energy per antenna pair over each block.
        """
        return self._draw(batch_size, num_ofdm_symbols)

    def call(
        self, x: torch.Tensor, h: torch.Tensor, no: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Transmit ``x`` over ``h`` with AWGN and equalise with LMMSE (perfect CSI at Rx).

        Parameters
        ----------
        x : torch.Tensor, complex, shape [B, S, L]
            Unit-power symbols on ``S <= N`` streams (antennas ``0..S-1``), ``L`` channel uses.
        h : torch.Tensor, complex, shape [B, M, N, L]
            Channel of the ``L`` REs used (see :func:`block_res`).
        no : torch.Tensor, float, shape [B] or []
            Noise variance per complex receive sample (``10**(-snr_db/10)``).

        Returns
        -------
        x_hat : torch.Tensor, complex, shape [B, S, L]
            Equalised symbols.
        no_eff : torch.Tensor, float, shape [B, S, L]
            Post-equalisation noise variance per symbol.
        """
        b, s, _ = x.shape
        h_eff = h[:, :, :s] / math.sqrt(s)  # total transmit power 1 per channel use
        no = no.reshape(-1) if no.dim() else no.expand(b)
        # Sionna's OFDM channel with the L REs as one OFDM symbol of L subcarriers:
        # x [B, 1, S, 1, L], h [B, 1, M, 1, S, 1, L] -> y [B, 1, M, 1, L]
        y = self._apply_channel(
            x[:, None, :, None], h_eff[:, None, :, None, :, None], no[:, None, None, None]
        )
        y = y[:, 0, :, 0].transpose(1, 2)  # [B, L, M]
        hm = h_eff.permute(0, 3, 1, 2)  # [B, L, M, S]
        eye = torch.eye(hm.shape[-2], dtype=hm.dtype, device=hm.device)
        cov = eye * no[:, None, None, None].to(hm.dtype)
        x_hat, no_eff = lmmse_equalizer(y, hm, cov)  # [B, L, S]
        return x_hat.transpose(1, 2), no_eff.transpose(1, 2)
