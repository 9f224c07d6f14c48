"""Link budget of a satellite-ground hop: rate from slant range (free-space path loss).

Sources: free-space path loss ``(4 pi d f / c)^2`` (Friis); Boltzmann's constant
``k = 1.380649e-23 J/K`` (SI, exact), ``-10 log10 k = 228.6 dBW/K/Hz``; Shannon capacity
with an implementation gap. See :class:`testbed.space.config.LinkBudget`.
"""

from __future__ import annotations

import numpy as np

from testbed.space.config import LinkBudget
from testbed.space.orbits import C_M_S

BOLTZMANN_DBW_K_HZ = -228.5991  #: 10 log10(1.380649e-23)


def fspl_db(range_m: np.ndarray | float, frequency_hz: float) -> np.ndarray:
    """Free-space path loss in dB at ``range_m`` (m) and ``frequency_hz`` (Hz)."""
    return 20.0 * np.log10(4.0 * np.pi * np.asarray(range_m, dtype=float) * frequency_hz / C_M_S)


def cn_db(budget: LinkBudget, range_m: np.ndarray | float) -> np.ndarray:
    """Carrier-to-noise ratio in the channel bandwidth, dB."""
    cn0 = (
        budget.eirp_dbw
        + budget.g_over_t_dbk
        - fspl_db(range_m, budget.frequency_hz)
        - budget.losses_db
        - BOLTZMANN_DBW_K_HZ
    )
    cn: np.ndarray = cn0 - 10.0 * np.log10(budget.bandwidth_hz)
    return cn


def rate_mbps(budget: LinkBudget, range_m: np.ndarray | float) -> np.ndarray:
    """Achievable rate (Mbit/s) of one hop at slant range ``range_m`` (m), clipped to
    ``[min_rate_mbps, max_rate_mbps]``."""
    snr = 10.0 ** ((cn_db(budget, range_m) - budget.implementation_gap_db) / 10.0)
    r = (1.0 - budget.overhead_fraction) * budget.bandwidth_hz * np.log2(1.0 + snr) / 1e6
    hi = np.inf if budget.max_rate_mbps is None else budget.max_rate_mbps
    return np.clip(r, budget.min_rate_mbps, hi)
