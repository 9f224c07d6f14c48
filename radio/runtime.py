"""Device, dtype and randomness for the radio stack, decided in ONE place.

House rule 9: device and dtype are decided in one function, overridable, and logged with the
reason. House rule 8: randomness comes from one seeded source. Sionna 2.x keeps its random
generators in the singleton :data:`sionna.phy.config`; we seed it once here and every radio
block (ours and Sionna's) draws from ``config.torch_rng(device)`` / ``config.np_rng``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)

__all__ = ["Runtime", "resolve_runtime"]


@dataclass(frozen=True)
class Runtime:
    """Resolved execution context of the radio stack.

    Attributes
    ----------
    device : str
        Torch device string, e.g. ``"cpu"`` or ``"cuda:0"``.
    dtype : torch.dtype
        Real dtype (``torch.float32``); complex tensors use :attr:`cdtype`.
    cdtype : torch.dtype
        Complex dtype (``torch.complex64``).
    reason : str
        Why this device was chosen (logged once).
    seed : int
        Seed given to Sionna's configuration singleton.
    """

    device: str
    dtype: torch.dtype
    cdtype: torch.dtype
    reason: str
    seed: int

    def generator(self) -> torch.Generator:
        """Return the single seeded torch generator for :attr:`device` (Sionna's own)."""
        from sionna.phy import config

        return config.torch_rng(self.device)


def resolve_runtime(seed: int, device: str | None = None) -> Runtime:
    """Choose device/dtype once, seed Sionna's random source, and log the reason.

    Parameters
    ----------
    seed : int
        Seed for all radio randomness (channel draws, noise, data shuffles, weight init).
    device : str or None
        Requested device (``"cpu"``, ``"cuda"``, ``"cuda:0"``); ``None`` or ``"auto"`` picks
        CUDA when available, else CPU.

    Returns
    -------
    Runtime
        The resolved context.
    """
    from sionna.phy import config

    if device in (None, "auto"):
        if torch.cuda.is_available():
            device, reason = "cuda:0", "auto: CUDA is available"
        else:
            device, reason = "cpu", "auto: no CUDA device"
    else:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device={device!r} requested but CUDA is not available")
        reason = f"requested device={device!r}"
    config.device = device
    config.precision = "single"
    config.seed = seed
    torch.manual_seed(seed)  # weight initialisation of torch.nn layers
    rt = Runtime(device, torch.float32, torch.complex64, reason, seed)
    log.info("radio runtime: device=%s dtype=float32 (%s), seed=%d", device, reason, seed)
    return rt
