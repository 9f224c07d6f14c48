"""testbed/stats.py: mean and sample std over seeds, and the ``mean ± std`` text that the
failure study, the functions report and the benchmarks' tables print."""

from __future__ import annotations

import pytest

from testbed.stats import fmt_mean_std, mean_std


def test_mean_std_is_the_sample_std() -> None:
    assert mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)  # n - 1: the population std is 0.816
    m, sd = mean_std([10.0, 20.0])
    assert m == 15.0 and sd == pytest.approx(7.0711, abs=1e-4)  # population: 5.0
    assert mean_std([4.0]) == (4.0, None)  # one seed: no spread, not a zero spread
    with pytest.raises(ValueError, match="no values"):
        mean_std([])


def test_text_of_the_sample_std() -> None:
    assert fmt_mean_std([1.0, 2.0, 3.0]) == "2.0 ± 1.0"  # population std: "2.0 ± 0.8"
    assert fmt_mean_std([1.0, None, 3.0]) == "2.0 ± 1.4 (n=2)"  # population: "± 1.0"
    assert fmt_mean_std([5.0]) == "5.0"
    assert fmt_mean_std([None, None]) == "-"


def test_the_options_each_caller_uses() -> None:
    # testbed/failure_study.py: three digits, one value "± 0.000", no count of missing
    assert fmt_mean_std([0.5], 3, one="zero", count_missing=False) == "0.500 ± 0.000"
    assert fmt_mean_std([0.5, None, 0.7], 3, one="zero", count_missing=False) == (
        "0.600 ± 0.141"
    )
    # bench/tt_study.py: scaled, a signed mean (never a signed std), "(n=1)"
    assert fmt_mean_std([0.01, 0.03], 1, scale=100, sign=True) == "+2.0 ± 1.4"
    assert fmt_mean_std([-0.01], 1, scale=100, sign=True, one="n") == "-1.0 (n=1)"
    # bench/hyperion.py and bench/diloco.py: ASCII separator, their own empty text
    assert fmt_mean_std([1.0, 3.0], 0, sep=" +- ") == "2 +- 1"
    assert fmt_mean_std([], 2, empty="not reached") == "not reached"
