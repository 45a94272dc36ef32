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


# One look for every plot of every benchmark: figure width, fonts, grid, number format, where the legend goes.
FIG_WIDTH = 9.0
DPI = 110
FONT = 9
LOADER_COLORS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#ff7f0e")
SYNTHETIC_COLOR = "#8c8c8c"  # an upper bound drawn beside measured bars (train-e2e's synthetic data)


def short_numbers(top: float) -> Any:
    """Axis tick text in one unit for the whole axis, by its largest value: "5k, 10k, 15k" or "1.2M";
    below 10,000 the plain number with a thousands separator. Short enough that neighbours never touch."""
    from matplotlib.ticker import FuncFormatter

    div, unit = (1e6, "M") if top >= 1e6 else (1e3, "k") if top >= 1e4 else (1.0, "")

    def text(v: float, _pos: Any = None) -> str:
        if v == 0:
            return "0"
        if not unit:
            return f"{v:,.0f}" if abs(v) >= 10 or v == int(v) else f"{v:.2g}"
        return f"{v / div:,.{0 if float(v / div).is_integer() else 1}f}{unit}"
    return FuncFormatter(text)


def style_axes(ax: Any, value_axis: str = "x", ticks: int = 5) -> None:
    """The shared axis look: a few readable ticks on the value axis (set its limits first), a light grid
    along it."""
    from matplotlib.ticker import MaxNLocator

    axis = ax.xaxis if value_axis == "x" else ax.yaxis
    lim = ax.get_xlim() if value_axis == "x" else ax.get_ylim()
    if axis.get_scale() == "linear":
        axis.set_major_locator(MaxNLocator(ticks, min_n_ticks=3))
    axis.set_major_formatter(short_numbers(max(abs(lim[0]), abs(lim[1]))))
    ax.tick_params(labelsize=FONT)
    ax.grid(True, axis=value_axis, alpha=0.3)
    ax.set_axisbelow(True)


def bars_legend(colors: dict[str, str], hatched: str | None = None, whiskers: str | None = None) -> list[Any]:
    """Legend entries: what each colour is (engine family, loader), what hatching and whiskers mean."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    out: list[Any] = [Patch(facecolor=c, label=name) for name, c in colors.items()]
    if hatched:
        out.append(Patch(facecolor="#bbbbbb", hatch="//", edgecolor="white", label=hatched))
    if whiskers:
        out.append(Line2D([], [], color="black", marker="|", markersize=8, linewidth=1.2, label=whiskers))
    return out


def plot_bars(b: Bars, title: str, xlabel: str, path: Path, errors: bool,
              legend: list[Any] | None = None) -> dict[str, Any]:
    """Horizontal bars, one per label, the value written past the end of its bar (past its whisker when
    there is one, never on it); the axis leaves room for the longest whisker and its label."""
    plt = mpl()
    n = len(b.labels)
    lines = max((lab.count("\n") + 1 for lab in b.labels), default=1)
    fig, ax = plt.subplots(figsize=(FIG_WIDTH, 1.5 + (0.42 + 0.18 * lines) * max(n, 1)
                                    + (0.4 if legend else 0.0)), dpi=DPI, layout="constrained")
    y = list(range(n))[::-1]
    kw: dict[str, Any] = {}
    err_high = b.err_high or [0.0] * n
    if errors and (any(b.err_low) or any(b.err_high)):
        kw = {"xerr": [b.err_low, b.err_high], "capsize": 4, "error_kw": {"elinewidth": 1.2}}
    else:
        err_high = [0.0] * n
    bars = ax.barh(y, b.values, color=b.colors, height=0.6, **kw)
    for patch, note in zip(bars, b.notes):
        if note == "≥":
            patch.set_hatch("//")
            patch.set_edgecolor("white")
    reach = max([v + e for v, e in zip(b.values, err_high)] + [0.0])
    for yi, v, note, eh in zip(y, b.values, b.notes, err_high):
        text = (f"≥ {v:,.0f}" if note == "≥" else f"{v:,.0f}" + (f"  ({note})" if note else "")) if v else note
        # Offset in points from the whisker's cap (or the bar's end): the label never sits on a whisker.
        ax.annotate(text, xy=(v + eh, yi), xytext=(7 if eh else 4, 0), textcoords="offset points",
                    va="center", fontsize=FONT)
    ax.set_yticks(y)
    ax.set_yticklabels(b.labels, fontsize=FONT)
    if reach > 0:
        ax.set_xlim(0, reach * 1.28)  # the longest whisker and its label inside the axes
        style_axes(ax)
    else:  # nothing measured: no scale to show
        ax.set_xlim(0, 1)
        ax.set_xticks([])
    ax.set_xlabel(xlabel, fontsize=FONT)
    ax.set_title(title, fontsize=10)
    if legend:
        fig.legend(handles=legend, loc="outside lower center", ncol=min(len(legend), 4), fontsize=8,
                   frameon=False)
    save(fig, path)  # closes the figure
    data: dict[str, Any] = {"labels": list(b.labels), "values": [float(p.get_width()) for p in bars],
                            "notes": list(b.notes)}
    if errors:
        data["err_low"], data["err_high"] = list(b.err_low), list(b.err_high)
    data["xlim"] = [float(v) for v in ax.get_xlim()]
    data["xticks"] = [t.get_text() for t in ax.get_xticklabels()]
    data["legend"] = [h.get_label() for h in legend or []]
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
