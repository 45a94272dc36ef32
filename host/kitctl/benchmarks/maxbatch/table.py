"""Max-batch's end-of-run table and ratios, as the reference report prints them.

Pure functions of the artifact, so `kitctl report`, `compare` and `results list` reuse them:
the max-batch rows, the per-trial points behind the VRAM plots, and the ratio lines (each
engine against the first listed, family bests against each other).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ...core.device import recorded_line
from ...core.recorded import RecordedConfig
from ...core.tables import Ratio, engine_label, pair_ratios
from .results import MaxbatchCell, Peaks, cell_of, cells, peaks_of

MEMORY_FAILURES = frozenset({"oom", "vram_cap_exceeded", "host_oom_killed"})
CAPACITY_STATUSES = frozenset({"bounded_by_memory_failure", "censored_at_max_batch"})
# The reference runner's V1 files: the batch after max failed with a word that is not a memory
# failure (`exit_1`: V1 records every non-zero exit so, an out-of-memory exit included). Only
# reference rows carry it; kitctl's own searches never end so.
UNCLASSIFIED_NEXT = "unclassified_next_failure"


@dataclass(frozen=True)
class Row:
    engine: str
    precision: str
    max_batch: int | None
    peak_mib: float | None
    peak_source: str
    next_batch: int | None
    next_status: str | None
    result: str
    search_status: str | None = None
    # The max batch is the reference runner's own figure, shown and compared as its claim although
    # kitctl's rule would not make it a capacity (its next failure is not a classified memory failure).
    reference_claim: bool = False

    @property
    def has_capacity(self) -> bool:
        return bool(self.max_batch) and self.search_status in CAPACITY_STATUSES

    @property
    def has_figure(self) -> bool:
        """A max batch to show, compare and plot: a capacity, or the reference runner's claim."""
        return self.has_capacity or (self.reference_claim and bool(self.max_batch))

    @property
    def figure_text(self) -> str:
        """"8,832", "≥ 4,096" (censored), "4,752 (reference claim)"; "" without a figure."""
        if not self.has_figure:
            return ""
        text = ("≥ " if self.search_status == "censored_at_max_batch" else "") + f"{self.max_batch:,}"
        return text + (" (reference claim)" if self.reference_claim else "")


@dataclass(frozen=True)
class TrialPoint:
    """One candidate as the plots and the monotonicity checks see it."""

    batch: int
    passed: bool
    status: str
    memory_failure: bool
    peak_mib: float | None
    peak_source: str
    attempt: int = 1


def _peak(peaks: Peaks | dict[str, Any] | None) -> tuple[float | None, str]:
    if not peaks:  # none recorded, or recorded as {}
        return None, ""
    p = peaks_of(peaks)
    if p.device_delta_mib is not None:
        return p.device_delta_mib, "device delta (NVML)"
    if p.process_mib is not None and p.baseline_mib is None:
        # --slots on a GPU: no idle baseline, no device delta; the candidate's own processes' memory
        return p.process_mib, "per-process (NVML)"
    if p.framework_mib is not None:
        return p.framework_mib, "framework allocator"
    if p.host_rss_mib is not None:  # --device cpu without an allocator peak
        return p.host_rss_mib, "host RSS"
    return None, ""


def peak_heading(on_gpu: bool) -> str:
    """What the peak column is of: the card's memory on a GPU; on --device cpu the trial's host
    memory (its resident set, RSS), never called VRAM."""
    return "Peak VRAM at max" if on_gpu else "Peak host RSS at max"


def result_text(search_status: str | None, next_status: str | None, next_batch: int | None,
                reason: str | None, state: str | None = None) -> str:
    if search_status == "bounded_by_memory_failure":
        return f"bounded by memory failure ({next_status} at {next_batch:,})"
    if search_status == "censored_at_max_batch":
        return "censored at --max-batch (no failure found)"
    if search_status == "no_passing_batch":
        return "no passing batch"
    if search_status == "invalid_non_memory_failure":
        return f"invalid: {reason or 'non-memory failure'}"
    if search_status == UNCLASSIFIED_NEXT:
        return f"next failure unclassified ({reason or next_status})"
    return state or "pending"


def maxbatch_rows(doc: dict[str, Any]) -> list[Row]:
    return [cell_row(c) for c in cells(doc)]


def cell_row(c: MaxbatchCell) -> Row:
    """A cell's row of the result table."""
    peak, src = _peak(c.peaks_at_max)
    nxt = c.next_batch
    next_status = None
    if nxt is not None:
        at = [t for t in c.trials if t.batch == nxt]
        next_status = at[-1].status if at else None
    result = result_text(c.search_status, next_status, nxt, c.reason, c.state)
    return Row(c.engine, c.precision, c.max_batch, peak, src, nxt, next_status, result, c.search_status)


def trial_points(cell: MaxbatchCell | dict[str, Any]) -> list[TrialPoint]:
    """Every candidate of a kitctl cell (the calibration trial is not a candidate)."""
    out = []
    for t in cell_of(cell).trials:
        peak, src = _peak(t.peaks)
        out.append(TrialPoint(t.batch, t.ok, t.status, t.status in MEMORY_FAILURES, peak, src, t.attempt))
    return out


def peak_inversions(points: Iterable[TrialPoint]) -> list[tuple[TrialPoint, TrialPoint]]:
    """Passing candidates whose peak is larger than that of the next larger passing batch
    (memory is not monotone in the batch: allocator and kernel choices change with it)."""
    passes: dict[int, TrialPoint] = {}
    for p in points:
        if p.passed and p.peak_mib is not None:
            passes[p.batch] = p
    ordered = [passes[b] for b in sorted(passes)]
    return [(a, b) for a, b in zip(ordered, ordered[1:]) if a.peak_mib > b.peak_mib]


def failures_below_pass(points: Iterable[TrialPoint]) -> list[tuple[TrialPoint, TrialPoint]]:
    """Memory failures at a batch smaller than some passing batch: (failure, smallest larger pass)."""
    pts = list(points)
    passes = sorted(p.batch for p in pts if p.passed)
    out = []
    for p in pts:
        if p.memory_failure:
            larger = [b for b in passes if b > p.batch]
            if larger:
                out.append((p, next(q for q in pts if q.passed and q.batch == larger[0])))
    return out


def ratio_pairs(rows: list[Row]) -> list[Ratio]:
    """Max-batch ratios per precision, over the cells that have a capacity or a reference claim."""
    items = [(r.engine, r.precision, float(r.max_batch), r.search_status == "censored_at_max_batch")  # type: ignore[arg-type]
             for r in rows if r.has_figure]
    claims = frozenset((r.engine, r.precision) for r in rows if r.has_figure and r.reference_claim)
    return pair_ratios(items, "larger batch", claims)


def ratios(rows: list[Row]) -> list[str]:
    """Ratio lines per precision: each engine against the first listed, and family bests
    against each other ("TensorFlow XLA vs PyTorch best", "PyTorch best vs OpenNN")."""
    return [r.text() for r in ratio_pairs(rows)]


def print_table(console: Any, model: str, dataset: str, doc: dict[str, Any], final: Any) -> None:
    """The end-of-run table (rich), the ratio lines and where the artifact is."""
    from rich.table import Table

    rows = maxbatch_rows(doc)
    t = Table(title=f"Max batch — {model}, {dataset}")
    peak = peak_heading(RecordedConfig.of_doc(doc).device != "cpu")
    for col in ("Engine", "Precision", "Max batch", peak, "Next batch", "Result"):
        t.add_column(col, justify="right" if col in ("Max batch", peak, "Next batch") else "left")
    for r in rows:
        t.add_row(engine_label(r.engine), r.precision, f"{r.max_batch:,}" if r.max_batch else "—",
                  f"{r.peak_mib:,.0f} MiB" if r.peak_mib is not None else "—",
                  f"{r.next_batch:,}" if r.next_batch else "—", r.result)
    console.print(t)
    for line in ratios(rows):
        console.print(line)
    console.print(recorded_line(doc))
    if final is not None:
        console.print(f"artifact: {final}")


def all_have_capacity(doc: dict[str, Any]) -> bool:
    """Every engine × precision ended with a capacity (bounded or censored): exit 0, else 1."""
    return all(c.search_status in CAPACITY_STATUSES for c in cells(doc))
