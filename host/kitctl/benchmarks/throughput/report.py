"""Throughput's part of `kitctl report`, `results list` and the overview: the "Result" table of one
artifact, its ratios, its rows of "What is measured" and its caveats (reached through the hooks on
`Benchmark`, never by name)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.tables import Ratio, engine_label
from ...core.typed import from_json
from ...reports.format import cell_label, fmt_int, interval, join, num, table
from .config import WINDOW_IMAGES, WINDOW_SECONDS
from .results import ThroughputCell, cells as typed_cells
from .table import has_window_rule_columns, opennn_figures_text, steady_text, throughput_ratio_pairs, throughput_rows

if TYPE_CHECKING:  # the report shell's type; importing it here would make reports and benchmarks a cycle
    from ...reports.sources import Source

QUESTION = "steady-state training images/s at a fixed batch"


def _kit_cells(src: Source) -> list[ThroughputCell]:
    """A kitctl artifact's cells, typed (none for a reference file)."""
    return typed_cells(src.doc) if src.is_kitctl else []


def load_rows(src: Source, doc: dict[str, Any]) -> None:
    src.tput = throughput_rows(doc)


def cells(src: Source) -> list[tuple[str, str, str, tuple[float, bool] | None]]:
    """Each row's median images/s as the overview shows it."""
    return [(t.engine, t.precision, num(t.median), (t.median, False) if t.median else None) for t in src.tput]


def result_table(src: Source) -> list[str]:
    rows = []
    for t in src.tput:
        # The interval itself: it is not symmetric about the median, so no "±half-width".
        ci = interval(t.ci_level, t.ci_low, t.ci_high, digits=0) if t.median is not None else "—"
        rows.append([engine_label(t.engine), t.precision, fmt_int(t.batch), num(t.median), ci, str(t.runs),
                     num(t.warmup_s, 1)])
    head = ["Engine", "Precision", "Batch", "images/s (median)", "interval", "runs", "warm-up s"]
    if has_window_rule_columns(src.tput):  # artifacts from before the window rule keep their table
        head += ["window s", "J/image", "W (mean)", "steady"]
        for row, t in zip(rows, src.tput):
            row += [num(t.window_s, 1), f"{t.joules_per_image:.3g}" if t.joules_per_image is not None else "—",
                    num(t.mean_watts), steady_text(t)]
    return table(head, rows, right=set(range(2, len(head) - 1)) if len(head) > 7 else {2, 3, 4, 5, 6})


def ratios(sources: list[Source]) -> list[Ratio]:
    return throughput_ratio_pairs([t for s in sources for t in s.tput])


def meta_count(src: Source) -> str:
    return f"{sum(len(c.runs) for c in typed_cells(src.doc))} runs"


def measured_rules(src: Source, fresh: str) -> list[list[str]]:
    own = src.config.own
    window = (f"{own.window_rule}" if isinstance(own.window_rule, str) else
              f"{fmt_int(own.warmup_steps)} warm-up steps, then {fmt_int(own.steps)} timed steps")
    size = own.image_size if isinstance(own.image_size, int) else 32
    return [["Speed rule", f"batch {fmt_int(own.batch)}" + ("" if size == 32 else f", {size}×{size} images")
             + f"; {window}; images/s = images ÷ timed window; "
             f"{fmt_int(own.runs)} runs, each {fresh}; median and a confidence interval of the "
             "median over runs"
             + (f" (requested {own.ci_level * 100:g}%; each cell states the level it reaches)"
                if isinstance(own.ci_level, (int, float)) else "")]]


def caveats_protocol(src: Source) -> list[str]:
    """Single runs, failed cells, intervals below the requested level."""
    out: list[str] = []
    single = [cell_label(t.engine, t.precision) for t in src.tput if t.runs == 1]
    if single:
        out.append(f"**One run only** — {join(single)}: a single run, so no confidence interval; "
                   f"repeat with more runs before comparing.")
    recorded = _kit_cells(src)
    for c in recorded:
        if c.failed:
            out.append(f"**Failed** — {cell_label(c.engine, c.precision)}: {c.reason or 'a run failed'}; "
                       f"no figure is reported for it and none of its runs is averaged in.")
    low = [f"{cell_label(c.engine, c.precision)} ({c.summary.ci_level * 100:.2f}%)"
           for c in recorded if c.summary is not None and isinstance(c.summary.ci_level, (int, float))
           and isinstance(c.summary.ci_requested_level, (int, float))
           and c.summary.ci_level < c.summary.ci_requested_level]
    if low:
        out.append(f"**Interval below the requested level** — {join(low)}: too few runs for a "
                   f"distribution-free interval at the requested level; the min–max interval and its actual "
                   f"confidence level are shown.")
    unsteady = [f"{cell_label(t.engine, t.precision)} ({t.steady_why})" for t in src.tput if t.steady is False]
    if unsteady:
        out.append(f"**Not steady** — {join(unsteady)}: the figure is kept, but it moves with the window; "
                   "read it as a range, not a rank.")
    for t in src.tput:
        if (text := opennn_figures_text(t)) is not None:
            out.append(f"**OpenNN's figures beside the naive one** — {cell_label(t.engine, t.precision)}: {text}. "
                       "The naive figure (every planned step × batch ÷ window) stands only when the CUDA-graph audit "
                       "saw every planned step run.")
    short = _short_windows(src)
    if short:
        out.append(f"**Window too short to be steady** — {join(short)} (median timed window): measured with a fixed "
                   f"number of timed steps, shorter than the window rule's (at least {WINDOW_IMAGES:,} images and "
                   f"{WINDOW_SECONDS:g} s, after a warm-up until steady); start-up effects can sit inside such a window, "
                   "so these figures can understate an engine and rank engines by how soon they reach speed.")
    return out


def _short_windows(src: Source) -> list[str]:
    """Cells of an artifact from before the window rule whose median window was under either minimum."""
    if isinstance(src.config.own.window_rule, str):
        return []
    out = []
    for t in src.tput:
        if t.median is None or t.window_s is None or t.batch is None:
            continue
        steps = src.config.own.steps
        images = steps * t.batch if isinstance(steps, int) and isinstance(t.batch, int) else t.median * t.window_s
        if t.window_s < WINDOW_SECONDS or images < WINDOW_IMAGES * 0.999:
            out.append(f"{cell_label(t.engine, t.precision)} ({t.window_s:.2f} s)")
    return out


def headline(src: Source) -> str:
    return "; ".join(f"{t.engine} {t.precision}: " + (f"{t.median:,.0f} img/s" if t.median else "no result")
                     for t in src.tput)


def progress(src: Source, cell: dict[str, Any]) -> str:
    """An unfinished cell: how many of its runs measured a figure."""
    done = sum(1 for r in from_json(ThroughputCell, cell).runs if r.images_per_second is not None)
    return f"{done} of {fmt_int(src.config.own.runs)} runs so far"
