"""Max-batch's plots for `kitctl report --plots`: per engine × precision, the peak memory of every
candidate against its batch (with the budget B); the max batches as bars, per result and across results."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...core.tables import engine_family, engine_label
from ...reports.plots import FAMILY_COLORS, MEM, OTHER, PASS, Bars, PlotFile, bars_legend, max_n, mpl, plot_bars, \
    safe_name, save, thousands
from ...reports.sources import KITCTL

if TYPE_CHECKING:
    from ...reports.sources import Source


@dataclass
class VramSeries:
    engine: str
    precision: str
    batches: list[int]
    peaks: list[float | None]
    passed: list[bool]
    memory_failure: list[bool]
    statuses: list[str]
    peak_source: str
    budget_mib: float | None
    max_batch: int | None


def vram_series(src: Source) -> list[VramSeries]:
    """One series per engine × precision that ran at least one candidate (trial order kept)."""
    out = []
    rows = {(r.engine, r.precision): r for r in src.rows}
    for (engine, precision), pts in src.points.items():
        if not pts:
            continue
        row = rows.get((engine, precision))
        srcs = [p.peak_source for p in pts if p.peak_source]
        out.append(VramSeries(engine, precision, [p.batch for p in pts], [p.peak_mib for p in pts],
                              [p.passed for p in pts], [p.memory_failure for p in pts], [p.status for p in pts],
                              max(set(srcs), key=srcs.count) if srcs else "", src.budget_mib,
                              row.max_batch if row and row.has_figure else None))
    return out


def maxbatch_bars(sources: list[Source], with_source: bool = False) -> Bars:
    b = Bars([], [], [], [])
    for n, src in enumerate(sources, 1):
        for r in src.rows:
            label = f"{engine_label(r.engine)} {r.precision}"
            if with_source:  # [n] matches the report's overview table
                label += f"\n[{n}] {src.machine_short}"
            b.labels.append(label)
            b.colors.append(FAMILY_COLORS.get(engine_family(r.engine), "#7f7f7f"))
            if r.has_figure:
                b.values.append(float(r.max_batch))  # type: ignore[arg-type]
                b.notes.append("≥" if r.search_status == "censored_at_max_batch" else
                               "reference claim" if r.reference_claim else "")
            else:
                b.values.append(0.0)
                b.notes.append("invalid" if r.search_status == "invalid_non_memory_failure" else
                               "no pass" if r.search_status == "no_passing_batch" else r.result)
    return b


def _batch_axis(ax, batches: list[int]) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    lo, hi = min(batches), max(batches)
    if hi / max(lo, 1) >= 8:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:  # whole batches only: a fractional tick printed as an integer repeated its neighbours ("2 2 2 3")
        ax.xaxis.set_major_locator(max_n(6))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))


def _near_boundary(s: VramSeries) -> list[int]:
    """Indices of the candidates within 5% of max_batch (where the bisection ends), if ≥ 3."""
    if not s.max_batch:
        return []
    near = [i for i, b in enumerate(s.batches)
            if abs(b - s.max_batch) <= 0.05 * s.max_batch and s.peaks[i] is not None]
    return near if len(near) >= 3 else []


def _boundary_panel(ax, s: VramSeries, near: list[int]) -> None:
    """A zoom on the last candidates of the search, linear axes."""
    for i in near:
        ok, mem = s.passed[i], s.memory_failure[i]
        ax.scatter(s.batches[i], s.peaks[i], c=PASS if ok else MEM if mem else OTHER,
                   marker="o" if ok else "x" if mem else "^", s=40, zorder=3,
                   linewidths=1.8 if (not ok and mem) else 0.8, edgecolors=None if (not ok and mem) else "white")
    ys = [s.peaks[i] for i in near] + ([s.budget_mib] if s.budget_mib is not None else [])
    pad = max((max(ys) - min(ys)) * 0.2, 8.0)
    ax.set_ylim(min(ys) - pad, max(ys) + pad)
    if s.budget_mib is not None:
        ax.axhline(s.budget_mib, color="#444444", linestyle="--", linewidth=1.2)
    ax.axvline(s.max_batch, color="#999999", linewidth=0.8, zorder=1)
    ax.xaxis.set_major_formatter(thousands())
    ax.yaxis.set_major_formatter(thousands())
    ax.xaxis.set_major_locator(max_n(4))
    ax.tick_params(labelsize=8)
    ax.set_xlabel("batch (within 5% of max)")
    ax.set_title(f"near the boundary: max {s.max_batch:,}", fontsize=9)
    ax.grid(True, alpha=0.3)


def plot_vram(src: Source, s: VramSeries, out_dir: Path) -> PlotFile:
    plt = mpl()
    near = _near_boundary(s)
    if near:
        fig, (ax, zoom) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=110, gridspec_kw={"width_ratios": [3, 2]})
    else:
        fig, ax = plt.subplots(figsize=(8, 4.6), dpi=110)
        zoom = None
    groups = [
        ("pass", PASS, "o", [i for i in range(len(s.batches)) if s.passed[i]]),
        ("memory failure", MEM, "x", [i for i in range(len(s.batches)) if not s.passed[i] and s.memory_failure[i]]),
        ("other failure", OTHER, "^", [i for i in range(len(s.batches))
                                         if not s.passed[i] and not s.memory_failure[i]]),
    ]
    drawn: dict[str, list[tuple[int, float]]] = {}
    missing = [s.batches[i] for i in range(len(s.batches)) if s.peaks[i] is None]
    for name, color, marker, idx in groups:
        idx = [i for i in idx if s.peaks[i] is not None]
        if not idx:
            drawn[name] = []
            continue
        col = ax.scatter([s.batches[i] for i in idx], [s.peaks[i] for i in idx], c=color, marker=marker,
                         s=46 if marker != "x" else 56, zorder=3, label=f"{name} ({len(idx)})",
                         linewidths=1.8 if marker == "x" else 0.8, edgecolors=None if marker == "x" else "white")
        drawn[name] = [(int(x), float(y)) for x, y in col.get_offsets()]
    budget_y = None
    if s.budget_mib is not None:
        line = ax.axhline(s.budget_mib, color="#444444", linestyle="--", linewidth=1.2, zorder=2,
                          label=("B" if src.kind == KITCTL else "cap") + f" = {s.budget_mib:,.0f} MiB")
        budget_y = float(line.get_ydata()[0])
    if s.max_batch:
        at = [(b, p) for b, p, ok in zip(s.batches, s.peaks, s.passed) if ok and b == s.max_batch and p is not None]
        if at:
            ymax = max([p for p in s.peaks if p is not None] + [s.budget_mib or 0.0])
            high = at[-1][1] > 0.5 * ymax
            ax.annotate(f"max {s.max_batch:,}", xy=at[-1], xytext=(-12, -22) if high else (10, 14),
                        textcoords="offset points", ha="right" if high else "left", fontsize=9,
                        arrowprops={"arrowstyle": "-", "color": "#666666", "lw": 0.8})
    if zoom is not None:
        _boundary_panel(zoom, s, near)
    _batch_axis(ax, s.batches)
    ax.set_xlabel("batch")
    mem = "VRAM" if src.gpu_name is not None else "host memory (RSS)"
    ax.set_ylabel(f"peak {mem}, MiB\n{s.peak_source or 'no peak recorded'}", fontsize=9)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    top = max([p for p in s.peaks if p is not None] + [s.budget_mib or 0.0, 1.0])
    ax.set_ylim(0, top * 1.12)  # the highest point and its marker inside the axes (not cut at the frame)
    ax.grid(True, which="major", alpha=0.3)
    title = f"{engine_label(s.engine)} {s.precision}: peak {mem} per candidate"
    (fig.suptitle if zoom is not None else ax.set_title)(f"{title}\n{src.machine_short} · {src.name}", fontsize=10)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    # Named for what it plots: a --device cpu run's peaks are host memory, not VRAM.
    what = "vram" if src.gpu_name is not None else "memory"
    path = out_dir / safe_name(f"{src.stem}-{what}-{s.engine}-{s.precision}.png")
    save(fig, path)  # closes the figure
    return PlotFile(path, f"{engine_label(s.engine)} {s.precision}: peak {mem} against batch", "vram", src.name,
                    {"points": drawn, "budget_y": budget_y, "missing_peak": missing,
                     "trials": len(s.batches)})


def plot_maxbatch(sources: list[Source], out_dir: Path) -> PlotFile:
    one = len(sources) == 1
    b = maxbatch_bars(sources, with_source=not one)
    if one:
        src = sources[0]
        title, name = f"Max training batch — {src.machine_short}\n{src.name}", f"{src.stem}-maxbatch.png"
    else:
        # Named for the files it covers: two reports sharing a --plots folder keep both overviews.
        key = hashlib.sha1("\n".join(sorted(s.name for s in sources)).encode()).hexdigest()[:8]
        title, name = "Max training batch — all results", f"overview-maxbatch-{key}.png"
    path = out_dir / safe_name(name)
    families = {engine_family(r.engine): FAMILY_COLORS.get(engine_family(r.engine), "#7f7f7f")
                for s in sources for r in s.rows}
    legend = bars_legend(families, hatched="≥: censored at --max-batch (a lower bound)" if "≥" in b.notes else None)
    data = plot_bars(b, title, "largest batch that completes one training step", path, errors=False, legend=legend)
    return PlotFile(path, "Max batch per engine" + ("" if one else " (all results)"), "maxbatch",
                    sources[0].name if one else None, data)



def plots_of(src: Source, sources: list[Source], out_dir: Path) -> list[PlotFile]:
    """One result's: a VRAM plot per engine × precision, its max batches (when the overview lacks them)."""
    files = [plot_vram(src, s, out_dir) for s in vram_series(src)]
    if len(src.rows) > 1 or (src.rows and len(sources) == 1):  # else the overview has it
        files.append(plot_maxbatch([src], out_dir))
    return files


def plots_overview(sources: list[Source], out_dir: Path) -> list[PlotFile]:
    """Every result's max batches side by side (two or more results with rows); max batch against VRAM when the
    results are one GPU model's runs under several limits (catalogue.py)."""
    from .catalogue import plot_catalogue

    mb = [s for s in sources if s.rows]
    return ([plot_maxbatch(mb, out_dir)] if len(mb) > 1 else []) + plot_catalogue(sources, out_dir)
