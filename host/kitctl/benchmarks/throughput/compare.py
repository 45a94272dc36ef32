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
    rule_o, rule_n = (s.config.own.window_rule if isinstance(s.config.own.window_rule, str) else None
                      for s in (old, new))
    if (rule_o or rule_n) and rule_o != rule_n:  # one measured under the window rule, the other not (or another)
        fixed = "a fixed window of {} steps"
        out.append(f"window ({rule_o or fixed.format(old.config.own.steps)} vs "
                   f"{rule_n or fixed.format(new.config.own.steps)})")
    return out


def _text(t) -> str:
    """The median and interval, and beside it joules per image where the run measured it."""
    text = median_text(t)
    if t is not None and getattr(t, "joules_per_image", None) is not None:
        text += f"; {t.joules_per_image:.3g} J/img"
    return text


def _context(old: Source, new: Source) -> list[str]:
    """Another VRAM limit at the same batch: the speed is comparable, the reader should still know."""
    if old.limit_mib != new.limit_mib and device_of(old) == device_of(new) == "cuda":
        return [f"VRAM limit L ({opt_mib(old.limit_mib)} vs {opt_mib(new.limit_mib)})"]
    return []


COMPARER = Comparer(rows=lambda s: s.tput, change=median_change, text=_text, unit="images/s (median [CI])",
                    unit_short="images/s", data_diffs=_data_diffs, context=_context)
