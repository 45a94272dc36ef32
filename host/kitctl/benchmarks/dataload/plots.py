"""dataload's plot: images/s against workers, one line per loader × data × source (where each saturates)."""
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
        fig, ax = plt.subplots(figsize=(8, 5))
        for label, pts in ss.items():
            ax.plot([w for w, _ in pts], [v for _, v in pts], marker="o", label=label)
        ax.set_xlabel("loader workers")
        ax.set_ylabel("images/s (median of runs)")
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        title = f"Data loading images/s vs workers ({(src.doc.get('host') or {}).get('cpu_count')} cores)"
        ax.set_title(title)
        path = out_dir / f"{src.stem}-workers.png"
        _save(fig, path)
        files.append(PlotFile(path=path, title=title, kind="dataload", source=src.name, data={"series": ss}))
    return files
