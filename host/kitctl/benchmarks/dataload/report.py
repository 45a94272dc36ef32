"""dataload's part of `kitctl report`: images/s per loader × data × source × workers, FFCV's published
figures beside (a 96-vCPU machine: compare shapes, not values)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...reports.format import table
from ..data.caveats import FFCV_MACHINE, cell_caveats, partial_caveat, scatter_note
from ..data.loaders import GPU_LOADERS
from ..data.results import Epoch
from . import results
from .config import DataloadRecorded, recorded
from .results import DataloadCell
from .table import rows, table_rows

if TYPE_CHECKING:
    from ...reports.sources import Source


def result_table(src: Source) -> list[str]:
    head, body = table_rows(src.doc)
    cores = (src.doc.get("host") or {}).get("cpu_count")
    right = set(range(3, len(head)))  # the figures' columns
    return [*table(head, body, right=right), "",
            f"_This machine: {cores} CPU cores. FFCV's published figures: {FFCV_MACHINE}._"]


# A timed epoch whose first batch took this share of it is mostly start-up (worker processes or threads
# starting, the pipeline filling), not the loader's steady rate.
START_SHARE = 0.2


def caveats_protocol(src: Source) -> list[str]:
    """Epochs too short for the rate to be a steady one: the first batch's wait is inside the timed window
    (FFCV's figures are ImageNet epochs of 1.28 M images, where it is negligible). Named per cell. Only for
    artifacts from before the window rule: under it the start-up is in the warm-up epoch, reported apart."""
    if recorded(src.doc).has_window_rule:
        return []
    hit = []
    for c in results.cells(src.doc):
        shares = [e.first_batch_seconds / e.seconds for r in c.runs for e in r.epochs or ()
                  if isinstance(e, Epoch) and e.first_batch_seconds is not None and e.seconds]
        if shares and max(shares) >= START_SHARE:
            hit.append(f"{c.loader} {c.encoding}@{c.side} {c.source} w={c.workers} "
                       f"({min(shares):.0%}–{max(shares):.0%})")
    if not hit:
        return []
    return [f"**Start-up inside short epochs** — the first batch took ≥ {START_SHARE:.0%} of a timed epoch: "
            f"{'; '.join(hit)}. Worker start and the pipeline's fill are in the window, so these images/s "
            "understate the loader's steady rate; a larger --limit amortises them."]


BASELINE = "pytorch-dataloader"  # the loader every other is compared with: PyTorch's own path, in every image


def cell_key(r: dict[str, Any]) -> str:
    """A cell's key beside its loader: same data, source and workers (what a ratio holds equal)."""
    return f"{r['encoding']}@{r['side']} · {r['source']} · {_workers(r['workers'])}"


def cells(src: Source) -> list[tuple[str, str, str, tuple[float, bool] | None]]:
    """The overview's side by side: one row per loader × (data · source · workers), its median images/s."""
    out = []
    for r in rows(src.doc):
        ok = r["status"] == "ok" and r["median"] is not None
        out.append((r["loader"], cell_key(r), f"{r['median']:,.0f}" if ok else "FAILED" if r["status"] == "failed"
                    else r["status"], (r["median"], False) if ok else None))
    return out


def ratios(sources: list[Any]) -> list[Any]:
    """Each loader's median images/s against pytorch-dataloader's, same data, source and workers. Across several
    results (the overview), only pairs whose two loaders come from different results: the others are each one's own."""
    from ...core.tables import Ratio

    out = []
    found = [(i, r) for i, s in enumerate(sources) for r in rows(s.doc) if r["status"] == "ok" and r["median"]]
    for i, base in found:
        if base["loader"] != BASELINE:
            continue
        for j, r in found:
            if r["loader"] == BASELINE or cell_key(r) != cell_key(base) or (len(sources) > 1 and i == j):
                continue
            out.append(Ratio(cell_key(r), r["loader"], BASELINE, r["median"] / base["median"], "as fast"))
    return out


def headline(src: Source) -> str:
    """`kitctl results list`: the fastest loader per data · source · workers (its median images/s)."""
    best: dict[str, dict[str, Any]] = {}
    for r in rows(src.doc):
        if r["status"] == "ok" and r["median"] and (cell_key(r) not in best or r["median"] > best[cell_key(r)]["median"]):
            best[cell_key(r)] = r
    return "; ".join(f"{k}: {r['loader']} {r['median']:,.0f} img/s" for k, r in best.items())


NO_RATIOS = f"_No loader beside {BASELINE} with a figure on the same data, source and workers: no ratios._"


def gpu_users(src: Source) -> list[str]:
    """The GPU loaders that ran (a run recorded) in this result: what used the GPU; a CPU loader never did."""
    ran = [c.loader for c in results.cells(src.doc) if c.loader in GPU_LOADERS and c.runs]
    return [f"{ld} (decode)" for ld in dict.fromkeys(ran)]


def measured(doc: dict[str, Any]) -> list[list[str]]:
    c = recorded(doc)
    return [["Question", "data-loading images/s of each loader's pipeline (no training)"],
            ["Pipeline", c.pipeline],
            ["Loaders", ", ".join(c.loaders)],
            ["Data", f"{', '.join(c.encodings)} at max side {', '.join(map(str, c.sides))} px; corpus "
                     f"`{c.corpus}`" + (f", first {c.limit:,} images" if c.limit else "")],
            ["Sources", "; ".join(f"{k}: {v}" for k, v in (c.sources_meaning or {}).items()
                                  if k in c.sources)],
            ["Speed rule", _window_speed_rule(c) if c.has_window_rule else
                           f"batch {c.batch}; one warm-up epoch, then {c.epochs} timed epoch(s); images/s = "
                           f"images ÷ timed wall time; {c.runs} run{'s' if c.runs != 1 else ''} per cell, each a fresh process; median and "
                           f"a distribution-free interval of the median"],
            ["Workers", ", ".join(map(str, c.workers))],
            ["Timeout", f"{c.timeout_s:,.0f} s per run"]]


def _window_speed_rule(c: DataloadRecorded) -> str:
    from ...core.steadiness import MAX_INTERVAL_SPREAD

    runs = f"{c.runs} run{'s' if c.runs != 1 else ''} per cell"
    return (f"batch {c.batch}; the warm-up epoch's time to its first batch is the loader's start-up (the "
            f"start-up s column, not in images/s); the window: {c.window_rule}; images/s = the window's images "
            f"÷ its wall time (the steady rate); steady when every run's first and second half of batches agree within "
            f"{c.steady_tolerance:.0%} and the interval spans at most {MAX_INTERVAL_SPREAD:.0%} of the median; "
            f"{runs}, each a fresh process; median and a distribution-free interval of the median")


def _label(c: DataloadCell) -> str:
    return f"{c.loader} {c.encoding}@{c.side} {c.source}, {_workers(c.workers)}"


def caveats(src: Source) -> list[str]:
    """A failed cell, and one whose median rests on fewer runs than asked, named with why."""
    typed = results.cells(src.doc)
    out = cell_caveats(typed, _label, recorded(src.doc).runs)
    unsteady = [f"{_label(c)} ({c.steadiness.why})" for c in typed
                if c.ok and c.steadiness and c.steadiness.steady is False]
    if unsteady:
        out.append(f"**Not steady** — {'; '.join(unsteady)}: the figure is kept, but it moves with the window; "
                   "read it as a range, not a rank (a longer --window-seconds or more --runs).")
    tolerance = recorded(src.doc).steady_tolerance
    for c in typed:
        if c.ok and c.steadiness and c.steadiness.steady is False and tolerance:
            note = scatter_note(_label(c), [(r.halves_change, r.epochs) for r in c.runs if r.ok], tolerance)
            out += [note] if note else []
    return out


def interrupted(src: Source) -> str:
    c = recorded(src.doc)
    planned = len(c.loaders) * len(c.encodings) * len(c.sides) * len(c.sources) * len(c.workers)
    return partial_caveat(src, _label, planned, "loader × data × source × workers cells", c.runs,
                          cells=results.cells(src.doc))


def _workers(n: int) -> str:
    return f"{n} worker" + ("" if n == 1 else "s")
