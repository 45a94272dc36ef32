"""PNG plots for `kitctl report --plots DIR` (matplotlib, Agg backend, imported lazily).

Each `plot_*` function draws one figure, saves it, and returns a `PlotFile` whose `data` is
read back from the axes it drew on (scatter offsets, line positions, bar extents), so tests can
check the plotted series without parsing PNGs. The `*_series`/`*_bars` functions give the data
before drawing. Which plots a result gets is its benchmark's (`Benchmark.plots_of`, `plots`,
in `kitctl/benchmarks/<name>/plots.py`); this module holds the shared drawing (bars, axes, saving).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import benchmarks
from ..core.fileio import replace_atomically
from .sources import Source

FAMILY_COLORS = {"PyTorch": "#ee4c2c", "TensorFlow": "#ff8f00", "OpenNN": "#1f77b4",
                 "JAX": "#8e44ad"}
PASS, MEM, OTHER = "#2ca02c", "#d62728", "#ff7f0e"


class PlotError(RuntimeError):
    """One line for the user (exit 2)."""


@dataclass
class PlotFile:
    path: Path
    title: str
    kind: str  # what it shows: vram | maxbatch | throughput (a benchmark's own plots name their kinds)
    source: str | None  # the result file's name, None for an overview across files
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Bars:
    labels: list[str]
    values: list[float]
    colors: list[str]
    notes: list[str]  # "" | "≥" (censored) | "reference claim" | "invalid" | "1 run"
    err_low: list[float] = field(default_factory=list)
    err_high: list[float] = field(default_factory=list)


def mpl():
    try:
        import matplotlib
    except ImportError:
        raise PlotError("--plots needs matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> None:
    """The PNG through a temporary file: a full disk leaves the previous file or none, never a truncated PNG.
    The figure is closed either way: pyplot keeps every open figure, and a report of many results draws many."""
    try:
        replace_atomically(path, lambda tmp: fig.savefig(tmp, format="png"))
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def safe_name(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)


def thousands():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:,.0f}")


def max_n(n: int):
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(n, integer=True)


def plot_bars(b: Bars, title: str, xlabel: str, path: Path, errors: bool) -> dict[str, Any]:
    plt = mpl()
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
    save(fig, path)  # closes the figure
    data: dict[str, Any] = {"labels": list(b.labels), "values": [float(p.get_width()) for p in bars],
                            "notes": list(b.notes)}
    if errors:
        data["err_low"], data["err_high"] = list(b.err_low), list(b.err_high)
    return data


def make_plots(sources: list[Source], out_dir: Path) -> list[PlotFile]:
    mpl()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PlotError(f"cannot create --plots {out_dir}: {exc.strerror or exc}") from None
    files: list[PlotFile] = []
    try:
        for src in sources:  # each result's own plots, in the order given
            files += benchmarks.get(src.benchmark).plots_of(src, sources, out_dir)
        for bench in benchmarks.all():  # then each benchmark's plots across its results
            own = [s for s in sources if s.benchmark == bench.name]
            if bench.plots is not None and own:
                files += bench.plots(own, out_dir)
    except OSError as exc:
        raise PlotError(f"cannot write plots under {out_dir}: {exc.strerror or exc}") from None
    return files


# The names before issue 17 (a benchmark's plots written against them keep working).
_mpl, _save, _safe, _plot_bars = mpl, save, safe_name, plot_bars
