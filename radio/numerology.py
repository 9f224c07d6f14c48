"""5G NR OFDM numerology and airtime arithmetic (pure Python, no torch).

One *channel use* is one resource element (RE): one subcarrier during one OFDM symbol. On a
MIMO link one channel use carries one complex symbol on every spatial stream at once, so
airtime does not depend on the number of streams. A transmission occupies whole OFDM
symbols of the allocation (``granularity="symbol"``: ``ceil(REs / subcarriers)`` symbols,
mini-slot scheduling) or whole slots (``"slot"``: ``ceil(REs / (subcarriers x 14))``),
never a fraction of a symbol: a few REs cost a full symbol of the allocated band.

Conventions (3GPP TS 38.211 section 4): numerology ``mu`` with subcarrier spacing
``15 kHz * 2**mu``; a slot lasts ``1 ms / 2**mu`` and holds 14 OFDM symbols (normal cyclic
prefix); a resource block (RB) is 12 subcarriers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Numerology"]

SYMBOLS_PER_SLOT = 14
SUBCARRIERS_PER_RB = 12


@dataclass(frozen=True)
class Numerology:
    """OFDM numerology of an NR carrier.

    Parameters
    ----------
    subcarrier_spacing_hz : float
        Subcarrier spacing [Hz]; one of 15e3 * 2**mu for mu in 0..4.
    num_resource_blocks : int
        Allocated resource blocks (12 subcarriers each). 66 RBs at 120 kHz is the 100 MHz
        FR2 channel of TS 38.101-2 Table 5.3.2-1.
    """

    subcarrier_spacing_hz: float = 120e3
    num_resource_blocks: int = 66

    def __post_init__(self) -> None:
        mu = math.log2(self.subcarrier_spacing_hz / 15e3)
        if abs(mu - round(mu)) > 1e-9 or not 0 <= round(mu) <= 4:
            raise ValueError(
                "subcarrier_spacing_hz must be 15e3 * 2**mu with mu in 0..4, got "
                f"{self.subcarrier_spacing_hz}"
            )
        if self.num_resource_blocks < 1:
            raise ValueError(f"num_resource_blocks must be >= 1, got {self.num_resource_blocks}")

    @property
    def mu(self) -> int:
        """Numerology index mu (0..4)."""
        return round(math.log2(self.subcarrier_spacing_hz / 15e3))

    @property
    def slot_duration_s(self) -> float:
        """Slot duration [s] (1 ms / 2**mu)."""
        return 1e-3 / 2**self.mu

    @property
    def ofdm_symbol_duration_s(self) -> float:
        """Average OFDM symbol duration including cyclic prefix [s] (slot / 14)."""
        return self.slot_duration_s / SYMBOLS_PER_SLOT

    @property
    def num_subcarriers(self) -> int:
        """Allocated subcarriers (12 per RB)."""
        return self.num_resource_blocks * SUBCARRIERS_PER_RB

    @property
    def bandwidth_hz(self) -> float:
        """Occupied bandwidth [Hz] = subcarriers x spacing."""
        return self.num_subcarriers * self.subcarrier_spacing_hz

    @property
    def symbol_rate_per_s(self) -> float:
        """Channel uses (REs) per second over the allocated bandwidth [1/s]."""
        return self.num_subcarriers / self.ofdm_symbol_duration_s

    def symbols_needed(self, channel_uses: float) -> int:
        """Whole OFDM symbols of the allocation that carry ``channel_uses`` REs."""
        return math.ceil(channel_uses / self.num_subcarriers)

    def airtime_s(self, channel_uses: float, granularity: str = "symbol") -> float:
        """Airtime [s] of ``channel_uses`` REs at the scheduling granularity.

        Parameters
        ----------
        channel_uses : float
            Resource elements to send (>= 0).
        granularity : {"symbol", "slot"}
            Whole OFDM symbols (x symbol duration) or whole slots (x slot duration).
        """
        if channel_uses < 0:
            raise ValueError(f"channel_uses must be >= 0, got {channel_uses}")
        if granularity == "symbol":
            return self.symbols_needed(channel_uses) * self.ofdm_symbol_duration_s
        if granularity == "slot":
            return self.slots_needed(channel_uses) * self.slot_duration_s
        raise ValueError(f"granularity must be 'symbol' or 'slot', got {granularity!r}")

    def slots_needed(self, channel_uses: float) -> int:
        """Whole slots needed to carry ``channel_uses`` REs (scheduling granularity)."""
        return math.ceil(channel_uses / (self.num_subcarriers * SYMBOLS_PER_SLOT))
