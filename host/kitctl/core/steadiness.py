"""Whether a cell's figure is steady: one rule for every benchmark that times a window (throughput,
dataload, train-e2e's loader alone; docs/method.md, "Steadiness, measured")."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .typed import Record

# A cell whose interval of the median spans more than this share of the median is NOT STEADY: its runs
# disagree with one another.
MAX_INTERVAL_SPREAD = 0.10


def cell_steadiness(runs: list[dict[str, Any]], summary: dict[str, Any] | None, tolerance: float) -> dict[str, Any]:
    """A cell is steady when every run's window halves agree within the tolerance and its interval of the
    median spans at most MAX_INTERVAL_SPREAD of the median; `why` names what failed. Runs measured
    before the window rule carry no halves: `steady` is then None (not measured)."""
    judged = [r for r in runs if isinstance(r.get("steady"), bool)]
    unsteady = [r["run"] for r in judged if not r["steady"]]
    spread = None
    if summary and summary.get("median") and summary.get("ci_low") is not None and summary.get("ci_high") is not None:
        spread = (summary["ci_high"] - summary["ci_low"]) / summary["median"]
    why = []
    if unsteady:
        why.append(f"{len(unsteady)} of {len(runs)} runs' window halves differ by more than {tolerance:.0%}")
    if spread is not None and spread > MAX_INTERVAL_SPREAD:
        # one decimal where a whole percent would read as the limit itself ("10% … more than 10%")
        shown = f"{spread:.0%}" if round(spread, 2) > MAX_INTERVAL_SPREAD else f"{spread:.1%}"
        why.append(f"the interval spans {shown} of the median (more than {MAX_INTERVAL_SPREAD:.0%})")
    steady = False if why else (True if judged else None)
    return {"steady": steady, "why": "; ".join(why) or None, "runs_not_steady": unsteady,
            "runs_judged": len(judged), "tolerance": tolerance, "interval_spread": spread,
            "max_interval_spread": MAX_INTERVAL_SPREAD}


@dataclass(frozen=True, kw_only=True)
class Steadiness(Record):
    """`cell_steadiness` as the artifact records it: whether the cell's figure is steady (None: no run measured its
    halves) and why not, the runs whose window halves differ, how many were judged, the tolerance and the interval's
    spread against its limit."""
    steady: bool | None = None
    why: str | None = None
    runs_not_steady: tuple[int, ...] = ()
    runs_judged: int | None = None
    tolerance: float | None = None
    interval_spread: float | None = None
    max_interval_spread: float | None = None


# Fewer epochs than this and their scatter says nothing about the halves.
MIN_NOISE_EPOCHS = 6
# A slow spell lasting several epochs makes neighbouring epochs alike (positive lag-1 autocorrelation), so halves
# of them vary more than independent epochs would: the noise is widened by sqrt((1 + r) / (1 - r)), r capped here.
MAX_LAG1 = 0.9
# A halves change beyond this many of its noise's standard deviations is a trend, not scatter.
STEADY_NOISE_SDS = 2.0


@dataclass(frozen=True)
class HalvesNoise:
    """How far a window's halves would differ from the scatter of its own epochs alone, were the loader steady."""
    epochs: int
    cv: float  # the epochs' images/s: standard deviation ÷ mean
    lag1: float  # their lag-1 autocorrelation (how long fast and slow spells last)
    sd: float  # one standard deviation of the halves' change, as a fraction
    seconds: float  # the window's length

    def window_for(self, tolerance: float, sds: float = STEADY_NOISE_SDS) -> float:
        """The window (seconds) at which this scatter keeps a steady loader's halves within `tolerance` at `sds`
        standard deviations: the noise falls with the square root of the window's epochs."""
        return self.seconds * max(1.0, (sds * self.sd / tolerance) ** 2)


def halves_noise(rates: list[float], seconds: list[float]) -> HalvesNoise | None:
    """The halves' noise of a window from its epochs' rates (images/s) and seconds: the change between the means of
    two halves of n epochs drawn from them in random order has a standard deviation of 2·cv/√n (halves of one
    finite set), from their scatter around a straight line (a trend is not noise), widened for the lag-1
    autocorrelation of that scatter. None below MIN_NOISE_EPOCHS epochs."""
    n = len(rates)
    if n < MIN_NOISE_EPOCHS or n != len(seconds) or any(not r or r <= 0 for r in rates):
        return None
    mean = sum(rates) / n
    # the scatter around a straight line through the epochs (over their times): a trend is what the halves test,
    # so it must not count as noise (it would also read as autocorrelation)
    t, at = [], 0.0
    for s in seconds:
        t.append(at + s / 2)
        at += s
    tm = sum(t) / n
    stt = sum((x - tm) ** 2 for x in t)
    slope = sum((x - tm) * (r - mean) for x, r in zip(t, rates)) / stt if stt > 0 else 0.0
    dev = [r - mean - slope * (x - tm) for x, r in zip(t, rates)]
    var = sum(d * d for d in dev) / n
    cv = math.sqrt(var) / mean
    lag1 = sum(a * b for a, b in zip(dev[:-1], dev[1:])) / (var * n) if var > 0 else 0.0
    r = min(max(lag1, 0.0), MAX_LAG1)
    sd = 2 * cv / math.sqrt(n) * math.sqrt((1 + r) / (1 - r))
    return HalvesNoise(epochs=n, cv=cv, lag1=lag1, sd=sd, seconds=sum(seconds))
