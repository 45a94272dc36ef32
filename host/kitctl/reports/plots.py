"""PNG plots for `kitctl report --plots DIR` (matplotlib, Agg backend, imported lazily).

Each `plot_*` function draws one figure, saves it, and returns a `PlotFile` whose `data` is
read back from the axes it drew on (scatter offsets, line positions, bar extents), so tests can
check the plotted series without parsing PNGs. The `*_series`/`*_bars` functions give the data
before drawing.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.fileio import replace_atomically
from .sources import KITCTL, Source
from ..core.tables import engine_family, engine_label

_FAMILY_COLORS = {"PyTorch": "#ee4c2c", "TensorFlow": "#ff8f00", "OpenNN": "#1f77b4",
                  "JAX": "#8e44ad"}
_PASS, _MEM, _OTHER = "#2ca02c", "#d62728", "#ff7f0e"


class PlotError(RuntimeError):
    """One line for the user (exit 2)."""


@dataclass
class PlotFile:
    path: Path
    title: str
    kind: str  # vram | maxbatch | throughput
    source: str | None  # the result file's name, None for an overview across files
    data: dict[str, Any] = field(default_factory=dict)


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


@dataclass
class Bars:
    labels: list[str]
    values: list[float]
    colors: list[str]
    notes: list[str]  # "" | "≥" (censored) | "reference claim" | "invalid" | "1 run"
    err_low: list[float] = field(default_factory=list)
    err_high: list[float] = field(default_factory=list)


def _mpl():
    try:
        import matplotlib
    except ImportError:
        raise PlotError("--plots needs matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    """The PNG through a temporary file: a full disk leaves the previous file or none, never a truncated PNG."""
    replace_atomically(path, lambda tmp: fig.savefig(tmp, format="png"))


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)


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
            b.colors.append(_FAMILY_COLORS.get(engine_family(r.engine), "#7f7f7f"))
            if r.has_figure:
                b.values.append(float(r.max_batch))  # type: ignore[arg-type]
                b.notes.append("≥" if r.search_status == "censored_at_max_batch" else
                               "reference claim" if r.reference_claim else "")
            else:
                b.values.append(0.0)
                b.notes.append("invalid" if r.search_status == "invalid_non_memory_failure" else
                               "no pass" if r.search_status == "no_passing_batch" else r.result)
    return b


def throughput_bars(src: Source) -> Bars:
    b = Bars([], [], [], [])
    for r in src.tput:
        b.labels.append(f"{engine_label(r.engine)} {r.precision}")
        b.colors.append(_FAMILY_COLORS.get(engine_family(r.engine), "#7f7f7f"))
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


def _batch_axis(ax, batches: list[int]) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    lo, hi = min(batches), max(batches)
    if hi / max(lo, 1) >= 8:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
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
        ax.scatter(s.batches[i], s.peaks[i], c=_PASS if ok else _MEM if mem else _OTHER,
                   marker="o" if ok else "x" if mem else "^", s=40, zorder=3,
                   linewidths=1.8 if (not ok and mem) else 0.8, edgecolors=None if (not ok and mem) else "white")
    ys = [s.peaks[i] for i in near] + ([s.budget_mib] if s.budget_mib is not None else [])
    pad = max((max(ys) - min(ys)) * 0.2, 8.0)
    ax.set_ylim(min(ys) - pad, max(ys) + pad)
    if s.budget_mib is not None:
        ax.axhline(s.budget_mib, color="#444444", linestyle="--", linewidth=1.2)
    ax.axvline(s.max_batch, color="#999999", linewidth=0.8, zorder=1)
    ax.xaxis.set_major_formatter(_thousands())
    ax.yaxis.set_major_formatter(_thousands())
    ax.xaxis.set_major_locator(_max_n(4))
    ax.tick_params(labelsize=8)
    ax.set_xlabel("batch (within 5% of max)")
    ax.set_title(f"near the boundary: max {s.max_batch:,}", fontsize=9)
    ax.grid(True, alpha=0.3)


def _thousands():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:,.0f}")


def _max_n(n: int):
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(n, integer=True)


def plot_vram(src: Source, s: VramSeries, out_dir: Path) -> PlotFile:
    plt = _mpl()
    near = _near_boundary(s)
    if near:
        fig, (ax, zoom) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=110, gridspec_kw={"width_ratios": [3, 2]})
    else:
        fig, ax = plt.subplots(figsize=(8, 4.6), dpi=110)
        zoom = None
    groups = [
        ("pass", _PASS, "o", [i for i in range(len(s.batches)) if s.passed[i]]),
        ("memory failure", _MEM, "x", [i for i in range(len(s.batches)) if not s.passed[i] and s.memory_failure[i]]),
        ("other failure", _OTHER, "^", [i for i in range(len(s.batches))
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
    mem = "VRAM" if src.gpu_name is not None else "memory"
    ax.set_ylabel(f"peak {mem}, MiB\n{s.peak_source or 'no peak recorded'}", fontsize=9)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylim(bottom=0)
    ax.grid(True, which="major", alpha=0.3)
    title = f"{engine_label(s.engine)} {s.precision}: peak {mem} per candidate"
    (fig.suptitle if zoom is not None else ax.set_title)(f"{title}\n{src.machine_short} · {src.name}", fontsize=10)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    path = out_dir / _safe(f"{src.stem}-vram-{s.engine}-{s.precision}.png")
    try:
        _save(fig, path)
    finally:
        plt.close(fig)
    return PlotFile(path, f"{engine_label(s.engine)} {s.precision}: peak {mem} against batch", "vram", src.name,
                    {"points": drawn, "budget_y": budget_y, "missing_peak": missing,
                     "trials": len(s.batches)})


def _plot_bars(b: Bars, title: str, xlabel: str, path: Path, errors: bool) -> dict[str, Any]:
    plt = _mpl()
    n = len(b.labels)
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.55 * max(n, 1) + (0.35 * n if "\n" in "".join(b.labels) else 0)),
                           dpi=110)
    y = list(range(n))[::-1]
    kw: dict[str, Any] = {}
    if errors and any(b.err_low) or any(b.err_high):
        kw = {"xerr": [b.err_low, b.err_high], "capsize": 4, "error_kw": {"elinewidth": 1.2}}
    bars = ax.barh(y, b.values, color=b.colors, height=0.6, **kw)
    for patch, note in zip(bars, b.notes):
        if note == "≥":
            patch.set_hatch("//")
            patch.set_edgecolor("white")
    top = max(b.values + [1.0])
    for yi, v, note, eh in zip(y, b.values, b.notes, b.err_high or [0.0] * n):
        text = (f"≥ {v:,.0f}" if note == "≥" else f"{v:,.0f}" + (f"  ({note})" if note else "")) if v else note
        ax.text(v + eh + top * 0.01, yi, text, va="center", fontsize=9)
    ax.set_yticks(y)
    ax.set_yticklabels(b.labels, fontsize=9)
    ax.set_xlim(0, top * 1.22)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    try:
        _save(fig, path)
    finally:
        plt.close(fig)
    data: dict[str, Any] = {"labels": list(b.labels), "values": [float(p.get_width()) for p in bars],
                            "notes": list(b.notes)}
    if errors:
        data["err_low"], data["err_high"] = list(b.err_low), list(b.err_high)
    return data


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
    path = out_dir / _safe(name)
    data = _plot_bars(b, title, "largest batch that completes one training step", path, errors=False)
    return PlotFile(path, "Max batch per engine" + ("" if one else " (all results)"), "maxbatch",
                    sources[0].name if one else None, data)


def plot_throughput(src: Source, out_dir: Path) -> PlotFile:
    b = throughput_bars(src)
    levels = {r.ci_level for r in src.tput if r.ci_level}
    ci = f"{max(levels) * 100:.0f}% CI" if levels else "CI"
    path = out_dir / _safe(f"{src.stem}-throughput.png")
    data = _plot_bars(b, f"Training throughput (median, {ci}) — {src.machine_short}\n{src.name}",
                      "images/s", path, errors=True)
    return PlotFile(path, f"Throughput per engine (median, {ci})", "throughput", src.name, data)


def make_plots(sources: list[Source], out_dir: Path) -> list[PlotFile]:
    _mpl()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PlotError(f"cannot create --plots {out_dir}: {exc.strerror or exc}") from None
    files: list[PlotFile] = []
    try:
        for src in sources:
            if src.benchmark == "maxbatch":
                for s in vram_series(src):
                    files.append(plot_vram(src, s, out_dir))
                if len(src.rows) > 1 or (src.rows and len(sources) == 1):  # else the overview has it
                    files.append(plot_maxbatch([src], out_dir))
            elif src.tput:
                files.append(plot_throughput(src, out_dir))
        mb = [s for s in sources if s.benchmark == "maxbatch" and s.rows]
        if len(mb) > 1:
            files.append(plot_maxbatch(mb, out_dir))
        from .. import benchmarks

        for b in benchmarks.all():  # a benchmark's own plots (its registry hook)
            own = [s for s in sources if s.benchmark == b.name]
            if b.plots is not None and own:
                files += b.plots(own, out_dir)
    except OSError as exc:
        raise PlotError(f"cannot write plots under {out_dir}: {exc.strerror or exc}") from None
    return files

