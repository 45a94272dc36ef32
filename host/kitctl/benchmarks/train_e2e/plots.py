"""train-e2e's plot: per model, a bar per loader of training images/s (median, interval whiskers) beside the
synthetic upper bound."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .table import rows


def series(doc: dict[str, Any]) -> dict[str, list[tuple[str, float, float | None, float | None]]]:
    """model -> [(loader, median, ci_low, ci_high)], synthetic first (the run's order)."""
    out: dict[str, list[tuple[str, float, float | None, float | None]]] = {}
    for r in rows(doc):
        if r["train"] is not None:
            out.setdefault(r["model"], []).append((r["loader"], r["train"], r["ci_low"], r["ci_high"]))
    return out


def plots(sources: list[Any], out_dir: Path) -> list[Any]:
    from ...reports.plots import PlotFile, _mpl, _save

    files = []
    for src in sources:
        if src.benchmark != "train-e2e":
            continue
        ss = series(src.doc)
        if not ss:
            continue
        plt = _mpl()
        fig, axes = plt.subplots(1, len(ss), figsize=(5 * len(ss) + 1, 4.5), squeeze=False)
        for ax, (model, pts) in zip(axes[0], ss.items()):
            names = [p[0] for p in pts]
            vals = [p[1] for p in pts]
            lo = [max(0.0, p[1] - p[2]) if p[2] is not None else 0.0 for p in pts]
            hi = [max(0.0, p[3] - p[1]) if p[3] is not None else 0.0 for p in pts]
            colors = ["#888888" if n == "synthetic" else "#1f77b4" for n in names]
            ax.bar(names, vals, yerr=[lo, hi], color=colors, capsize=3)
            if "synthetic" in names:
                ax.axhline(vals[names.index("synthetic")], color="#888888", linestyle="--", linewidth=1)
            ax.set_title(model)
            ax.set_ylabel("training images/s (median of runs)")
            ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
            ax.grid(True, axis="y", alpha=0.3)
        device = next((r.get("device") for c in src.doc["results"] for r in c["runs"] if r.get("device")), "?")
        title = f"Training fed by each loader vs synthetic on-device data ({device})"
        fig.suptitle(title)
        fig.tight_layout()  # the rotated loader names stay inside the figure
        path = out_dir / f"{src.stem}-train-e2e.png"
        _save(fig, path)
        files.append(PlotFile(path=path, title=title, kind="train-e2e", source=src.name,
                              data={"series": {m: [list(p) for p in pts] for m, pts in ss.items()}}))
    return files
