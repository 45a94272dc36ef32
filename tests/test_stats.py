"""The throughput statistics as pure functions, with exact values."""
from __future__ import annotations

import math

import pytest

from kitctl.core.stats import binom_cdf_half, median, median_ci, order_statistic_level, sample_std, summarize


def test_median_odd_even():
    assert median([3, 1, 2]) == 2.0
    assert median([4, 1, 3, 2]) == 2.5
    with pytest.raises(ValueError):
        median([])


def test_sample_std_uses_n_minus_one():
    assert sample_std([1, 2, 3, 4, 5]) == pytest.approx(math.sqrt(2.5))
    assert sample_std([2, 4]) == pytest.approx(math.sqrt(2))
    assert sample_std([7]) is None


def test_binomial_levels_exact():
    assert binom_cdf_half(0, 5) == 1 / 32
    assert order_statistic_level(5, 1) == 0.9375  # min–max with 5 runs: 1 − 2·0.5⁵
    assert order_statistic_level(9, 2) == 1 - 2 * 10 / 512
    assert order_statistic_level(2, 1) == 0.5
    with pytest.raises(ValueError):
        order_statistic_level(5, 3)


def test_five_runs_min_max_at_its_actual_level():
    ci = median_ci([10.0, 14.0, 11.0, 13.0, 12.0])
    assert (ci.low, ci.high, ci.level, ci.j, ci.reached_requested) == (10.0, 14.0, 0.9375, 1, False)


def test_six_runs_reach_95():
    ci = median_ci([1, 2, 3, 4, 5, 6])
    assert (ci.low, ci.high, ci.level, ci.reached_requested) == (1.0, 6.0, 1 - 2 / 64, True)


def test_narrowest_interval_at_or_above_the_level():
    ci = median_ci(list(range(1, 10)))  # n = 9: [x(2), x(8)] at 96.09 %; [x(3), x(7)] only 82 %
    assert (ci.low, ci.high, ci.j) == (2.0, 8.0, 2)
    assert ci.level == pytest.approx(0.9609375)
    ci = median_ci(list(range(1, 11)))  # n = 10: [x(2), x(9)] at 97.85 %
    assert (ci.low, ci.high, ci.level) == (2.0, 9.0, 1 - 2 * 11 / 1024)
    ci = median_ci(list(range(1, 10)), level=0.8)  # a lower level narrows it: [x(3), x(7)]
    assert (ci.low, ci.high, ci.level) == (3.0, 7.0, 1 - 2 * 46 / 512)


def test_single_run_has_no_interval():
    ci = median_ci([5.0])
    assert (ci.low, ci.high, ci.level) == (None, None, None)


def test_summarize_reports_method_and_actual_level():
    s = summarize([100.0, 104.0, 101.0, 103.0, 102.0])
    assert s["n"] == 5 and s["median"] == 102.0 and (s["min"], s["max"]) == (100.0, 104.0)
    assert s["std"] == pytest.approx(math.sqrt(2.5))
    assert (s["ci_low"], s["ci_high"], s["ci_level"], s["ci_requested_level"]) == (100.0, 104.0, 0.9375, 0.95)
    assert "order-statistic" in s["ci_method"] and "min–max" in s["ci_method"] and "actual level" in s["ci_method"]
    assert "x(2)–x(8)" in summarize(list(map(float, range(1, 10))))["ci_method"]
