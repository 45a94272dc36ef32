"""Statistics of a throughput cell, as pure functions of its per-run figures.

The confidence interval of the median is distribution-free: from order statistics, with
the binomial coverage of [x(j), x(n+1−j)] (the median falls below any one run with
probability ½, whatever the distribution). With few runs the requested level cannot be
reached: with 5 runs the widest interval, min–max, covers the median with probability
1 − 2·0.5⁵ = 93.75 %. Then the interval is min–max and its ACTUAL level is reported.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .typed import Record, from_json

CI_METHOD = "order-statistic (binomial, distribution-free) interval of the median"


def median(xs: Sequence[float]) -> float:
    if not xs:
        raise ValueError("median of no values")
    s = sorted(xs)
    n = len(s)
    return float(s[n // 2]) if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def sample_std(xs: Sequence[float]) -> float | None:
    """Standard deviation with n − 1 in the denominator; None below two values."""
    n = len(xs)
    if n < 2:
        return None
    m = sum(xs) / n
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))


def binom_cdf_half(k: int, n: int) -> float:
    """P(B ≤ k) for B ~ Binomial(n, ½), exactly (rational, then float)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(min(k, n) + 1)) / 2 ** n


def order_statistic_level(n: int, j: int) -> float:
    """Coverage of [x(j), x(n+1−j)] (1-based, j ≤ n/2) for the median: 1 − 2·P(B ≤ j−1)."""
    if not 1 <= j <= n // 2:
        raise ValueError(f"j must be in 1..{n // 2} (got {j})")
    return 1.0 - 2.0 * binom_cdf_half(j - 1, n)


@dataclass(frozen=True)
class MedianCI:
    low: float | None
    high: float | None
    level: float | None  # the actual coverage, never the requested one unless they agree
    j: int | None  # the interval is [x(j), x(n+1−j)] of the sorted runs
    reached_requested: bool


def median_ci(xs: Sequence[float], level: float = 0.95) -> MedianCI:
    """The narrowest symmetric order-statistic interval with coverage ≥ `level`; when n is
    too small for that, min–max with its actual (lower) coverage. None below two values."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1) (got {level})")
    n = len(xs)
    if n < 2:
        return MedianCI(None, None, None, None, False)
    s = sorted(xs)
    best = None
    for j in range(1, n // 2 + 1):  # larger j = narrower interval, lower coverage
        if order_statistic_level(n, j) >= level:
            best = j
        else:
            break
    reached = best is not None
    j = best if reached else 1
    return MedianCI(float(s[j - 1]), float(s[n - j]), order_statistic_level(n, j), j, reached)


def summarize(xs: Sequence[float], level: float = 0.95) -> dict:
    """The cell's `summary`: n, median, min, max, std, ci_low, ci_high, ci_level (actual),
    ci_requested_level, ci_method (which order statistics)."""
    if not xs:
        raise ValueError("summary of no runs")
    ci = median_ci(xs, level)
    if ci.j is None:
        method = f"{CI_METHOD}; none with a single run"
    else:
        n = len(xs)
        which = "min–max" if ci.j == 1 else f"x({ci.j})–x({n + 1 - ci.j}) of the sorted runs"
        method = f"{CI_METHOD}: {which}" + (
            "" if ci.reached_requested else
            f" (too few runs for {level:.0%}: the actual level is reported)")
    return {"n": len(xs), "median": median(xs), "min": float(min(xs)), "max": float(max(xs)),
            "std": sample_std(xs), "ci_low": ci.low, "ci_high": ci.high, "ci_level": ci.level,
            "ci_requested_level": level, "ci_method": method}


@dataclass(frozen=True, kw_only=True)
class Summary(Record):
    """A cell's `summarize` as the artifact records it (the schema's throughput_summary): n, median, min, max, std,
    the interval of the median and the level it reaches, the level asked for and how it was computed (the last two
    absent in early artifacts)."""
    n: int
    median: float
    min: float  # noqa: A003  (the JSON key)
    max: float  # noqa: A003  (the JSON key)
    std: float | None = None
    ci_low: float | None
    ci_high: float | None
    ci_level: float | None
    ci_requested_level: float | None = None
    ci_method: str | None = None

    @classmethod
    def of(cls, values: list[float], level: float) -> Summary:
        """The summary of `values` at the interval level `level`, as summarize writes it."""
        return from_json(cls, summarize(values, level))
