"""Throughput's end-of-run table and ratios: one row per engine × precision of an artifact
(`kitctl report`, `compare` and `results list` reuse them)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...core.device import recorded_line
from ...core.recorded import view
from ...core.tables import Ratio, engine_label, pair_ratios
from ...reports.format import interval
from .config import ThroughputRecorded
from ...core.steadiness import Steadiness
from .results import CellEnergy, ThroughputCell, cells


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
    # The window rule's measurements (None in artifacts from before it): the cell's median joules per
    # image and mean watts over its runs, whether it is steady (and why not), its window's median length.
    joules_per_image: float | None = None
    mean_watts: float | None = None
    steady: bool | None = None
    steady_why: str | None = None
    window_s: float | None = None
    # OpenNN's graph path whose naive figure the trial refused (short graphs): the median over the runs of
    # the executed-steps rate and of what OpenNN's own runner would print (result.opennn_figures).
    opennn_executed_ips: float | None = None
    opennn_runner_ips: float | None = None


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
    default_batch = view(ThroughputRecorded, doc).batch
    for c in cells(doc):
        runs = [r for r in c.runs if _num(r.images_per_second) is not None]
        ips = [float(r.images_per_second) for r in runs]
        s = c.summary
        failed = c.failed  # a failed cell has no figure: never a median of its runs
        if failed:
            ips = []
        median = _num(s.median) if s is not None else None
        if median is None:
            median = _median(ips)
        warm = _num(c.warmup_seconds)
        if warm is None and s is not None:  # a summary that recorded the warm-up itself
            warm = _num(s.extra.get("warmup_seconds"))
        if warm is None:
            warm = _median([float(r.warmup_seconds) for r in runs if _num(r.warmup_seconds) is not None])
        ci_low, ci_high, ci_level, std = ((_num(s.ci_low), _num(s.ci_high), _num(s.ci_level), _num(s.std))
                                          if s is not None else (None, None, None, None))
        energy = c.energy if isinstance(c.energy, CellEnergy) and not failed else None
        steadiness = c.steadiness if isinstance(c.steadiness, Steadiness) and not failed else None
        windows = [float(r.window_seconds) for r in runs if _num(r.window_seconds) is not None]
        rows.append(ThroughputRow(
            c.engine, c.precision, default_batch if c.batch is None else c.batch, median, ci_low, ci_high, ci_level,
            len(runs), warm,
            _num(s.min) if s is not None and s.min is not None else (min(ips) if ips else None),
            _num(s.max) if s is not None and s.max is not None else (max(ips) if ips else None),
            std, c.state,
            joules_per_image=_num(energy.joules_per_image) if energy is not None else None,
            mean_watts=_num(energy.mean_watts) if energy is not None else None,
            steady=steadiness.steady if steadiness is not None and isinstance(steadiness.steady, bool) else None,
            steady_why=steadiness.why if steadiness is not None and isinstance(steadiness.why, str) else None,
            window_s=_median(windows) if windows and not failed else None,
            opennn_executed_ips=_figure(c, "executed_ips"), opennn_runner_ips=_figure(c, "runner_style_ips")))
    return rows


def _figure(cell: ThroughputCell, key: str) -> float | None:
    """The median over a cell's runs of one of OpenNN's corrected figures (None where no run has it)."""
    vals = [_num(((r.result or {}).get("opennn_figures") or {}).get(key)) for r in cell.runs]
    return _median([v for v in vals if v is not None]) or None


def opennn_figures_text(r: ThroughputRow) -> str | None:
    """OpenNN's corrected figures, labelled, for a row whose naive figure was refused or kept."""
    if r.opennn_executed_ips is None and r.opennn_runner_ips is None:
        return None
    parts = []
    if r.opennn_executed_ips is not None:
        parts.append(f"steps that ran × batch ÷ window: {r.opennn_executed_ips:,.0f} images/s")
    if r.opennn_runner_ips is not None:
        parts.append(f"what OpenNN's own runner would print: {r.opennn_runner_ips:,.0f} images/s "
                     "(its formula: 50,000 images × epochs ÷ the whole train() call)")
    return "; ".join(parts)


def has_window_rule_columns(rows: list[ThroughputRow]) -> bool:
    """Whether any row measured energy or steadiness (artifacts from before the window rule: none)."""
    return any(r.joules_per_image is not None or r.mean_watts is not None or r.steady is not None for r in rows)


def steady_text(r: ThroughputRow) -> str:
    return "—" if r.steady is None else ("yes" if r.steady else "NOT STEADY")


def throughput_ratio_pairs(rows: list[ThroughputRow]) -> list[Ratio]:
    items = [(r.engine, r.precision, r.median, False) for r in rows if r.median]
    return pair_ratios(items, "faster")


def print_table(console: Any, model: str, dataset: str, batch: int, doc: dict[str, Any], final: Any,
                image_size: int = 32) -> None:
    """The end-of-run table (rich): median and interval per cell, energy and steadiness, failures,
    ratios, the artifact."""
    from rich.table import Table

    rows = throughput_rows(doc)
    extra = has_window_rule_columns(rows)
    size = "" if image_size == 32 else f" {image_size}×{image_size}"
    t = Table(title=f"Training throughput — {model}, {dataset}{size}, batch {batch:,}")
    cols = ["Engine", "Precision", "images/s (median)", "interval", "runs", "warm-up s"]
    if extra:
        cols += ["window s", "J/image", "W", "steady"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("Engine", "Precision") else "right")
    recorded = cells(doc)
    for r, c in zip(rows, recorded):
        label = engine_label(r.engine)
        if c.failed:
            t.add_row(label, r.precision, "[red]FAILED[/red]", "—", str(len(c.runs)), "—",
                      *(["—"] * (len(cols) - 6)))
            continue
        # The interval itself: it is not symmetric about the median, so no "±half-width".
        ci = interval(r.ci_level, r.ci_low, r.ci_high) if r.median is not None else "—"
        more = []
        if extra:
            more = [f"{r.window_s:.1f}" if r.window_s is not None else "—",
                    f"{r.joules_per_image:.3g}" if r.joules_per_image is not None else "—",
                    f"{r.mean_watts:,.0f}" if r.mean_watts is not None else "—",
                    "[yellow]NOT STEADY[/yellow]" if r.steady is False else steady_text(r)]
        t.add_row(label, r.precision, f"{r.median:,.1f}" if r.median is not None else "—", ci, str(r.runs),
                  f"{r.warmup_s:.1f}" if r.warmup_s is not None else "—", *more)
    console.print(t)
    for c in recorded:
        if c.failed:
            console.print(f"FAILED {c.engine} {c.precision}: {c.reason}")
    for r in rows:
        if (text := opennn_figures_text(r)) is not None:
            console.print(f"OpenNN {r.engine} {r.precision}: {text}")
    for r in rows:
        if r.steady is False:
            console.print(f"not steady: {r.engine} {r.precision}: {r.steady_why} (its figure is kept)")
    for r in throughput_ratio_pairs(throughput_rows(doc)):
        console.print(r.text())
    methods = {c.summary.ci_method for c in recorded if c.summary is not None} - {None}
    for m in sorted(methods):
        console.print(f"CI: {m}")
    console.print(recorded_line(doc))
    if final is not None:
        console.print(f"artifact: {final}")


def all_ok(doc: dict[str, Any]) -> bool:
    """Every engine × precision has a summary (no run failed): exit 0, else 1."""
    return all(c.ok for c in cells(doc))
