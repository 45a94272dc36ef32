"""dataload's plot: images/s against workers, one line per loader × data × source (where each saturates); a run
at one worker count has no line to draw, so it gets one bar per loader × data × source with its interval."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .table import rows


def series(doc: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for r in rows(doc):
        if r["median"] is not None:
            out.setdefault(f"{r['loader']} {r['encoding']}@{r['side']} {r['source']}", []).append((r["workers"], r["median"]))
    return {k: sorted(v) for k, v in out.items()}


def bars(doc: dict[str, Any]) -> list[tuple[str, float, float | None, float | None]]:
    """(label, median, interval low, interval high) per finished cell, in the artifact's order."""
    return [(f"{r['loader']} {r['encoding']}@{r['side']} {r['source']}", r["median"], r["ci_low"], r["ci_high"])
            for r in rows(doc) if r["median"] is not None]


def _loader_colors(labels: list[str]) -> dict[str, str]:
    """One colour per loader (the label's first word), the same in both plots."""
    from ...reports.plots import LOADER_COLORS

    loaders = list(dict.fromkeys(lab.split()[0] for lab in labels))
    return {name: LOADER_COLORS[k % len(LOADER_COLORS)] for k, name in enumerate(loaders)}


def plots(sources: list[Any], out_dir: Path) -> list[Any]:
    from ...reports.plots import DPI, FIG_WIDTH, FONT, Bars, PlotFile, bars_legend, mpl, plot_bars, save, style_axes

    files = []
    for src in sources:
        if src.benchmark != "dataload":
            continue
        ss = series(src.doc)
        if not ss:
            continue
        cores = (src.doc.get("host") or {}).get("cpu_count")
        counts = sorted({w for pts in ss.values() for w, _ in pts})
        if len(counts) == 1:
            bs = bars(src.doc)
            colors = _loader_colors([b[0] for b in bs])
            # whiskers from the median to each end of its interval (none without one)
            b = Bars([x[0] for x in bs], [x[1] for x in bs], [colors[x[0].split()[0]] for x in bs], [""] * len(bs),
                     [m - (low if low is not None else m) for _, m, low, _ in bs],
                     [(high if high is not None else m) - m for _, m, _, high in bs])
            title = f"Data loading images/s, {counts[0]} workers ({cores} cores)"
            path = out_dir / f"{src.stem}-loaders.png"
            whiskers = "whiskers: the interval" if any(b.err_low) or any(b.err_high) else None
            data = plot_bars(b, f"{title}\n{src.name}", "images/s (median of runs)", path, errors=True,
                             legend=bars_legend(colors, whiskers=whiskers))
            files.append(PlotFile(path=path, title=title, kind="dataload", source=src.name,
                                  data={**data, "bars": [list(x) for x in bs]}))
            continue
        plt = mpl()
        from matplotlib.ticker import FixedLocator, NullLocator

        fig, ax = plt.subplots(figsize=(FIG_WIDTH, 5), dpi=DPI, layout="constrained")
        colors = _loader_colors(list(ss))
        styles = ["-", "--", ":", "-."]
        seen: dict[str, int] = {}
        for label, pts in ss.items():
            loader = label.split()[0]
            k = seen[loader] = seen.get(loader, -1) + 1  # a loader's other data/sources: its colour, another dash
            ax.plot([w for w, _ in pts], [v for _, v in pts], marker="o", label=label, color=colors[loader],
                    linestyle=styles[k % len(styles)])
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(counts))  # the worker counts that ran, as plain numbers
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_ylim(bottom=0)
        style_axes(ax, "y")
        ax.set_xlabel("loader workers", fontsize=FONT)
        ax.set_ylabel("images/s (median of runs)", fontsize=FONT)
        title = f"Data loading images/s vs workers ({cores} cores)"
        ax.set_title(f"{title}\n{src.name}", fontsize=10)
        fig.legend(loc="outside lower center", ncol=min(len(ss), 3), fontsize=8, frameon=False)
        path = out_dir / f"{src.stem}-workers.png"
        save(fig, path)
        files.append(PlotFile(path=path, title=title, kind="dataload", source=src.name, data={"series": ss}))
    return files
