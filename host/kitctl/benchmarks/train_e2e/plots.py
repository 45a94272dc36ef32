"""train-e2e's plot: per model, a bar per loader of training images/s (median, interval whiskers) beside the
synthetic upper bound."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .results import cells
from .table import rows


def series(doc: dict[str, Any]) -> dict[str, list[tuple[str, float, float | None, float | None]]]:
    """model -> [(loader, median, ci_low, ci_high)], synthetic first (the run's order)."""
    out: dict[str, list[tuple[str, float, float | None, float | None]]] = {}
    for r in rows(doc):
        if r["train"] is not None:
            out.setdefault(r["model"], []).append((r["loader"], r["train"], r["ci_low"], r["ci_high"]))
    return out


def plots(sources: list[Any], out_dir: Path) -> list[Any]:
    from ...reports.plots import LOADER_COLORS, SYNTHETIC_COLOR, Bars, PlotFile, bars_legend, plot_bars

    files = []
    for src in sources:
        if src.benchmark != "train-e2e":
            continue
        ss = series(src.doc)
        if not ss:
            continue
        loaders = list(dict.fromkeys(p[0] for pts in ss.values() for p in pts if p[0] != "synthetic"))
        colors = {name: LOADER_COLORS[k % len(LOADER_COLORS)] for k, name in enumerate(loaders)}
        b = Bars([], [], [], [])
        for model, pts in ss.items():
            for loader, median, low, high in pts:
                b.labels.append(f"{model} · {loader}")
                b.values.append(median)
                b.colors.append(SYNTHETIC_COLOR if loader == "synthetic" else colors[loader])
                b.notes.append("")
                b.err_low.append(max(0.0, median - low) if low is not None else 0.0)
                b.err_high.append(max(0.0, high - median) if high is not None else 0.0)
        device = next((r.device for c in cells(src.doc) for r in c.runs if r.device), "?")
        title = f"Training fed by each loader vs synthetic on-device data ({device})"
        legend_colors = {**({"synthetic data (the upper bound)": SYNTHETIC_COLOR}
                            if any(p[0] == "synthetic" for pts in ss.values() for p in pts) else {}), **colors}
        whiskers = "whiskers: the interval" if any(b.err_low) or any(b.err_high) else None
        path = out_dir / f"{src.stem}-train-e2e.png"
        data = plot_bars(b, f"{title}\n{src.name}", "training images/s (median of runs)", path, errors=True,
                         legend=bars_legend(legend_colors, whiskers=whiskers))
        files.append(PlotFile(path=path, title=title, kind="train-e2e", source=src.name,
                              data={**data, "series": {m: [list(p) for p in pts] for m, pts in ss.items()}}))
    return files
