"""Mean and sample standard deviation over repeated runs, and their ``mean ± std`` text.

The one helper behind every table that summarises seeds: the failure study
(:mod:`testbed.failure_study`), the functions report (:mod:`testbed.functions.seeds`)
and the benchmarks' tables (``bench/tt_study.py``, ``bench/hyperion.py``,
``bench/diloco.py``). It lives in ``testbed`` and imports only the standard library, so
anything above ``nodes`` may use it without an import cycle.

Conventions ("Figures" in CONTRIBUTING.md):

- the std is the **sample** std (n - 1, :func:`statistics.stdev`): the seeds are a
  sample of the runs one could make, not the whole population;
- **one value has no std** (``None``), not a zero std: no spread is measured from one
  run. The text then shows the mean alone by default; ``one="zero"`` and ``one="n"``
  keep the older tables' ``± 0.000`` and ``(n=1)``;
- missing values (``None``, a run without the figure) are left out, and the text says
  how many remain (``(n=k)``) unless ``count_missing=False``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Literal

__all__ = ["fmt_mean_std", "mean_std"]


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (n - 1) of ``values``.

    Parameters
    ----------
    values : sequence of float
        At least one value.

    Returns
    -------
    (float, float or None)
        The mean (:func:`statistics.fmean`) and the sample std; the std is ``None`` for a
        single value (no spread measured, which is not a zero spread).

    Raises
    ------
    ValueError
        When ``values`` is empty.
    """
    if not values:
        raise ValueError("mean_std: no values")
    sd = statistics.stdev(values) if len(values) > 1 else None
    return statistics.fmean(values), sd


def fmt_mean_std(
    values: Sequence[float | None],
    digits: int = 1,
    *,
    scale: float = 1.0,
    sign: bool = False,
    sep: str = " ± ",
    one: Literal["mean", "zero", "n"] = "mean",
    count_missing: bool = True,
    empty: str = "-",
) -> str:
    """``mean ± std`` of the values that exist, e.g. ``"2.0 ± 1.0"``.

    Parameters
    ----------
    values : sequence of float or None
        One value per run (seed); ``None`` for a run without the figure.
    digits : int
        Decimals of both the mean and the std.
    scale : float
        Both are multiplied by it before printing (e.g. 100 for percent).
    sign : bool
        The mean with an explicit sign (``+0.5``), for differences; never the std.
    sep : str
        Between the mean and the std (``" +- "`` in the ASCII benchmark tables).
    one : {"mean", "zero", "n"}
        A single value: the mean alone (``"5.0"``), with a zero std (``"5.0 ± 0.0"``),
        or with its count (``"5.0 (n=1)"``).
    count_missing : bool
        Append ``(n=k)`` when some values are ``None`` (k: those that exist).
    empty : str
        The text when no value exists.
    """
    vals = [v for v in values if v is not None]
    if not vals:
        return empty
    m, sd = mean_std(vals)
    text = f"{m * scale:{'+' if sign else ''}.{digits}f}"
    if sd is not None or one == "zero":
        text += f"{sep}{(sd or 0.0) * scale:.{digits}f}"
    elif one == "n":
        text += " (n=1)"
    return text + (f" (n={len(vals)})" if count_missing and len(vals) < len(values) else "")
