"""Rate and block errors of an mmWave link over time, from Sionna channel realisations.

:class:`RadioLinkModel` turns a :class:`radio.config.MmwaveLinkSpec` into a sequence of
windows (``update_s`` each). The channel between the user equipment and its base
station is a Sionna TR 38.901 CDL/TDL channel whose coherence time follows the UE's
speed: ``T_c = 0.423 / f_D`` (Clarke's 50 %-correlation time, ``f_D = v f_c / c``).
A transmission block lasts ``T_b = max(T_c, slot)`` (one coherence time, never shorter
than a slot, the scheduling unit), so a window of fixed duration spans::

    N = ceil(update_s / T_b)      (at most ceil(update_s / slot): the cap)

blocks that see (about) independent channel realisations. A slow UE (long ``T_c``) has
few of them per window and its window rate swings from window to window; a fast UE has
many and averages out (window-to-window variance of the BLER ~ ``p (1 - p) / N``).

The first ``K = min(N, SIONNA_BLOCKS_PER_WINDOW)`` blocks of a window are Sionna
realisations, ONE time series sampled every ``T_b`` (time-correlated through the model's
own Doppler evolution). The other ``N - K`` are not drawn from Sionna one by one (measured
once on this 2-core host, 2026-11-28: 3.8 s for 16 windows of 1,024 blocks, while a
0.2 s window at 30 m/s holds 1,325 blocks: a window would take longer to compute than it
lasts). Each of them fails, independently, with the failure share ``p_fail`` that the
state's own Sionna calibration blocks show at the link-adaptation rate: their failures
are ``Binomial(N - K, p_fail)``. Every draw comes from a seeded stream of the link's own
per radio state (calibration, windows), so a state's link adaptation and its windows do
not depend on how many windows came before it. Windows are independent draws
(``update_s`` >> ``T_c`` at any speed above ~0.5 m/s at 28 GHz); a channel that outlasts
the window (``T_c >= update_s``) is tracked: one realisation kept for ``T_c``.

Per block, the capacity in bit per resource element is the MIMO Shannon capacity without
transmitter CSI, averaged over subcarriers spread across the allocation::

    C_b = mean_f log2 det(I_M + snr / N * H_f H_f^H)

at ``snr = snr_db - implementation_gap_db``. Link adaptation picks ONE rate ``R`` (bit/RE)
per radio state: the ``target_bler`` quantile of ``C_b`` over ``calibration_blocks``
blocks. A block with ``C_b < R`` fails and is sent again (a retransmission costs its
airtime), so a window's goodput is::

    rate_bps = R * (1 - overhead_fraction) * RE/s * (blocks that succeeded / N)

Everything here is MODELLED (no radio hardware); the parameters go to the run record.
"""

from __future__ import annotations

import math
import threading
import zlib
from dataclasses import dataclass
from typing import Any

from radio.config import MmwaveLinkSpec
from radio.numerology import Numerology

__all__ = ["RadioState", "RadioLinkModel", "WindowRate", "path_loss_db", "snr_from_distance_db"]

SPEED_OF_LIGHT_MPS = 299_792_458.0
#: Coherence time constant of Clarke's model (correlation 0.5): ``T_c = 0.423 / f_D``.
CLARKE_COHERENCE = 0.423
#: Subcarriers sampled across the allocation per block (capacity is averaged over them).
SAMPLED_SUBCARRIERS = 8
#: Largest number of a window's blocks drawn from Sionna (the first ``K`` of its ``N``;
#: the other ``N - K`` fail i.i.d. with the state's calibrated failure share).
SIONNA_BLOCKS_PER_WINDOW = 32
#: Windows drawn per Sionna call (one batch), used one per ``update_s``.
WINDOWS_PER_DRAW = 16


def path_loss_db(model: str, distance_m: float, carrier_frequency_hz: float) -> float:
    """Path loss [dB] of TR 38.901 Table 7.4.1-1 (UE height 1.5 m, d_3D ~ d, no
    breakpoint), or free space (``fspl``).

    Parameters
    ----------
    model : str
        ``fspl``, ``umi_los``, ``umi_nlos``, ``uma_los`` or ``uma_nlos``.
    distance_m : float
        UE - base station distance [m].
    carrier_frequency_hz : float
        Carrier [Hz].
    """
    d = math.log10(max(distance_m, 1.0))
    fc = math.log10(carrier_frequency_hz / 1e9)
    umi_los = 32.4 + 21.0 * d + 20.0 * fc
    uma_los = 28.0 + 22.0 * d + 20.0 * fc
    table = {
        "fspl": 32.45 + 20.0 * d + 20.0 * fc,
        "umi_los": umi_los,
        "umi_nlos": max(umi_los, 22.4 + 35.3 * d + 21.3 * fc),
        "uma_los": uma_los,
        "uma_nlos": max(uma_los, 13.54 + 39.08 * d + 20.0 * fc),
    }
    if model not in table:
        raise ValueError(f"path_loss: unknown model {model!r}; choose one of {sorted(table)}")
    return table[model]


def snr_from_distance_db(spec: MmwaveLinkSpec, distance_m: float) -> float:
    """Average SNR [dB] at ``distance_m``: transmit power - path loss - noise power
    (thermal -174 dBm/Hz over the allocated bandwidth, plus the noise figure)."""
    bw = Numerology(spec.subcarrier_spacing_hz, spec.num_resource_blocks).bandwidth_hz
    noise_dbm = -174.0 + 10.0 * math.log10(bw) + spec.noise_figure_db
    pl = path_loss_db(spec.path_loss, distance_m, spec.carrier_frequency_hz)
    return spec.tx_power_dbm - pl - noise_dbm


@dataclass(frozen=True)
class RadioState:
    """What the radio is at one time: SNR [dB], UE speed [m/s] (and the distance [m]
    the SNR comes from, if any)."""

    snr_db: float
    speed_mps: float
    distance_m: float | None = None

    @property
    def key(self) -> tuple[float, float]:
        return (round(self.snr_db, 6), round(self.speed_mps, 6))


@dataclass(frozen=True)
class WindowRate:
    """One window of the modelled link.

    Attributes
    ----------
    rate_mbps : float
        Goodput over the window [Mbit/s] (0 when every block failed).
    bler : float
        Share of the window's blocks that failed (retransmitted).
    blocks : int
        ``N``: blocks of the window, one per block time ``max(T_c, slot)`` (1 when the
        channel outlasts the window).
    sionna_blocks : int
        ``K``: of which drawn from Sionna (the others fail i.i.d. with the state's
        calibrated failure share).
    target_rate_bits_per_re : float
        The link-adaptation rate ``R`` [bit/RE].
    coherence_time_s : float
        ``T_c`` at the UE speed [s] (``inf`` when static).
    state : RadioState
    """

    rate_mbps: float
    bler: float
    blocks: int
    sionna_blocks: int
    target_rate_bits_per_re: float
    coherence_time_s: float
    state: RadioState

    def as_dict(self) -> dict[str, Any]:
        return {
            "rate_mbps": self.rate_mbps, "bler": self.bler, "blocks": self.blocks,
            "sionna_blocks": self.sionna_blocks,
            "target_rate_bits_per_re": self.target_rate_bits_per_re,
            "coherence_time_s": self.coherence_time_s, "snr_db": self.state.snr_db,
            "speed_mps": self.state.speed_mps, "distance_m": self.state.distance_m,
            "kind": "modelled",
        }


class RadioLinkModel:
    """Windows of modelled rate and BLER for one mmWave link (Sionna, CPU).

    Parameters
    ----------
    spec : MmwaveLinkSpec
        Channel, antennas, numerology, SNR or distance, speed, link adaptation.
    seed : int
        Seed of this link's own torch generators: one stream per radio state and
        purpose (its link-adaptation calibration, its windows, a tracked static
        channel), seeded from ``(seed, purpose, state)``. A state's link adaptation and
        its windows are therefore the same whenever the state is reached, however many
        windows came before it (a run on another backend, with other timing, sees the
        same channel in the same state). Sionna's channel models draw from
        ``sionna.phy.config``: their draws are made under a lock with the stream's state
        swapped in, so links do not perturb each other or the caller.
    """

    _lock = threading.Lock()  # Sionna's random source is process-wide

    def __init__(self, spec: MmwaveLinkSpec, seed: int = 0) -> None:
        self.spec = spec
        self.numerology = Numerology(spec.subcarrier_spacing_hz, spec.num_resource_blocks)
        self._seed = int(seed)
        self._streams: dict[tuple[str, tuple[float, float]], Any] = {}  # generator states
        self._rates: dict[tuple[float, float], tuple[float, float]] = {}  # (R, p_fail)
        self._static: Any = None  # the channel kept while the coherence time lasts
        self._static_left_s = 0.0
        self._queue: list[Any] = []  # block capacities of drawn, unused windows
        self._queue_key: tuple[float, float] | None = None
        self.state = self.state_at(0.0)

    # -- radio state -------------------------------------------------------------------
    def state_at(self, t_s: float) -> RadioState:
        """The radio state ``t_s`` seconds after the schedule's origin."""
        snr, dist, speed = self.spec.snr_db, self.spec.distance_m, self.spec.speed_mps
        for seg in sorted(self.spec.schedule, key=lambda s: s.at_s):
            if seg.at_s > t_s:
                break
            snr = seg.snr_db if seg.snr_db is not None else snr
            dist = seg.distance_m if seg.distance_m is not None else dist
            speed = seg.speed_mps if seg.speed_mps is not None else speed
        if dist is not None:
            snr = snr_from_distance_db(self.spec, dist)
        assert snr is not None
        return RadioState(float(snr), float(speed), dist)

    def coherence_time_s(self, speed_mps: float) -> float:
        """``0.423 / f_D`` [s], ``inf`` for a static UE."""
        doppler_hz = speed_mps * self.spec.carrier_frequency_hz / SPEED_OF_LIGHT_MPS
        return CLARKE_COHERENCE / doppler_hz if doppler_hz > 0 else math.inf

    def block_time_s(self, speed_mps: float) -> float:
        """``T_b = max(T_c, slot)`` [s]: one block per coherence time, never shorter than
        a slot (``inf`` for a static UE)."""
        return max(self.coherence_time_s(speed_mps), self.numerology.slot_duration_s)

    @property
    def max_blocks_per_window(self) -> int:
        """The cap on ``N``: ``ceil(update_s / slot)`` (blocks of one slot each)."""
        return math.ceil(self.spec.update_s / self.numerology.slot_duration_s - 1e-9)

    @property
    def re_per_s(self) -> float:
        """Resource elements per second of the allocation."""
        return self.numerology.symbol_rate_per_s

    # -- Sionna ------------------------------------------------------------------------
    def _stream(self, purpose: str, state: RadioState) -> tuple[str, tuple[float, float]]:
        """The generator stream of ``purpose`` in ``state`` (created on first use, seeded
        from the link's seed, the purpose and the state: a stable hash, not Python's)."""
        import torch

        name = (purpose, state.key)
        if name not in self._streams:
            text = f"{self._seed}:{purpose}:{state.key[0]!r}:{state.key[1]!r}"
            gen = torch.Generator().manual_seed(zlib.crc32(text.encode()))
            self._streams[name] = gen.get_state()
        return name

    def _draw(self, batch: int, steps: int, state: RadioState, purpose: str) -> Any:
        """Channel frequency responses [batch, steps, F, M, N] sampled every block time
        ``max(T_c, slot)`` (every slot for a static UE), from ``purpose``'s stream of
        ``state``."""
        import torch
        from sionna.phy import config
        from sionna.phy.channel import cir_to_ofdm_channel

        speed_mps = state.speed_mps
        stream = self._stream(purpose, state)

        gen_model = self._generator(speed_mps)
        tb = self.block_time_s(speed_mps)
        fs = 1.0 / tb if math.isfinite(tb) else 1.0 / self.numerology.slot_duration_s
        bw = self.numerology.bandwidth_hz
        freqs = torch.linspace(-bw / 2, bw / 2, SAMPLED_SUBCARRIERS)
        with self._lock:
            rng = config.torch_rng("cpu")
            saved = rng.get_state()
            rng.set_state(self._streams[stream])
            try:
                a, tau = gen_model(batch, steps, fs)
            finally:
                self._streams[stream] = rng.get_state()
                rng.set_state(saved)
        h = cir_to_ofdm_channel(freqs, a, tau, normalize=True)  # [B,1,M,1,N,T,F]
        return h[:, 0, :, 0].permute(0, 3, 4, 1, 2)  # [B, T, F, M, N]

    def _generator(self, speed_mps: float) -> Any:
        from sionna.phy.channel.tr38901 import CDL, TDL, AntennaArray

        s = self.spec
        if s.channel_model == "tdl":
            return TDL(
                s.channel_profile, s.delay_spread_s, s.carrier_frequency_hz,
                min_speed=speed_mps, max_speed=speed_mps, num_rx_ant=s.num_rx_antennas,
                num_tx_ant=s.num_tx_antennas, device="cpu",
            )
        arrays = [
            AntennaArray(num_rows=1, num_cols=n // 2, polarization="dual",
                         polarization_type="cross", antenna_pattern="38.901",
                         carrier_frequency=s.carrier_frequency_hz, device="cpu")
            for n in (s.num_tx_antennas, s.num_rx_antennas)
        ]
        return CDL(
            s.channel_profile, s.delay_spread_s, s.carrier_frequency_hz, ut_array=arrays[0],
            bs_array=arrays[1], direction="uplink", min_speed=speed_mps, max_speed=speed_mps,
            device="cpu",
        )

    def block_capacity(self, h: Any, snr_db: float) -> Any:
        """Capacity [bit/RE] of each block: ``h`` [..., F, M, N] -> [...] (mean over F)."""
        import torch

        snr = 10.0 ** ((snr_db - self.spec.implementation_gap_db) / 10.0)
        m, n = h.shape[-2], h.shape[-1]
        eye = torch.eye(m, dtype=h.dtype)
        gram = eye + (snr / n) * h @ h.conj().transpose(-1, -2)
        bits = torch.linalg.slogdet(gram).logabsdet / math.log(2.0)
        return bits.mean(-1)

    def blocks_per_window(self, speed_mps: float) -> int:
        """``N``: blocks of one window, ``ceil(update_s / max(T_c, slot))`` (at most
        :attr:`max_blocks_per_window`; 1 when the channel outlasts the window)."""
        tc = self.coherence_time_s(speed_mps)
        if not (math.isfinite(tc) and tc < self.spec.update_s):
            return 1
        n = math.ceil(self.spec.update_s / self.block_time_s(speed_mps) - 1e-9)
        return min(max(2, n), self.max_blocks_per_window)

    def sionna_blocks_per_window(self, speed_mps: float) -> int:
        """``K = min(N, SIONNA_BLOCKS_PER_WINDOW)``: a window's blocks drawn by Sionna."""
        return min(self.blocks_per_window(speed_mps), SIONNA_BLOCKS_PER_WINDOW)

    def target_rate(self, state: RadioState) -> float:
        """Link adaptation: the ``target_bler`` quantile of block capacity [bit/RE]
        (Sionna series drawn as :meth:`window` draws them, so both see one
        distribution)."""
        return self._calibrate(state)[0]

    def failure_share(self, state: RadioState) -> float:
        """Share of the state's Sionna calibration blocks below the rate ``R``: the
        failure probability of a window's blocks beyond its Sionna-drawn ones."""
        return self._calibrate(state)[1]

    def _calibrate(self, state: RadioState) -> tuple[float, float]:
        """``(R, p_fail)`` of a radio state, from ``calibration_blocks`` Sionna blocks."""
        import torch

        if state.key not in self._rates:
            steps = self.sionna_blocks_per_window(state.speed_mps)
            batch = max(2, self.spec.calibration_blocks // steps)
            h = self._draw(batch, steps, state, "calibration")
            cap = self.block_capacity(h, state.snr_db)
            cap = cap.flatten().double()
            r = max(float(torch.quantile(cap, self.spec.target_bler)), 0.0)
            self._rates[state.key] = (r, float((cap < r).double().mean()))
        return self._rates[state.key]

    # -- one window ----------------------------------------------------------------------
    def window(self, state: RadioState) -> WindowRate:
        """Rate and BLER of the next ``update_s`` window in ``state``.

        A channel that changes within the window (``T_c < update_s``) is sent at the
        link-adaptation rate ``R`` over the window's ``N`` blocks; a block below ``R``
        fails. The first ``K`` blocks are Sionna's (their capacities against ``R``), the
        other ``N - K`` fail i.i.d. with the state's calibrated failure share. A channel
        that outlasts the window (slow or static UE) is tracked: the rate is that
        realisation's own capacity and no block fails; a new realisation is drawn every
        ``T_c`` (never, for a static UE, until the radio state changes).
        """
        tc = self.coherence_time_s(state.speed_mps)
        overhead = (1.0 - self.spec.overhead_fraction) * self.re_per_s / 1e6
        if math.isfinite(tc) and tc < self.spec.update_s:
            n = self.blocks_per_window(state.speed_mps)
            k = self.sionna_blocks_per_window(state.speed_mps)
            r, p_fail = self._calibrate(state)
            self.state = state
            cap = self._next_window(state, k)
            failed = float((cap < r).double().sum()) if r > 0 else float(k)
            if n > k:
                failed += self._binomial(n - k, p_fail if r > 0 else 1.0, state)
            ok = 1.0 - failed / n
            return WindowRate(r * overhead * ok, failed / n, n, k, r, tc, state)
        if self._static is None or self._static_left_s <= 0 or self.state != state:
            self._static = self._draw(1, 1, state, "static")[0]
            self._static_left_s = tc
        self._static_left_s -= self.spec.update_s
        self.state = state
        r = float(self.block_capacity(self._static, state.snr_db).mean())
        return WindowRate(r * overhead, 0.0, 1, 1, r, tc, state)

    def _binomial(self, count: int, p: float, state: RadioState) -> float:
        """Failures among ``count`` i.i.d. blocks of failure probability ``p``, drawn
        from the state's window stream (the one its windows' Sionna draws use)."""
        import torch

        stream = self._stream("windows", state)
        gen = torch.Generator()
        gen.set_state(self._streams[stream])
        draw = torch.binomial(
            torch.tensor([float(count)]), torch.tensor([min(max(p, 0.0), 1.0)]),
            generator=gen,
        )
        self._streams[stream] = gen.get_state()
        return float(draw[0])

    def _next_window(self, state: RadioState, blocks: int) -> Any:
        """Capacities [blocks] of the next window's Sionna blocks (drawn
        ``WINDOWS_PER_DRAW`` windows at a time: one Sionna call per batch of windows)."""
        if self._queue_key != state.key or not self._queue:
            h = self._draw(WINDOWS_PER_DRAW, blocks, state, "windows")
            self._queue = list(self.block_capacity(h, state.snr_db))
            self._queue_key = state.key
        return self._queue.pop()

    def mean_rate_mbps(self, state: RadioState) -> float:
        """Expected goodput [Mbit/s] of a fast-fading state: ``R (1 - overhead) RE/s
        (1 - target_bler)`` (what its windows average to)."""
        r = self.target_rate(state)
        return r * (1.0 - self.spec.overhead_fraction) * self.re_per_s * (
            1.0 - self.spec.target_bler
        ) / 1e6

    def record(self) -> dict[str, Any]:
        """The model's parameters for the run record (labelled modelled)."""
        return {
            "kind": "modelled",
            "model": "Sionna TR 38.901 channel, Shannon capacity per block, "
                     "target-BLER link adaptation, failed blocks retransmitted",
            "spec": self.spec.model_dump(mode="json"),
            "re_per_s": self.re_per_s,
            "bandwidth_hz": self.numerology.bandwidth_hz,
            "coherence_constant": CLARKE_COHERENCE,
            "slot_duration_s": self.numerology.slot_duration_s,
            "blocks_per_window": "N = ceil(update_s / max(T_c, slot)), T_c = "
                                 "coherence_constant / Doppler",
            "max_blocks_per_window": self.max_blocks_per_window,
            "sionna_blocks_per_window": SIONNA_BLOCKS_PER_WINDOW,
            "beyond_sionna_blocks": "fail i.i.d. with the state's calibrated failure "
                                    "share (Binomial)",
        }
