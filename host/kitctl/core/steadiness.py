"""Whether a cell's figure is steady: one rule for every benchmark that times a window (throughput,
dataload, train-e2e's loader alone; docs/method.md, "Steadiness, measured")."""
from __future__ import annotations

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
