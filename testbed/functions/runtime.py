"""Gaia's Dynamic Function Runtime: re-evaluate a function's CPU/GPU placement from its metrics.

Gaia (arXiv 2511.13728) lets a function declare one of four execution modes:

``cpu`` / ``gpu``
    Pinned; the runtime never moves them (Gaia's re-evaluator skips them).
``cpu_preferred``
    Runs on a CPU; may be *promoted* to ``gpu_preferred`` when the CPU is too slow.
``gpu_preferred``
    Runs on a GPU; may be *demoted* to ``cpu_preferred`` when the GPU does not pay off.

Every ``eval_interval_s`` Gaia's re-evaluation service reads a few Prometheus queries for the
function's current Knative revision and walks a fixed list of cases (0-4). This module
re-implements that decision logic as pure, clock-free code: the caller feeds completed-request
latencies with :meth:`DynamicRuntime.observe` and calls :meth:`DynamicRuntime.evaluate` with the
current (simulated) time. No I/O, no wall clock.

Semantics carried over from Gaia's re-evaluation service (``reevaluation/evaluator_service.py``
and ``reevaluation/queries.py`` in polaris-slo-cloud/gaia):

* Metrics are per Knative revision and every switch creates a new revision, so all windows only
  see samples recorded since the last switch. Here a switch clears the sample buffer.
* At a switch, the p95 over the *long* window of the revision being left is recorded as that
  backend's latency (``cpu_latency_ms`` when leaving the CPU, ``gpu_latency_ms`` when leaving the
  GPU). Gaia merges a new value with a previously recorded one by taking the maximum (its code
  carries a "really max??" TODO); this module does the same, and keeps the old value when the
  new p95 is not available.
* The lock to ``gpu`` (case 0) records no latency and is final.
* "Recent update" means the last switch happened less than ``window_s`` ago. Cases 3.x
  additionally require ``cold_start_wait_s`` to have passed since the switch. Gaia compares
  whole elapsed minutes (``int(seconds / 60)``); for thresholds that are whole minutes the
  continuous comparison used here gives the same answer. A function that has never switched is
  not "recently updated".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from nodes.functions.identifier import MODES  # the four execution modes (one definition)

DYNAMIC_MODES: tuple[str, ...] = ("cpu_preferred", "gpu_preferred")
"""The modes the runtime may switch between (plus the final lock to ``gpu``)."""


@dataclass(frozen=True)
class RuntimeThresholds:
    """Thresholds of Gaia's re-evaluation; defaults are Gaia's defaults.

    Attributes
    ----------
    eval_interval_s : float
        How often the caller should call :meth:`DynamicRuntime.evaluate` (Gaia: 60 s). The
        runtime itself does not enforce it.
    window_s : float
        Window of the p95 that drives cases 2 and 3, and the "recent update" window of cases 3
        and 4 (Gaia: ``WINDOW_MINUTES`` = 30 min).
    long_window_s : float
        Window of the p95 recorded for the backend being left at a switch (Gaia:
        ``LONG_INTERVAL_WINDOW_MINUTES`` = 500 min).
    rate_window_s : float
        Window of the short request rate of case 1, "too low to decide" (Gaia: 1 min).
    low_rate_window_s : float
        Window of the long request rate of case 4, low-rate demotion (Gaia: 30 min).
    cold_start_wait_s : float
        Time after a switch before the case-3 "recent change" checks apply, so a cold start does
        not count against the new backend (Gaia: 2 min).
    upper_bound_ms : float
        The function's SLO on the p95 latency (Gaia: 1000 ms).
    low_rate_upper_bound_ms : float
        CPU latency still acceptable when the request rate is low (Gaia: 2000 ms).
    gap_ms : float
        Performance gap one backend must beat the other by (Gaia: 200 ms).
    low_rate_rps : float
        Long request rate below which a GPU function counts as low-rate (Gaia: 0.01 rps).
    too_low_rps : float
        Short request rate below which latency is not trusted for a decision (Gaia: 0.2 rps).
    lock_gpu_ms : float
        Recorded CPU latency from which the function is locked to ``gpu`` (Gaia: 100000 ms, the
        highest bucket boundary of Knative's latency histogram).
    """

    eval_interval_s: float = 60.0
    window_s: float = 1800.0
    long_window_s: float = 30000.0
    rate_window_s: float = 60.0
    low_rate_window_s: float = 1800.0
    cold_start_wait_s: float = 120.0
    upper_bound_ms: float = 1000.0
    low_rate_upper_bound_ms: float = 2000.0
    gap_ms: float = 200.0
    low_rate_rps: float = 0.01
    too_low_rps: float = 0.2
    lock_gpu_ms: float = 100000.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{f.name} must be a finite number >= 0, got {value!r}")
            if f.name.endswith("_s") and f.name != "cold_start_wait_s" and value <= 0:
                raise ValueError(f"{f.name} must be > 0, got {value!r}")

    def scaled(self, time_scale: float) -> RuntimeThresholds:
        """Return a copy with every duration (``*_s`` field) multiplied by ``time_scale``.

        Parameters
        ----------
        time_scale : float
            Factor > 0; 0.1 makes every window ten times shorter.

        Returns
        -------
        RuntimeThresholds
            The scaled copy. Latency bounds (``*_ms``) and request-rate thresholds (``*_rps``)
            are left unchanged; rescaling rates, if wanted, is the caller's choice.
        """
        if not (math.isfinite(time_scale) and time_scale > 0):
            raise ValueError(f"time_scale must be a finite number > 0, got {time_scale!r}")
        changes = {
            f.name: getattr(self, f.name) * time_scale
            for f in fields(self)
            if f.name.endswith("_s")
        }
        return replace(self, **changes)

    @property
    def keep_s(self) -> float:
        """Longest window any query looks back over; older samples are dropped."""
        return max(self.window_s, self.long_window_s, self.rate_window_s, self.low_rate_window_s)


@dataclass(frozen=True)
class Decision:
    """One decision of :meth:`DynamicRuntime.evaluate`.

    Attributes
    ----------
    t : float
        Time of the evaluation.
    old, new : str
        Mode before and after. ``new == old`` when the decision was not applied.
    reason : str
        Which Gaia case fired and the numbers behind it, e.g.
        ``"case 2: p95 1234 ms > bound 1000 ms and GPU (none yet) + gap <= p95"``.
    p95_ms : float or None
        p95 over ``window_s`` of the current revision at the evaluation.
    rate_rps : float or None
        The request rate the case looked at: the long (``low_rate_window_s``) rate for case 4,
        the short (``rate_window_s``) rate otherwise.
    applied : bool
        False when a move to the GPU was due but no GPU was free (the state is unchanged).
    """

    t: float
    old: str
    new: str
    reason: str
    p95_ms: float | None
    rate_rps: float | None
    applied: bool = True


class _Samples:
    """Time-sorted (time, latency) samples in numpy buffers with cheap append and front drop."""

    __slots__ = ("_t", "_v", "_lo", "_hi")

    def __init__(self, capacity: int = 256) -> None:
        self._t = np.empty(capacity, dtype=float)
        self._v = np.empty(capacity, dtype=float)
        self._lo = 0
        self._hi = 0

    def __len__(self) -> int:
        return self._hi - self._lo

    def clear(self) -> None:
        self._lo = self._hi = 0

    def _make_room(self) -> None:
        n = len(self)
        cap = max(256, 2 * n)
        t = np.empty(cap, dtype=float)
        v = np.empty(cap, dtype=float)
        t[:n] = self._t[self._lo : self._hi]
        v[:n] = self._v[self._lo : self._hi]
        self._t, self._v, self._lo, self._hi = t, v, 0, n

    def add(self, t: float, v: float) -> None:
        if self._hi == len(self._t):
            self._make_room()
        lo, hi = self._lo, self._hi
        if hi > lo and t < self._t[hi - 1]:  # out of order: keep the buffer sorted
            pos = lo + int(np.searchsorted(self._t[lo:hi], t, side="right"))
            self._t[pos + 1 : hi + 1] = self._t[pos:hi]
            self._v[pos + 1 : hi + 1] = self._v[pos:hi]
            self._t[pos], self._v[pos] = t, v
        else:
            self._t[hi], self._v[hi] = t, v
        self._hi = hi + 1

    def drop_through(self, cutoff: float) -> None:
        """Drop samples with time <= ``cutoff``."""
        live = self._t[self._lo : self._hi]
        self._lo += int(np.searchsorted(live, cutoff, side="right"))

    def values_in(self, start: float, end: float) -> np.ndarray:
        """Latencies of samples with time in ``(start, end]``."""
        live = self._t[self._lo : self._hi]
        i = int(np.searchsorted(live, start, side="right"))
        j = int(np.searchsorted(live, end, side="right"))
        return self._v[self._lo + i : self._lo + j]


def _ms(value: float | None) -> str:
    return "none yet" if value is None else f"{value:.0f} ms"


def _merge_max(old: float | None, new: float | None) -> float | None:
    """Gaia's merge of a recorded latency: the maximum of both, or whichever is known."""
    if old is None:
        return new
    if new is None:
        return old
    return max(old, new)


class DynamicRuntime:
    """Gaia's Dynamic Function Runtime for one function.

    Parameters
    ----------
    mode : str
        Initial execution mode, one of :data:`MODES`.
    thresholds : RuntimeThresholds
        Decision thresholds (use :meth:`RuntimeThresholds.scaled` for accelerated time).
    now : float, optional
        Time the function's first revision starts (default 0). Request rates of a young revision
        are computed over its age, not over the full window.

    Attributes
    ----------
    mode : str
        Current execution mode.
    cpu_latency_ms, gpu_latency_ms : float or None
        Latency recorded for each backend at past switches (long-window p95, max-merged).
    last_switch_t : float or None
        Time of the last applied switch; None until the first one.
    decisions : list of Decision
        Every decision taken, in order, including blocked ones (``applied=False``); count
        switches with ``sum(d.applied for d in decisions)``.

    Notes
    -----
    Latencies are exact empirical p95s (numpy's default linear interpolation) of the samples in
    the window, where Gaia reads ``histogram_quantile(0.95, ...)`` off Knative's activator
    histogram; Gaia only counts 2xx responses, so the caller should only observe successful
    requests. Queries assume time does not go backwards: samples older than the longest window
    (relative to the newest observation or evaluation) are dropped.
    """

    def __init__(self, mode: str, thresholds: RuntimeThresholds, now: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode: str = mode
        self.thresholds: RuntimeThresholds = thresholds
        self.cpu_latency_ms: float | None = None
        self.gpu_latency_ms: float | None = None
        self.last_switch_t: float | None = None
        self.decisions: list[Decision] = []
        self._revision_start = float(now)
        self._revision_first_t: float | None = None
        self._samples = _Samples()

    @property
    def backend(self) -> str:
        """``"cpu"`` for ``cpu``/``cpu_preferred``, ``"gpu"`` for ``gpu``/``gpu_preferred``."""
        return "gpu" if self.mode in ("gpu", "gpu_preferred") else "cpu"

    @property
    def revision_start(self) -> float:
        """Start time of the current revision (construction time or last switch)."""
        return self._revision_start

    def observe(self, t: float, latency_ms: float) -> None:
        """Record a completed request.

        Parameters
        ----------
        t : float
            Completion time of the request.
        latency_ms : float
            Its end-to-end latency in milliseconds (finite, >= 0).

        Notes
        -----
        A request that completes before the current revision started belongs to the previous
        revision, whose metrics Gaia no longer reads, and is ignored.
        """
        if not (math.isfinite(t) and math.isfinite(latency_ms)) or latency_ms < 0:
            raise ValueError(f"bad sample: t={t!r}, latency_ms={latency_ms!r}")
        if t < self._revision_start:
            return
        self._samples.add(float(t), float(latency_ms))
        if self._revision_first_t is None or t < self._revision_first_t:
            self._revision_first_t = float(t)
        self._samples.drop_through(t - self.thresholds.keep_s)

    def p95_ms(self, now: float, window_s: float) -> float | None:
        """p95 latency of the current revision's requests completed in ``(now - window_s, now]``.

        Returns
        -------
        float or None
            None when the window holds no sample (Prometheus returns no value).
        """
        values = self._samples.values_in(now - window_s, now)
        if values.size == 0:
            return None
        return float(np.percentile(values, 95))

    def rate_rps(self, now: float, window_s: float) -> float | None:
        """Request rate of the current revision over ``(now - window_s, now]``.

        The count of samples in the window is divided by ``min(window_s, age)`` where ``age`` is
        the time since the current revision started, floored at 1 s, so a young revision is not
        read as low-rate (Prometheus' ``rate()`` likewise only extrapolates over the span the
        series exists).

        Returns
        -------
        float or None
            None ("request rate not available", Gaia's case 4.1) when the window is empty *and*
            the current revision has not completed a single request up to ``now``: Knative's
            request counter for a revision does not exist before its first request, so Prometheus
            returns no value. For a revision younger than the window this is exactly "no sample
            in the window". A revision that did serve requests but none in the window reads 0.0.
            Cases 1 and 4 treat None and a too-low rate the same way, so the choice only shows in
            the decision's reason.
        """
        n = self._samples.values_in(now - window_s, now).size
        if n == 0 and (self._revision_first_t is None or self._revision_first_t > now):
            return None
        span = max(min(window_s, now - self._revision_start), 1.0)
        return n / span

    def evaluate(self, now: float, gpu_available: bool = True) -> Decision | None:
        """Run one re-evaluation (Gaia's cases 0-4, in order) at time ``now``.

        Parameters
        ----------
        now : float
            Current time; call every ``thresholds.eval_interval_s``.
        gpu_available : bool, optional
            Whether a GPU is free for this function. Only consulted for a move from the CPU to
            the GPU (promotion or the lock from ``cpu_preferred``).

        Returns
        -------
        Decision or None
            None when nothing fires (and always for the pinned ``cpu``/``gpu`` modes). Otherwise
            the decision, also appended to :attr:`decisions`. An applied switch starts a new
            revision: the mode changes, the long-window p95 of the backend being left is
            recorded (max-merged), ``last_switch_t`` is set and the samples are cleared. A
            move to the GPU with ``gpu_available=False`` returns ``applied=False``, ``new ==
            old`` and a reason ending in ``"blocked: no GPU free"``, and changes nothing.

        Notes
        -----
        Cases, as in Gaia's ``evaluator``:

        0. Both latencies recorded, CPU >= ``lock_gpu_ms`` and CPU - gap > GPU: lock to ``gpu``.
        1. Short rate unavailable or < ``too_low_rps``: skip the latency cases 2 and 3.
        2. ``cpu_preferred`` and p95 > ``upper_bound_ms`` and (GPU unknown or GPU + gap <= p95):
           promote.
        3. Only when cold_start_wait_s <= time since last switch < window_s:

           3.1 ``gpu_preferred``, CPU known and p95 + gap >= CPU: demote (GPU not much faster).
           3.2 ``cpu_preferred``, GPU known and p95 - gap >= GPU: promote (GPU much faster).
        4. ``gpu_preferred`` and no switch within ``window_s``, with the long rate:

           4.1 rate unavailable and (CPU unknown or CPU < ``low_rate_upper_bound_ms``): demote.
           4.2 rate < ``low_rate_rps`` and (CPU unknown or CPU < ``low_rate_upper_bound_ms``):
           demote.
        """
        if self.mode not in DYNAMIC_MODES:
            return None
        th = self.thresholds
        self._samples.drop_through(now - th.keep_s)
        p95 = self.p95_ms(now, th.window_s)
        rate = self.rate_rps(now, th.rate_window_s)
        decision = self._case_0(now, p95, rate, gpu_available)
        # Case 1: too few requests to trust latency; cases 2 and 3 are skipped.
        if decision is None and rate is not None and rate >= th.too_low_rps and p95 is not None:
            decision = self._case_2(now, p95, rate, gpu_available)
            if decision is None:
                decision = self._case_3(now, p95, rate, gpu_available)
        if decision is None:
            decision = self._case_4(now, p95, gpu_available)
        return decision

    def _case_0(
        self, now: float, p95: float | None, rate: float | None, gpu_available: bool
    ) -> Decision | None:
        """CPU hopeless (top histogram bucket) and slower than the GPU: final GPU mode."""
        cpu, gpu, th = self.cpu_latency_ms, self.gpu_latency_ms, self.thresholds
        if not (
            cpu is not None and gpu is not None and cpu >= th.lock_gpu_ms and cpu - th.gap_ms > gpu
        ):
            return None
        reason = (
            f"case 0: CPU {cpu:.0f} ms >= {th.lock_gpu_ms:.0f} ms and CPU - gap "
            f"{th.gap_ms:.0f} ms > GPU {gpu:.0f} ms: lock to gpu"
        )
        return self._switch(now, "gpu", reason, p95, rate, gpu_available, record=False)

    def _case_2(self, now: float, p95: float, rate: float, gpu_available: bool) -> Decision | None:
        """The CPU misses the bound and the GPU is (presumably) faster: promote."""
        gpu, th = self.gpu_latency_ms, self.thresholds
        if (
            self.mode == "cpu_preferred"
            and p95 > th.upper_bound_ms
            and (gpu is None or gpu + th.gap_ms <= p95)
        ):
            reason = (
                f"case 2: p95 {p95:.0f} ms > bound {th.upper_bound_ms:.0f} ms "
                f"and GPU ({_ms(gpu)}) + gap <= p95"
            )
            return self._switch(now, "gpu_preferred", reason, p95, rate, gpu_available)
        return None

    def _case_3(self, now: float, p95: float, rate: float, gpu_available: bool) -> Decision | None:
        """A recent switch, past the cold-start wait: compare with the other backend."""
        cpu, gpu, th = self.cpu_latency_ms, self.gpu_latency_ms, self.thresholds
        gap = th.gap_ms
        if self.last_switch_t is None:
            return None
        if not th.cold_start_wait_s <= now - self.last_switch_t < th.window_s:
            return None
        if self.mode == "gpu_preferred" and cpu is not None and p95 + gap >= cpu:
            reason = (
                f"case 3.1: GPU p95 {p95:.0f} ms + gap {gap:.0f} ms >= CPU "
                f"{cpu:.0f} ms: GPU not significantly faster"
            )
            return self._switch(now, "cpu_preferred", reason, p95, rate, gpu_available)
        if self.mode == "cpu_preferred" and gpu is not None and p95 - gap >= gpu:
            reason = (
                f"case 3.2: CPU p95 {p95:.0f} ms - gap {gap:.0f} ms >= GPU "
                f"{gpu:.0f} ms: GPU significantly faster"
            )
            return self._switch(now, "gpu_preferred", reason, p95, rate, gpu_available)
        return None

    def _case_4(self, now: float, p95: float | None, gpu_available: bool) -> Decision | None:
        """A GPU function that has not switched recently: demote if it is barely used."""
        cpu, th = self.cpu_latency_ms, self.thresholds
        recent = self.last_switch_t is not None and now - self.last_switch_t < th.window_s
        if self.mode != "gpu_preferred" or recent:
            return None
        long_rate = self.rate_rps(now, th.low_rate_window_s)
        bound = th.low_rate_upper_bound_ms
        if cpu is None:
            cpu_txt = "CPU latency not available"
        elif cpu < bound:
            cpu_txt = f"CPU {cpu:.0f} ms < {bound:.0f} ms"
        else:
            return None
        if long_rate is None:
            reason = f"case 4.1: request rate not available and {cpu_txt}"
            return self._switch(now, "cpu_preferred", reason, p95, None, gpu_available)
        if long_rate < th.low_rate_rps:
            reason = (
                f"case 4.2: request rate {long_rate:.4g} rps < {th.low_rate_rps:g} rps "
                f"and {cpu_txt}"
            )
            return self._switch(now, "cpu_preferred", reason, p95, long_rate, gpu_available)
        return None

    def _switch(
        self,
        now: float,
        new: str,
        reason: str,
        p95: float | None,
        rate: float | None,
        gpu_available: bool,
        record: bool = True,
    ) -> Decision:
        """Apply (or block) a switch to ``new`` and log the decision."""
        old = self.mode
        new_backend = "gpu" if new in ("gpu", "gpu_preferred") else "cpu"
        if new_backend == "gpu" and self.backend == "cpu" and not gpu_available:
            decision = Decision(
                now, old, old, f"{reason}; blocked: no GPU free", p95, rate, applied=False
            )
            self.decisions.append(decision)
            return decision
        if record:
            left = self.p95_ms(now, self.thresholds.long_window_s)
            if self.backend == "cpu":
                self.cpu_latency_ms = _merge_max(self.cpu_latency_ms, left)
            else:
                self.gpu_latency_ms = _merge_max(self.gpu_latency_ms, left)
        self.mode = new
        self.last_switch_t = float(now)
        self._revision_start = float(now)
        self._revision_first_t = None
        self._samples.clear()
        decision = Decision(now, old, new, reason, p95, rate)
        self.decisions.append(decision)
        return decision
