"""Throughput's part of `kitctl compare`: the change in median images/s is beyond noise when the
confidence intervals do not overlap; a regression needs both (no overlap, and a drop of at least the
threshold). Without an interval (one run) the threshold alone decides, and the row says so
(`kitctl.reports.compare.median_change`, dataload's rule too)."""
from __future__ import annotations

from ...reports.compare import Comparer, device_of, median_change, median_text, opt_mib
from ...reports.sources import Source


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


COMPARER = Comparer(rows=lambda s: s.tput, change=median_change, text=median_text, unit="images/s (median [CI])",
                    unit_short="images/s", data_diffs=_data_diffs, context=_context)
