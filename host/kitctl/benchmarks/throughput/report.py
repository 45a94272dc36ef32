"""Throughput's part of `kitctl report`: the "Result" table of one artifact and its ratios."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.tables import Ratio, engine_label
from ...reports.format import fmt_int, num, table
from .table import throughput_ratio_pairs

if TYPE_CHECKING:  # the report shell's type; importing it here would make reports and benchmarks a cycle
    from ...reports.sources import Source


def result_table(src: Source) -> list[str]:
    rows = []
    for t in src.tput:
        if t.median is not None and t.ci_low is not None and t.ci_high is not None:
            half = (t.ci_high - t.ci_low) / 2
            level = f"{t.ci_level * 100:.0f}%: " if t.ci_level else ""
            ci = f"±{half:,.0f} ({level}{t.ci_low:,.0f}–{t.ci_high:,.0f})"
        else:
            ci = "—"
        rows.append([engine_label(t.engine), t.precision, fmt_int(t.batch), num(t.median), ci, str(t.runs),
                     num(t.warmup_s, 1)])
    return table(["Engine", "Precision", "Batch", "images/s (median)", "±CI", "runs", "warm-up s"], rows,
                  right={2, 3, 4, 5, 6})


def ratios(sources: list[Source]) -> list[Ratio]:
    return throughput_ratio_pairs([t for s in sources for t in s.tput])
