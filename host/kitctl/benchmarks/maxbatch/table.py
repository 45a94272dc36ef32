"""The end-of-run table and ratios, as the reference report prints them.

Pure functions of the artifact, so `kitctl report`, `compare` and `results list` reuse them:
the max-batch rows, the per-trial points behind the VRAM plots, the throughput rows, and the
ratio lines (each engine against the first listed, family bests against each other).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from ...core.engines import ENGINES

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


@dataclass(frozen=True)
class ThroughputRow:
    engine: str
    precision: str
    batch: int | None
    median: float | None
    ci_low: float | None
    ci_high: float | None
    ci_level: float | None
    runs: int
    warmup_s: float | None
    minimum: float | None = None
    maximum: float | None = None
    std: float | None = None
    state: str = "done"


@dataclass(frozen=True)
class Ratio:
    """`a` against `b` with a ≥ b: "TensorFlow XLA vs PyTorch best (fp32): 1.28× larger batch".

    `bound` is "≥" when `a` is only a lower bound (censored at --max-batch), "≤" when `b` is."""

    precision: str
    a: str
    b: str
    value: float
    what: str  # "larger batch" | "faster"
    bound: str = ""
    claim: bool = False  # a side is the reference runner's claim (Row.reference_claim)

    @property
    def value_text(self) -> str:
        return (f"{self.bound + ' ' if self.bound else ''}{self.value:.2f}× {self.what}"
                + (" (reference claim)" if self.claim else ""))

    def text(self, with_precision: bool = True) -> str:
        p = f" ({self.precision})" if with_precision else ""
        return f"{self.a} vs {self.b}{p}: {self.value_text}"


def engine_label(engine: str) -> str:
    e = ENGINES.get(engine)
    return e.label if e else engine


def engine_family(engine: str) -> str:
    e = ENGINES.get(engine)
    return e.family if e else engine


def _peak(peaks: dict[str, Any] | None) -> tuple[float | None, str]:
    if not peaks:
        return None, ""
    if peaks.get("device_delta_mib") is not None:
        return peaks["device_delta_mib"], "device delta (NVML)"
    if peaks.get("framework_mib") is not None:
        return peaks["framework_mib"], "framework allocator"
    if peaks.get("host_rss_mib") is not None:  # --device cpu without an allocator peak
        return peaks["host_rss_mib"], "host RSS"
    return None, ""


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
    rows = []
    for c in doc["results"]:
        peak, src = _peak(c.get("peaks_at_max"))
        nxt = c.get("next_batch")
        next_status = None
        if nxt is not None:
            at = [t for t in c["trials"] if t["batch"] == nxt]
            next_status = at[-1]["status"] if at else None
        status = c.get("search_status")
        result = result_text(status, next_status, nxt, c.get("reason"), c.get("state", "pending"))
        rows.append(Row(c["engine"], c["precision"], c.get("max_batch"), peak, src, nxt, next_status,
                        result, status))
    return rows


def trial_points(cell: dict[str, Any]) -> list[TrialPoint]:
    """Every candidate of a kitctl cell (the calibration trial is not a candidate)."""
    out = []
    for t in cell.get("trials", []):
        peak, src = _peak(t.get("peaks"))
        out.append(TrialPoint(t["batch"], t["status"] == "ok", t["status"], t["status"] in MEMORY_FAILURES,
                              peak, src, t.get("attempt", 1)))
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


def _ratio_pairs(items: list[tuple[str, str, float, bool]], what: str,
                 claims: frozenset[tuple[str, str]] = frozenset()) -> list[Ratio]:
    """items: (engine, precision, value > 0, value is only a lower bound) in the artifact's
    order; `claims`: the (engine, precision) whose value is the reference runner's claim. Per precision: each engine against the first listed, then family bests against each
    other (a family with one engine goes by the engine's label); a pair is stated once, the
    larger first; a pair of two lower bounds says nothing and is left out."""
    out: list[Ratio] = []
    for precision in dict.fromkeys(p for _, p, _, _ in items):
        valid = [(e, v, lb) for e, p, v, lb in items if p == precision]
        claimed = {e for e, p in claims if p == precision}
        if len(valid) < 2:
            continue
        seen: set[frozenset[str]] = set()

        def add(a: str, va: float, la: bool, b: str, vb: float, lb: bool) -> None:
            if va < vb:
                a, va, la, b, vb, lb = b, vb, lb, a, va, la
            key = frozenset((a, b))
            if key in seen or (la and lb):
                return
            seen.add(key)
            out.append(Ratio(precision, a, b, va / vb, what, "≥" if la else "≤" if lb else "",
                             bool(names_claimed & {a, b})))

        # A family best ("PyTorch best") is a claim when its best member is.
        names_claimed = {engine_label(e) for e in claimed}
        base_e, base_v, base_lb = valid[0]
        for e, v, lb in valid[1:]:
            add(engine_label(e), v, lb, engine_label(base_e), base_v, base_lb)
        fams: dict[str, list[tuple[str, float, bool]]] = {}
        for e, v, lb in valid:
            fams.setdefault(engine_family(e), []).append((e, v, lb))

        def best(fam: str) -> tuple[str, float, bool]:
            members = fams[fam]
            e, v, lb = max(members, key=lambda m: m[1])
            name = engine_label(e) if len(members) == 1 else f"{fam} best"
            if e in claimed:
                names_claimed.add(name)
            return name, v, lb

        names = list(fams)
        for i, fa in enumerate(names):
            for fb in names[i + 1:]:
                add(*best(fa), *best(fb))
    return out


def ratio_pairs(rows: list[Row]) -> list[Ratio]:
    """Max-batch ratios per precision, over the cells that have a capacity or a reference claim."""
    items = [(r.engine, r.precision, float(r.max_batch), r.search_status == "censored_at_max_batch")  # type: ignore[arg-type]
             for r in rows if r.has_figure]
    claims = frozenset((r.engine, r.precision) for r in rows if r.has_figure and r.reference_claim)
    return _ratio_pairs(items, "larger batch", claims)


def ratios(rows: list[Row]) -> list[str]:
    """Ratio lines per precision: each engine against the first listed, and family bests
    against each other ("TensorFlow XLA vs PyTorch best", "PyTorch best vs OpenNN")."""
    return [r.text() for r in ratio_pairs(rows)]


# ---- throughput ----------------------------------------------------------------------------

def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def throughput_rows(doc: dict[str, Any]) -> list[ThroughputRow]:
    """One row per engine × precision of a throughput artifact: `runs[]` (images_per_second,
    warmup_seconds) and `summary` (median, min, max, std, ci_low, ci_high, ci_level)."""
    rows = []
    default_batch = (doc.get("configuration") or {}).get("batch")
    for c in doc["results"]:
        runs = [r for r in c.get("runs") or [] if _num(r.get("images_per_second")) is not None]
        ips = [float(r["images_per_second"]) for r in runs]
        s = c.get("summary") or {}
        failed = c.get("status") == "failed"  # a failed cell has no figure: never a median of its runs
        if failed:
            ips = []
        median = _num(s.get("median"))
        if median is None:
            median = _median(ips)
        warm = _num(c.get("warmup_seconds"))
        if warm is None:
            warm = _num(s.get("warmup_seconds"))
        if warm is None:
            warm = _median([float(r["warmup_seconds"]) for r in runs if _num(r.get("warmup_seconds")) is not None])
        rows.append(ThroughputRow(
            c["engine"], c["precision"], c.get("batch", default_batch), median,
            _num(s.get("ci_low")), _num(s.get("ci_high")), _num(s.get("ci_level")), len(runs), warm,
            _num(s.get("min")) if s.get("min") is not None else (min(ips) if ips else None),
            _num(s.get("max")) if s.get("max") is not None else (max(ips) if ips else None),
            _num(s.get("std")), c.get("state", "done")))
    return rows


def throughput_ratio_pairs(rows: list[ThroughputRow]) -> list[Ratio]:
    items = [(r.engine, r.precision, r.median, False) for r in rows if r.median]
    return _ratio_pairs(items, "faster")


def intervals_overlap(a: tuple[float | None, float | None], b: tuple[float | None, float | None]) -> bool | None:
    """Do two confidence intervals overlap? None when either is missing."""
    if None in a or None in b:
        return None
    return not (a[1] < b[0] or b[1] < a[0])
