"""Throughput's part of `kitctl compare`: the change in median images/s is beyond noise when the
confidence intervals do not overlap; a regression needs both (no overlap, and a drop of at least the
threshold). Without an interval (one run) the threshold alone decides, and the row says so."""
from __future__ import annotations

from ...core.tables import intervals_overlap
from ...reports.compare import Comparer, device_of, opt_mib, pct_change
from ...reports.sources import Source
from .table import ThroughputRow


def _tput_text(t: ThroughputRow | None) -> str:
    if t is None:
        return "not run"
    if t.median is None:
        return "no result"
    if t.ci_low is not None and t.ci_high is not None:
        return f"{t.median:,.0f} [{t.ci_low:,.0f}–{t.ci_high:,.0f}]"
    return f"{t.median:,.0f} ({t.runs} run{'s' if t.runs != 1 else ''})"


def _tput_change(o: ThroughputRow | None, n: ThroughputRow | None, thr: float) -> tuple[float | None, str, bool, str]:
    if o is None:
        return None, "only in NEW", False, ""
    if n is None:
        return None, "only in OLD", False, "not measured in NEW"
    if o.median is None or n.median is None:
        return None, "not comparable", False, "no median in " + ("OLD" if o.median is None else "NEW")
    if o.median <= 0:  # a change relative to nothing is no percentage (and no regression)
        return None, "not comparable", False, f"OLD median is {o.median:g} images/s"
    pct = pct_change(o.median, n.median)
    overlap = intervals_overlap((o.ci_low, o.ci_high), (n.ci_low, n.ci_high))
    if overlap is None:
        note = "no confidence interval (one run?): threshold only"
        if pct <= -thr:
            return pct, "regression", True, note
        if pct >= thr:
            return pct, "improvement", False, note
        return pct, "within noise", False, note + f"; below the {thr:g}% threshold"
    if overlap:
        return pct, "within noise", False, "confidence intervals overlap"
    if pct <= -thr:
        return pct, "regression", True, "intervals do not overlap"
    if pct >= thr:
        return pct, "improvement", False, "intervals do not overlap"
    return pct, "beyond noise", False, f"intervals do not overlap; below the {thr:g}% threshold"


def _data_diffs(old: Source, new: Source) -> list[str]:
    """images/s depends on the data and the batch (two kitctl artifacts)."""
    out = []
    for key, o, n in (("dataset", old.config.dataset, new.config.dataset),
                      ("batch", old.config.own.batch, new.config.own.batch)):
        if o != n:
            out.append(f"{key} ({o} vs {n})")
    return out


def _context(old: Source, new: Source) -> list[str]:
    """Another VRAM limit at the same batch: the speed is comparable, the reader should still know."""
    if old.limit_mib != new.limit_mib and device_of(old) == device_of(new) == "cuda":
        return [f"VRAM limit L ({opt_mib(old.limit_mib)} vs {opt_mib(new.limit_mib)})"]
    return []


COMPARER = Comparer(rows=lambda s: s.tput, change=_tput_change, text=_tput_text, unit="images/s (median [CI])",
                    unit_short="images/s", data_diffs=_data_diffs, context=_context)
