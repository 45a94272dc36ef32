"""dataload's part of `kitctl report`: images/s per loader × data × source × workers, FFCV's published
figures beside (a 96-vCPU machine: compare shapes, not values)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...reports.format import table
from ...datarun import FFCV_MACHINE
from .table import table_rows

if TYPE_CHECKING:
    from ...reports.sources import Source


def result_table(src: Source) -> list[str]:
    head, body = table_rows(src.doc)
    cores = (src.doc.get("host") or {}).get("cpu_count")
    return [*table(head, body, right={3, 4, 5, 6, 7, 8}), "",
            f"_This machine: {cores} CPU cores. FFCV's published figures: {FFCV_MACHINE}._"]


# A timed epoch whose first batch took this share of it is mostly start-up (worker processes or threads
# starting, the pipeline filling), not the loader's steady rate.
START_SHARE = 0.2


def caveats_protocol(src: Source) -> list[str]:
    """Epochs too short for the rate to be a steady one: the first batch's wait is inside the timed window
    (FFCV's figures are ImageNet epochs of 1.28 M images, where it is negligible). Named per cell."""
    hit = []
    for c in src.doc["results"]:
        shares = [e["first_batch_seconds"] / e["seconds"] for r in c["runs"] for e in r.get("epochs") or []
                  if e.get("first_batch_seconds") is not None and e.get("seconds")]
        if shares and max(shares) >= START_SHARE:
            hit.append(f"{c['loader']} {c['encoding']}@{c['side']} {c['source']} w={c['workers']} "
                       f"({min(shares):.0%}–{max(shares):.0%})")
    if not hit:
        return []
    return [f"**Start-up inside short epochs** — the first batch took ≥ {START_SHARE:.0%} of a timed epoch: "
            f"{'; '.join(hit)}. Worker start and the pipeline's fill are in the window, so these images/s "
            "understate the loader's steady rate; a larger --limit amortises them."]


def ratios(sources: list[Any]) -> list[Any]:
    return []


def measured(doc: dict[str, Any]) -> list[list[str]]:
    c = doc["configuration"]
    return [["Question", "data-loading images/s of each loader's pipeline (no training)"],
            ["Pipeline", c.get("pipeline", "")],
            ["Loaders", ", ".join(c["loaders"])],
            ["Data", f"{', '.join(c['encodings'])} at max side {', '.join(map(str, c['sides']))} px; corpus "
                     f"`{c['corpus']}`" + (f", first {c['limit']:,} images" if c.get("limit") else "")],
            ["Sources", "; ".join(f"{k}: {v}" for k, v in (c.get("sources_meaning") or {}).items()
                                  if k in c["sources"])],
            ["Speed rule", f"batch {c['batch']}; one warm-up epoch, then {c['epochs']} timed epoch(s); images/s = "
                           f"images ÷ timed wall time; {c['runs']} runs per cell, each a fresh process; median and "
                           f"a distribution-free interval of the median"],
            ["Workers", ", ".join(map(str, c["workers"]))],
            ["Timeout", f"{c['timeout_s']:,.0f} s per run"]]
