"""MODELLED energy and latency of one inference (all K tasks) on a radio link.

``energy_j = radio_power_w * airtime_s + compute_power_w * compute_s``
``latency_s = compute_s + airtime_s``

``compute_s`` is measured on the machine that runs the experiment (not the paper's Jetson);
``airtime_s`` comes from :class:`radio.numerology.Numerology`; the powers are parameters
(:class:`radio.config.EnergyModelSpec`) stored with the results. Every figure from here is
labelled ``"modelled"``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EnergyModel"]


@dataclass(frozen=True)
class EnergyModel:
    """Linear power x time energy model.

    Parameters
    ----------
    radio_power_w : float
        Radio power while on air [W].
    compute_power_w : float
        Compute power while encoding/decoding [W].
    """

    radio_power_w: float
    compute_power_w: float

    def energy_j(self, airtime_s: float, compute_s: float) -> float:
        """Energy of one inference [J]."""
        if airtime_s < 0 or compute_s < 0:
            raise ValueError("airtime_s and compute_s must be >= 0")
        return self.radio_power_w * airtime_s + self.compute_power_w * compute_s

    @staticmethod
    def latency_s(airtime_s: float, compute_s: float) -> float:
        """End-to-end latency of one inference [s] (no queueing, no propagation delay)."""
        return airtime_s + compute_s
