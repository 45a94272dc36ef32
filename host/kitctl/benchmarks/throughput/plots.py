"""Throughput's plot for `kitctl report --plots`: the median images/s per engine × precision, with its
confidence interval."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ...core.tables import engine_family, engine_label
from ...reports.plots import FAMILY_COLORS, Bars, PlotFile, bars_legend, plot_bars, safe_name

if TYPE_CHECKING:
    from ...reports.sources import Source


def throughput_bars(src: Source) -> Bars:
    b = Bars([], [], [], [])
    for r in src.tput:
        b.labels.append(f"{engine_label(r.engine)} {r.precision}")
        b.colors.append(FAMILY_COLORS.get(engine_family(r.engine), "#7f7f7f"))
        b.values.append(r.median or 0.0)
        if r.median is not None and r.ci_low is not None and r.ci_high is not None:
            b.err_low.append(max(0.0, r.median - r.ci_low))
            b.err_high.append(max(0.0, r.ci_high - r.median))
            b.notes.append("")
        else:
            b.err_low.append(0.0)
            b.err_high.append(0.0)
            b.notes.append(f"{r.runs} run" + ("" if r.runs == 1 else "s") if r.median is not None else "no result")
    return b


def plot_throughput(src: Source, out_dir: Path) -> PlotFile:
    b = throughput_bars(src)
    levels = {r.ci_level for r in src.tput if r.ci_level}
    ci = f"{max(levels) * 100:.0f}% CI" if levels else "CI"
    path = out_dir / safe_name(f"{src.stem}-throughput.png")
    families = {engine_family(r.engine): FAMILY_COLORS.get(engine_family(r.engine), "#7f7f7f") for r in src.tput}
    whiskers = f"whiskers: the {ci}" if any(b.err_low) or any(b.err_high) else None
    data = plot_bars(b, f"Training throughput (median, {ci}) — {src.machine_short}\n{src.name}",
                      "images/s (median of runs)", path, errors=True, legend=bars_legend(families, whiskers=whiskers))
    return PlotFile(path, f"Throughput per engine (median, {ci})", "throughput", src.name, data)



def plots_of(src: Source, sources: list[Source], out_dir: Path) -> list[PlotFile]:
    return [plot_throughput(src, out_dir)] if src.tput else []
