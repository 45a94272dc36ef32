"""The VRAM rule's arithmetic (docs/method.md, "Max batch"): L, R, B = L − R, and each engine's calibrated overhead.

Frameworks allocate outside their allocator (CUDA context, library handles, lazily loaded
kernels), so a small calibration candidate measures overhead = device-delta peak − framework
peak, and the framework is then told B − overhead.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from .outcome import TrialOutcome


class BudgetError(ValueError):
    pass


@dataclass(frozen=True)
class Budget:
    limit_mib: int  # L
    reserve_mib: int  # R
    card_total_mib: float | None
    limit_source: str  # "--vram-limit" | "card total (NVML)"

    @property
    def budget_mib(self) -> int:  # B
        return self.limit_mib - self.reserve_mib

    @property
    def emulated(self) -> bool:
        return self.card_total_mib is not None and self.limit_mib < math.floor(self.card_total_mib)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["budget_mib"] = self.budget_mib
        d["emulated_smaller_card"] = self.emulated
        return d


def make_budget(card_total_mib: float, vram_limit_mib: int | None, reserve_mib: int) -> Budget:
    if reserve_mib < 0:
        raise BudgetError(f"--reserve must be ≥ 0 (got {reserve_mib})")
    if vram_limit_mib is None:
        limit, source = int(math.floor(card_total_mib)), "card total (NVML)"
    else:
        if vram_limit_mib <= 0:
            raise BudgetError(f"--vram-limit must be > 0 (got {vram_limit_mib})")
        if vram_limit_mib > card_total_mib:
            raise BudgetError(f"--vram-limit {vram_limit_mib} MiB is above this card's {card_total_mib:.0f} MiB")
        limit, source = vram_limit_mib, "--vram-limit"
    if limit - reserve_mib <= 0:
        raise BudgetError(f"--reserve {reserve_mib} MiB leaves no budget under a {limit} MiB limit")
    return Budget(limit, reserve_mib, card_total_mib, source)


@dataclass(frozen=True)
class Overhead:
    """One engine × precision calibration."""

    batch: int
    device_delta_peak_mib: float
    framework_peak_mib: float | None
    overhead_mib: float
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def overhead_from(outcome: TrialOutcome) -> Overhead:
    """Overhead = device-delta peak − framework peak. An engine with no allocator peak
    (OpenNN) has no framework cap: its whole delta is overhead as far as the gate knows."""
    if not outcome.passed:
        raise BudgetError(f"calibration candidate at batch {outcome.batch} did not pass: "
                          f"{outcome.status.value}: {outcome.error or ''}".rstrip(": "))
    delta = outcome.peaks.device_delta_mib
    if delta is None:
        raise BudgetError("calibration needs the NVML sampler's device delta")
    fw = outcome.peaks.framework_mib
    if fw is None:
        return Overhead(outcome.batch, delta, None, 0.0, "no allocator peak: host gate only")
    return Overhead(outcome.batch, delta, fw, max(0.0, round(delta - fw, 1)))


def framework_budget(budget: Budget, overhead: Overhead | None) -> int | None:
    """What the framework is told: B − overhead, or nothing when it has no cap."""
    if overhead is None or overhead.framework_peak_mib is None:
        return None
    fb = int(math.floor(budget.budget_mib - overhead.overhead_mib))
    if fb <= 0:
        raise BudgetError(f"the calibrated overhead ({overhead.overhead_mib:.0f} MiB) leaves no "
                          f"room under the budget of {budget.budget_mib} MiB")
    return fb
