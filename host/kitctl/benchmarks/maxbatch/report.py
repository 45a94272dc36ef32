"""Max-batch's part of `kitctl report`: the "Result" table of one artifact and its ratios."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.tables import Ratio, engine_label
from ...reports.format import mib, table
from .table import Row, ratio_pairs

if TYPE_CHECKING:  # the report shell's type; importing it here would make reports and benchmarks a cycle
    from ...reports.sources import Source


def row_value(r: Row) -> str:
    if r.has_figure:
        return r.figure_text
    return "none" if r.search_status in ("invalid_non_memory_failure", "no_passing_batch") else "—"


def result_table(src: Source) -> list[str]:
    rows = []
    for r in src.rows:
        nxt = f"{r.next_batch:,}" + (f" ({r.next_status})" if r.next_status else "") if r.next_batch else "—"
        rows.append([engine_label(r.engine), r.precision, row_value(r) if r.max_batch else "—",
                     mib(r.peak_mib) if r.has_figure else "—", nxt, r.result])
    if not rows:
        return ["_No engine × precision has started yet._"]
    mem = "VRAM" if src.gpu_name is not None else "memory"
    out = table(["Engine", "Precision", "Max batch", f"Peak {mem} at max", "Next batch", "Result"], rows,
                 right={2, 3, 4})
    srcs = sorted({r.peak_source for r in src.rows if r.peak_source})
    if src.is_kitctl:
        gate = "B" if src.budget_mib is not None else "the memory limit"
        foot = (f"Max batch: the largest batch whose candidate passed (the capacity rule below, memory "
                f"under {gate}); next batch: the verified failure above it. ")
    else:
        foot = "Max batch and next batch as the reference runner recorded them. "
        if any(r.has_figure and r.reference_claim for r in src.rows):
            foot += ("\"(reference claim)\": the reference runner's own figure; its next failure is not a "
                     "classified memory failure, so kitctl's rule would not call it a capacity (see Caveats). ")
    if srcs:
        foot += f"Peak {mem} at max: " + "; ".join(srcs) + "."
    return out + ["", foot.strip()]


def ratios(sources: list[Source]) -> list[Ratio]:
    return ratio_pairs([r for s in sources for r in s.rows])
