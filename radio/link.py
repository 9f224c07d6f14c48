"""Radio link type for the fleet: an edge-to-fog MIMO link whose capacity comes from Sionna.

:func:`radio_link_capacity` turns (payload, SNR, channel parameters) into a capacity
[Mbit/s] and the airtime [s] of the payload. The capacity is the ergodic MIMO Shannon
capacity without transmitter CSI (equal power over the transmit antennas),

    C = E_H[ log2 det(I_M + snr / N * H H^H) ]   [bit per channel use],

averaged over Sionna TR 38.901 channel realisations (normalised to unit energy per antenna
pair), times the numerology's channel uses per second, times ``(1 - overhead_fraction)``,
minus an optional implementation gap. It is therefore MODELLED (an upper bound of what a
real modem achieves), and results carry ``"kind": "modelled"``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

__all__ = ["LinkCapacity", "radio_link_capacity"]


@dataclass(frozen=True)
class LinkCapacity:
    """Capacity and airtime of an edge-to-fog radio link.

    Attributes
    ----------
    capacity_mbps : float
        Modelled link throughput [Mbit/s].
    spectral_efficiency_bps_per_hz : float
        Ergodic capacity per channel use [bit/s/Hz] (= bit per RE) before overhead.
    airtime_s : float
        Time on air of the payload [s]: its resource elements in whole OFDM symbols of
        the allocation (:meth:`radio.numerology.Numerology.airtime_s`).
    channel_uses : float
        Resource elements the payload occupies (payload bits / bit per RE after overhead).
    slots : int
        Whole NR slots needed (scheduling granularity).
    symbol_rate_per_s : float
        Channel uses per second of the allocated bandwidth [1/s].
    bandwidth_hz : float
        Occupied bandwidth [Hz].
    kind : str
        Always ``"modelled"``.
    """

    capacity_mbps: float
    spectral_efficiency_bps_per_hz: float
    airtime_s: float
    channel_uses: float
    slots: int
    symbol_rate_per_s: float
    bandwidth_hz: float
    kind: str = "modelled"

    def as_dict(self) -> dict:
        """Plain dict for JSON/metrics."""
        return asdict(self)


@functools.lru_cache(maxsize=64)
def _ergodic_capacity_bits(
    snr_db: float,
    channel_model: str,
    channel_profile: str,
    carrier_frequency_hz: float,
    subcarrier_spacing_hz: float,
    num_tx_antennas: int,
    num_rx_antennas: int,
    delay_spread_s: float,
    num_realisations: int,
    seed: int,
) -> float:
    import torch
    from sionna.phy import config

    from radio.channel import MIMOChannel
    from radio.numerology import Numerology

    ch = MIMOChannel(
        channel_model, channel_profile, carrier_frequency_hz,
        Numerology(subcarrier_spacing_hz), num_tx_antennas, num_rx_antennas, delay_spread_s,
        device="cpu",
    )
    # Draw from Sionna's one random source with our seed, then restore its state so that a
    # capacity query never perturbs the caller's random stream.
    gen = config.torch_rng("cpu")
    saved = gen.get_state()
    gen.manual_seed(seed)
    try:
        h = ch.generate(num_realisations, 1)[..., 0, 0]  # [R, M, N]
    finally:
        gen.set_state(saved)
    snr = 10.0 ** (snr_db / 10.0)
    eye = torch.eye(num_rx_antennas, dtype=h.dtype)
    gram = eye + (snr / num_tx_antennas) * h @ h.conj().transpose(-1, -2)
    bits = torch.linalg.slogdet(gram).logabsdet / math.log(2.0)
    return float(bits.mean())


def radio_link_capacity(
    payload_bytes: float,
    snr_db: float = 20.0,
    *,
    carrier_frequency_hz: float = 28e9,
    subcarrier_spacing_hz: float = 120e3,
    num_resource_blocks: int = 66,
    num_tx_antennas: int = 4,
    num_rx_antennas: int = 4,
    channel_model: str = "cdl",
    channel_profile: str = "C",
    delay_spread_s: float = 30e-9,
    overhead_fraction: float = 0.10,
    implementation_gap_db: float = 3.0,
    num_realisations: int = 256,
    seed: int = 0,
) -> LinkCapacity:
    """Capacity [Mbit/s] and airtime [s] of a payload on an edge-to-fog MIMO link.

    Parameters
    ----------
    payload_bytes : float
        Payload size [byte].
    snr_db : float
        Average received SNR per receive antenna [dB].
    carrier_frequency_hz, subcarrier_spacing_hz : float
        Carrier [Hz] and NR subcarrier spacing [Hz].
    num_resource_blocks : int
        Allocated RBs (66 RBs at 120 kHz = 100 MHz FR2 channel).
    num_tx_antennas, num_rx_antennas : int
        MIMO size ``N`` x ``M``.
    channel_model, channel_profile : str
        ``"cdl" | "tdl" | "flat"`` and the TR 38.901 profile ``"A"``..``"E"``.
    delay_spread_s : float
        RMS delay spread [s].
    overhead_fraction : float
        Share of REs lost to reference signals/control (default 0.10: the FR2 uplink
        overhead factor of TS 38.306 section 4.1.2; the downlink value is 0.18).
    implementation_gap_db : float
        SNR gap to Shannon capacity of a practical modem [dB].
    num_realisations : int
        Channel realisations averaged over.
    seed : int
        Seed of the channel draws (results are cached per argument set).

    Returns
    -------
    LinkCapacity
    """
    from radio.numerology import Numerology

    if payload_bytes < 0:
        raise ValueError(f"payload_bytes must be >= 0, got {payload_bytes}")
    if not 0 <= overhead_fraction < 1:
        raise ValueError(f"overhead_fraction must lie in [0, 1), got {overhead_fraction}")
    num = Numerology(subcarrier_spacing_hz, num_resource_blocks)
    se = _ergodic_capacity_bits(
        float(snr_db - implementation_gap_db), channel_model, channel_profile,
        float(carrier_frequency_hz), float(subcarrier_spacing_hz), int(num_tx_antennas),
        int(num_rx_antennas), float(delay_spread_s), int(num_realisations), int(seed),
    )
    bits_per_re = se * (1.0 - overhead_fraction)
    rate_bps = bits_per_re * num.symbol_rate_per_s
    payload_bits = 8.0 * payload_bytes
    channel_uses = payload_bits / bits_per_re if bits_per_re > 0 else math.inf
    return LinkCapacity(
        capacity_mbps=rate_bps / 1e6,
        spectral_efficiency_bps_per_hz=se,
        airtime_s=num.airtime_s(channel_uses) if math.isfinite(channel_uses) else math.inf,
        channel_uses=channel_uses,
        slots=num.slots_needed(channel_uses) if math.isfinite(channel_uses) else 0,
        symbol_rate_per_s=num.symbol_rate_per_s,
        bandwidth_hz=num.bandwidth_hz,
    )
