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


def ratios(sources: list[Any]) -> list[Any]:
    return []


# The loaders that decode on a GPU (trials/dataload/loaders.py); every other loader runs on CPU cores only.
GPU_LOADERS = ("pytorch-nvjpeg", "dali-gpu")


def gpu_users(src: Source) -> list[str]:
    """The GPU loaders that ran (a run recorded) in this result: what used the GPU; a CPU loader never did."""
    ran = [c["loader"] for c in src.doc["results"] if c["loader"] in GPU_LOADERS and c.get("runs")]
    return [f"{ld} (decode)" for ld in dict.fromkeys(ran)]


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
