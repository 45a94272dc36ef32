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


def plots(sources: list[Any], out_dir: Path) -> list[Any]:
    from ...reports.plots import PlotFile, _mpl, _save

    files = []
    for src in sources:
        if src.benchmark != "dataload":
            continue
        ss = series(src.doc)
        if not ss:
            continue
        plt = _mpl()
        cores = (src.doc.get("host") or {}).get("cpu_count")
        counts = sorted({w for pts in ss.values() for w, _ in pts})
        if len(counts) == 1:
            bs = bars(src.doc)
            fig, ax = plt.subplots(figsize=(8, 0.9 + 0.38 * len(bs)))
            y = list(range(len(bs)))[::-1]
            # whiskers from the median to each end of its interval (none without one)
            below = [m - (low if low is not None else m) for _, m, low, _ in bs]
            above = [(high if high is not None else m) - m for _, m, _, high in bs]
            ax.barh(y, [m for _, m, _, _ in bs], xerr=[below, above], capsize=3, color="tab:blue", alpha=0.8)
            ax.set_yticks(y, [b[0] for b in bs], fontsize=8)
            ax.set_xlabel("images/s (median of runs; whiskers: the interval)")
            ax.grid(True, axis="x", alpha=0.3)
            title = f"Data loading images/s, {counts[0]} workers ({cores} cores)"
            ax.set_title(title)
            fig.tight_layout()  # the labels are long: keep them inside the figure
            path = out_dir / f"{src.stem}-loaders.png"
            _save(fig, path)
            files.append(PlotFile(path=path, title=title, kind="dataload", source=src.name,
                                  data={"bars": [list(b) for b in bs]}))
            continue
        fig, ax = plt.subplots(figsize=(8, 5))
        for label, pts in ss.items():
            ax.plot([w for w, _ in pts], [v for _, v in pts], marker="o", label=label)
        ax.set_xlabel("loader workers")
        ax.set_ylabel("images/s (median of runs)")
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        title = f"Data loading images/s vs workers ({cores} cores)"
        ax.set_title(title)
        path = out_dir / f"{src.stem}-workers.png"
        _save(fig, path)
        files.append(PlotFile(path=path, title=title, kind="dataload", source=src.name, data={"series": ss}))
    return files
