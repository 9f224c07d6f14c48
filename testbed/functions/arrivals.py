"""Seeded request arrival processes for serverless functions.

Every generator returns a sorted ``numpy`` float array of arrival times in seconds, within
``[0, duration_s)``. Randomness comes only from the ``numpy.random.Generator`` passed in, so the
same seed gives the same arrivals.

Processes
---------
``poisson``
    Homogeneous Poisson process.
``bursty``
    Two-state Markov-modulated Poisson process (MMPP-2): ON/OFF phases with exponential durations,
    the ON rate ``burst_factor`` times the OFF rate, scaled so the long-run mean rate is
    ``rate_rps``.
``phases``
    Piecewise-constant Poisson: a list of ``(duration_s, rate_rps)`` phases played in order
    (e.g. a load that rises, peaks and falls); no request after the last phase.
``trace``
    Replay of a CSV trace, either one timestamp per row or per-minute invocation counts in the
    Azure Functions 2019 trace format.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import numpy as np

KINDS: tuple[str, ...] = ("poisson", "bursty", "phases", "trace")
"""Arrival kinds :func:`make_arrivals` accepts."""

AZURE_ID_COLUMNS: tuple[str, ...] = ("HashOwner", "HashApp", "HashFunction", "Trigger")
"""Leading columns of the Azure Functions 2019 invocation-count files."""


def _check_nonneg(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _check_pos(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def poisson(rate_rps: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrivals of a homogeneous Poisson process.

    Draws the count from a Poisson distribution with mean ``rate_rps * duration_s`` and places the
    arrivals uniformly, which is exactly a Poisson process on the interval.

    Parameters
    ----------
    rate_rps : float
        Mean arrival rate in requests per second (>= 0).
    duration_s : float
        Length of the interval in seconds (>= 0).
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    numpy.ndarray
        Sorted arrival times in ``[0, duration_s)``.
    """
    _check_nonneg("rate_rps", rate_rps)
    _check_nonneg("duration_s", duration_s)
    n = int(rng.poisson(rate_rps * duration_s))
    return np.sort(rng.uniform(0.0, duration_s, size=n)) if n else np.empty(0)


def bursty(
    rate_rps: float,
    duration_s: float,
    rng: np.random.Generator,
    burst_factor: float = 5.0,
    mean_on_s: float = 5.0,
    mean_off_s: float = 15.0,
) -> np.ndarray:
    """Arrivals of a two-state Markov-modulated Poisson process (bursts).

    The process alternates between OFF phases (rate ``base``) and ON phases (rate
    ``burst_factor * base``) with exponentially distributed durations of mean ``mean_off_s`` and
    ``mean_on_s``. With ``p = mean_on_s / (mean_on_s + mean_off_s)`` the long-run fraction of time
    ON, ``base = rate_rps / (p * burst_factor + 1 - p)`` so the long-run mean rate is
    ``rate_rps``. The first phase is drawn from the stationary distribution (ON with probability
    ``p``), so the process is stationary from t = 0.

    Parameters
    ----------
    rate_rps : float
        Long-run mean arrival rate in requests per second (>= 0).
    duration_s : float
        Length of the interval in seconds (>= 0).
    rng : numpy.random.Generator
        Source of randomness.
    burst_factor : float, optional
        ON rate over OFF rate (> 0; 1 gives a Poisson process), default 5.
    mean_on_s, mean_off_s : float, optional
        Mean ON and OFF phase durations in seconds (> 0), default 5 and 15.

    Returns
    -------
    numpy.ndarray
        Sorted arrival times in ``[0, duration_s)``.
    """
    _check_nonneg("rate_rps", rate_rps)
    _check_nonneg("duration_s", duration_s)
    _check_pos("burst_factor", burst_factor)
    _check_pos("mean_on_s", mean_on_s)
    _check_pos("mean_off_s", mean_off_s)
    p_on = mean_on_s / (mean_on_s + mean_off_s)
    base = rate_rps / (p_on * burst_factor + 1.0 - p_on)

    # Phase durations, alternating, starting in the stationary state; drawn in batches.
    on_first = bool(rng.random() < p_on)
    means = np.array([mean_on_s, mean_off_s] if on_first else [mean_off_s, mean_on_s])
    rates = np.array([burst_factor * base, base] if on_first else [base, burst_factor * base])
    cycle = mean_on_s + mean_off_s
    lengths: list[np.ndarray] = []
    total = 0.0
    while total < duration_s:
        pairs = max(16, int(1.2 * (duration_s - total) / cycle) + 16)
        batch = rng.exponential(np.tile(means, pairs))
        lengths.append(batch)
        total += float(batch.sum())
    if not lengths:
        return np.empty(0)
    seg_len = np.concatenate(lengths)
    seg_end = np.cumsum(seg_len)
    seg_start = seg_end - seg_len
    keep = seg_start < duration_s
    seg_start, seg_len = seg_start[keep], seg_len[keep]
    seg_len = np.minimum(seg_len, duration_s - seg_start)
    seg_rate = np.tile(rates, seg_len.size // 2 + 1)[: seg_len.size]

    counts = rng.poisson(seg_rate * seg_len)
    offsets = rng.random(int(counts.sum())) * np.repeat(seg_len, counts)
    times = np.repeat(seg_start, counts) + offsets
    return np.sort(times[times < duration_s])


def _read_rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as fh:
        return [row for row in csv.reader(fh) if row and any(cell.strip() for cell in row)]


def load_trace(
    path: str | os.PathLike[str],
    *,
    time_scale: float = 1.0,
    column: str = "t_s",
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Load arrival times from a CSV trace.

    Two formats are recognised by their header:

    (a) a column named ``column`` (default ``t_s``): one arrival per row, time in seconds;
        other columns are ignored.
    (b) Azure Functions 2019 invocation counts: header ``HashOwner,HashApp,HashFunction,Trigger,
        1,2,...,N`` where column ``k`` holds the invocations in minute ``k`` (1-based). Only the
        first data row (one function) is used; the ``c`` arrivals of minute ``k`` are placed
        uniformly at random in ``[60 (k - 1), 60 k)``.

    Parameters
    ----------
    path : str or os.PathLike
        The CSV file.
    time_scale : float, optional
        Multiplies every time (> 0); 0.1 replays the trace ten times faster. Default 1.
    column : str, optional
        Timestamp column of format (a). Default ``"t_s"``.
    rng : numpy.random.Generator, optional
        Places the arrivals within each minute in format (b); default
        ``numpy.random.default_rng(0)``, so loading is deterministic. Unused for format (a).

    Returns
    -------
    numpy.ndarray
        Sorted arrival times in seconds (scaled), starting at or after 0.

    Raises
    ------
    ValueError
        Unknown header, no data row, or a bad cell (negative or non-numeric).
    """
    _check_pos("time_scale", time_scale)
    path = Path(path)
    rows = _read_rows(path)
    if not rows:
        raise ValueError(f"{path}: empty trace file")
    header = [cell.strip() for cell in rows[0]]
    data = rows[1:]

    if column in header:
        idx = header.index(column)
        try:
            times = np.array([float(row[idx]) for row in data], dtype=float)
        except (ValueError, IndexError) as exc:
            raise ValueError(f"{path}: bad value in column {column!r}: {exc}") from exc
        if times.size and not (np.all(np.isfinite(times)) and times.min() >= 0):
            raise ValueError(f"{path}: column {column!r} must hold finite times >= 0")
        return np.sort(times) * time_scale

    n_id = len(AZURE_ID_COLUMNS)
    if tuple(header[:n_id]) == AZURE_ID_COLUMNS:
        if not data:
            raise ValueError(f"{path}: Azure-format trace has no data row")
        try:
            minutes = [int(name) for name in header[n_id:]]
            counts = [int(float(cell)) for cell in data[0][n_id : n_id + len(minutes)]]
        except ValueError as exc:
            raise ValueError(f"{path}: bad Azure-format minute column or count: {exc}") from exc
        if len(counts) != len(minutes) or min(counts, default=0) < 0 or min(minutes) < 1:
            raise ValueError(f"{path}: Azure-format row must hold a count >= 0 per minute >= 1")
        rng = np.random.default_rng(0) if rng is None else rng
        starts = 60.0 * (np.array(minutes, dtype=float) - 1.0)
        counts_arr = np.array(counts, dtype=np.int64)
        times = np.repeat(starts, counts_arr) + 60.0 * rng.random(int(counts_arr.sum()))
        return np.sort(times) * time_scale

    raise ValueError(
        f"{path}: unknown trace format: expected a {column!r} column or the Azure Functions "
        f"header {','.join(AZURE_ID_COLUMNS)},1,2,..."
    )


def trace(
    path: str | os.PathLike[str],
    duration_s: float,
    rng: np.random.Generator,
    time_scale: float = 1.0,
) -> np.ndarray:
    """Trace arrivals (see :func:`load_trace`) clipped to ``[0, duration_s)``.

    Parameters
    ----------
    path : str or os.PathLike
        The CSV trace.
    duration_s : float
        Keep arrivals before this time (after scaling).
    rng : numpy.random.Generator
        Places arrivals within each minute of an Azure-format trace.
    time_scale : float, optional
        Multiplies every time, default 1.

    Returns
    -------
    numpy.ndarray
        Sorted arrival times in ``[0, duration_s)``.
    """
    _check_nonneg("duration_s", duration_s)
    times = load_trace(path, time_scale=time_scale, rng=rng)
    return times[(times >= 0) & (times < duration_s)]


def phases(
    steps: list[tuple[float, float]], duration_s: float, rng: np.random.Generator
) -> np.ndarray:
    """Arrivals of a Poisson process whose rate is constant within each phase.

    Parameters
    ----------
    steps : list of (float, float)
        ``(duration_s, rate_rps)`` per phase, in order; durations > 0 s, rates >= 0 rps.
    duration_s : float
        Length of the run in seconds; phases past it are cut, time after the last phase
        has no arrivals.
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    numpy.ndarray
        Sorted arrival times in ``[0, duration_s)``.
    """
    if not steps:
        raise ValueError("phases: at least one (duration_s, rate_rps) phase is required")
    out, start = [], 0.0
    for k, (length, rate) in enumerate(steps):
        _check_pos(f"phases.{k}.duration_s", length)
        _check_nonneg(f"phases.{k}.rate_rps", rate)
        out.append(start + poisson(rate, length, rng))
        start += length
    times = np.concatenate(out)
    return times[times < duration_s]


def make_arrivals(
    kind: str,
    *,
    rate_rps: float,
    duration_s: float,
    seed: int,
    trace_path: str | None = None,
    burst_factor: float = 5.0,
    time_scale: float = 1.0,
    steps: list[tuple[float, float]] | None = None,
) -> np.ndarray:
    """Arrivals of the named kind, from ``numpy.random.default_rng(seed)``.

    Parameters
    ----------
    kind : str
        ``"poisson"``, ``"bursty"``, ``"phases"`` or ``"trace"``.
    rate_rps : float
        Mean rate for ``poisson`` and ``bursty``; ignored for ``trace`` (the trace sets the rate).
    duration_s : float
        Length of the run in seconds.
    seed : int
        Seed of the generator.
    trace_path : str, optional
        CSV trace; required for ``kind="trace"``.
    burst_factor : float, optional
        ON/OFF rate ratio for ``bursty``, default 5.
    time_scale : float, optional
        Time multiplier for ``trace``, default 1; ignored by the synthetic kinds (their rate and
        duration are already in the caller's time base).
    steps : list of (float, float), optional
        ``(duration_s, rate_rps)`` phases; required for ``kind="phases"``.

    Returns
    -------
    numpy.ndarray
        Sorted arrival times in ``[0, duration_s)``.

    Raises
    ------
    ValueError
        Unknown ``kind``, a missing ``trace_path``, or a bad number; the message names the field.
    """
    rng = np.random.default_rng(seed)
    if kind == "poisson":
        return poisson(rate_rps, duration_s, rng)
    if kind == "bursty":
        return bursty(rate_rps, duration_s, rng, burst_factor=burst_factor)
    if kind == "phases":
        return phases(list(steps or []), duration_s, rng)
    if kind == "trace":
        if not trace_path:
            raise ValueError("trace_path is required when kind is 'trace'")
        return trace(trace_path, duration_s, rng, time_scale=time_scale)
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
