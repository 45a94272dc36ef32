"""dataload's part of `kitctl report`: images/s per loader × data × source × workers, FFCV's published
figures beside (a 96-vCPU machine: compare shapes, not values)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...reports.format import table
from .common import FFCV_MACHINE
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
