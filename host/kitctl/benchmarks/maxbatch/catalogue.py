"""Max batch on every card size: a `--vram-limit` list runs one max-batch run per limit (each its own artifact,
each with every engine × precision), and these functions put the answers side by side — the end-of-run table,
the report's "Max batch against VRAM" section and its plot ("which card do I need for batch X").

Pure functions of the artifacts (and of `kitctl report`'s sources), so the table at the end of a catalogue run
and the report of its files say the same."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from ...core.cards import CARDS
from ...core.tables import engine_label
from .table import Row, maxbatch_rows

if TYPE_CHECKING:
    from ...reports.plots import PlotFile
    from ...reports.sources import Source


@dataclass(frozen=True)
class Size:
    """One card size of a catalogue: its limit L, the card named for it (or the cards of that size in the kit's
    table), each engine × precision's row at that limit and the files they come from."""

    limit_mib: int
    cards: str
    rows: tuple[Row, ...]
    names: tuple[str, ...]

    def figure(self, engine: str, precision: str) -> Row | None:
        return next((r for r in self.rows if (r.engine, r.precision) == (engine, precision)), None)


def cards_of(limit_mib: int, doc: dict[str, Any]) -> str:
    """The card the run named (`vram_card`), else the cards of the kit's table with exactly this size."""
    named = doc.get("vram_card")
    if isinstance(named, dict) and named.get("key"):
        return str(named["key"])
    return ", ".join(c.key for c in CARDS if c.total_mib == limit_mib)


def _rank(r: Row, created: str) -> tuple[int, str]:
    """Which run's row a limit shows when several ran the same engine × precision: a bounded answer before a
    censored one before none, then the latest run (a later kit's answer)."""
    kind = 2 if r.search_status == "bounded_by_memory_failure" and r.has_figure else 1 if r.has_figure else 0
    return kind, created


def sizes(docs: Iterable[tuple[str, dict[str, Any]]]) -> list[Size]:
    """(name, artifact) of max-batch runs under a --vram-limit → one Size per limit, smallest first. Per limit each
    engine × precision comes from one run (`_rank`); a run without a recorded limit is left out."""
    rows: dict[int, dict[tuple[str, str], tuple[Row, str, tuple[int, str]]]] = {}
    cards: dict[int, str] = {}
    for name, doc in docs:
        limit = (doc.get("budget") or {}).get("limit_mib")
        if doc.get("benchmark") != "maxbatch" or not isinstance(limit, int) or isinstance(limit, bool):
            continue
        at = rows.setdefault(limit, {})
        cards.setdefault(limit, cards_of(limit, doc))
        for r in maxbatch_rows(doc):
            key, rank = (r.engine, r.precision), _rank(r, str(doc.get("created_utc") or ""))
            if key not in at or rank > at[key][2]:
                at[key] = (r, name, rank)
    return [Size(k, cards[k], tuple(r for r, _, _ in rows[k].values()),
                 tuple(dict.fromkeys(n for _, n, _ in rows[k].values()))) for k in sorted(rows)]


def cell_keys(found: list[Size]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r.engine, r.precision) for s in found for r in s.rows))


def figure_text(r: Row | None) -> str:
    return r.figure_text if r is not None and r.has_figure else "—"


def table_rows(found: list[Size]) -> tuple[list[str], list[list[str]]]:
    """The side-by-side table: a row per card size, a column per engine × precision."""
    keys = cell_keys(found)
    heads = ["VRAM limit (MiB)", "card", *[f"{engine_label(e)} {p}" for e, p in keys]]
    rows = [[f"{s.limit_mib:,}", s.cards or "—", *[figure_text(s.figure(e, p)) for e, p in keys]] for s in found]
    return heads, rows


def print_catalogue(console: Any, found: list[Size]) -> None:
    """The end of a catalogue run: every card size's max batches in one table."""
    from rich.table import Table

    heads, rows = table_rows(found)
    t = Table(title="Max batch against VRAM — one run per card size")
    for i, h in enumerate(heads):
        t.add_column(h, justify="left" if i == 1 else "right")
    for r in rows:
        t.add_row(*r)
    console.print(t)


def catalogue_sources(sources: list[Source]) -> list[Source]:
    """The report's max-batch results of one GPU model under two or more limits (a catalogue), else none."""
    mb = [s for s in sources if s.is_kitctl and s.benchmark == "maxbatch" and s.limit_mib is not None and s.rows]
    models = {s.gpu_name for s in mb}
    if len(models) != 1 or len({s.limit_mib for s in mb}) < 2:
        return []
    return mb


def report_lines(sources: list[Source]) -> list[str]:
    """The report's "Max batch against VRAM" section, when its results are a catalogue."""
    from ...reports.format import heading, table

    mb = catalogue_sources(sources)
    if not mb:
        return []
    found = sizes((s.name, s.doc) for s in mb)
    heads, rows = table_rows(found)
    n = {s.name: i for i, s in enumerate(sources, 1)}
    heads.append("result")
    for s, r in zip(found, rows):
        r.append(", ".join(f"[{i}]" for i in sorted(n[name] for name in s.names)))
    return [heading(2)("Max batch against VRAM"), "",
            f"Max batch per VRAM limit L on {mb[0].gpu_name} (each limit an emulated card of that size: the "
            "framework's allocator capped, every candidate gated at B = L − R). A card named in the second column "
            "reports that total through NVML (the kit's card table, docs/running.md); ≥: censored at --max-batch. "
            "Where several results ran one engine × precision at one limit, the latest bounded answer is shown.",
            "", *table(heads, rows, right=set(range(2, len(heads) - 1))), ""]


def plot_catalogue(sources: list[Source], out_dir: Path) -> list[PlotFile]:
    """Max batch against the VRAM limit, a line per engine × precision (hollow markers: censored, a lower bound)."""
    import hashlib

    from ...reports.plots import PlotFile, mpl, safe_name, save, style_axes

    mb = catalogue_sources(sources)
    if not mb:
        return []
    found = sizes((s.name, s.doc) for s in mb)
    plt = mpl()
    fig, ax = plt.subplots(figsize=(8, 5))
    drawn: dict[str, list[list[float]]] = {}
    for e, p in cell_keys(found):
        pts = [(s.limit_mib, s.figure(e, p)) for s in found]
        pts = [(x, r) for x, r in pts if r is not None and r.has_figure]
        if not pts:
            continue
        label = f"{engine_label(e)} {p}"
        xs, ys = [x / 1024 for x, _ in pts], [float(r.max_batch or 0) for _, r in pts]
        line, = ax.plot(xs, ys, marker="o", linewidth=1, label=label)  # measured at the markers only
        for x, (_, r) in zip(xs, pts):
            if r.search_status == "censored_at_max_batch":
                ax.plot([x], [r.max_batch], marker="o", markerfacecolor="white", color=line.get_color())
        drawn[label] = [[x, y] for x, y in zip(xs, ys)]
    named = [s for s in found if s.cards]
    if named:  # the cards of each size along the top, at their limits
        top = ax.secondary_xaxis("top")
        top.set_xticks([s.limit_mib / 1024 for s in named], labels=[s.cards for s in named], fontsize=7,
                       rotation=30, ha="left")
    ax.set_xlabel("VRAM limit L (GiB)")
    ax.set_ylabel("largest batch that completes one training step")
    ax.set_title(f"Max batch against VRAM — {mb[0].gpu_name}")
    fig.subplots_adjust(top=0.84)  # room for the card names above the plot and the title above them
    ax.set_ylim(bottom=0)
    style_axes(ax, value_axis="y")
    ax.legend(fontsize=8, loc="lower right")
    key = hashlib.sha1("\n".join(sorted(s.name for s in mb)).encode()).hexdigest()[:8]
    path = out_dir / safe_name(f"catalogue-maxbatch-{key}.png")
    save(fig, path)
    return [PlotFile(path, "Max batch against VRAM limit", "maxbatch", None,
                     {"lines": drawn, "limits_mib": [s.limit_mib for s in found]})]
