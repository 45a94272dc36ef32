"""dataload's part of `kitctl compare`: per loader × data · source · workers, the change in median images/s,
by throughput's rule (`median_change`: beyond noise when the intervals of the medians do not overlap, a
regression also needs a drop of at least the threshold; one run: the threshold alone). Two runs measure the
same thing only on as many cores, with as many images per epoch, the same batch and timed epochs, and held to CPUs
the same way (--cpus)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...reports.compare import Comparer, data_context, median_change, median_text, setup_diffs
from ...reports.sources import Source
from ..data.results import Epoch
from .config import DataloadRecorded, recorded
from .report import cell_key
from .results import cells
from .table import rows


@dataclass(frozen=True)
class LoadRow:
    engine: str  # the loader (compare's first column)
    precision: str  # its cell: "jpeg90@256 · ram · 16 workers" (compare's second column)
    median: float | None
    ci_low: float | None
    ci_high: float | None
    runs: int


def load_rows(src: Source) -> list[LoadRow]:
    return [LoadRow(r["loader"], cell_key(r), r["median"], r["ci_low"], r["ci_high"], r["runs"]) for r in rows(src.doc)]


def _epoch_images(doc: dict[str, Any]) -> int | None:
    """Images per timed epoch, as the runs counted them (the corpus capped by --limit)."""
    for c in cells(doc):
        for r in c.runs:
            for e in r.epochs or ():
                if isinstance(e, Epoch) and isinstance(e.images, int):
                    return e.images
    return None


def _setup(doc: dict[str, Any], rec: DataloadRecorded) -> dict[str, Any]:
    return {"cores": (doc.get("host") or {}).get("cpu_count"), "images per epoch": _epoch_images(doc),
            "batch": rec.batch, "timed epochs": rec.epochs, "--cpus": rec.cpus or "not held"}


def _data_diffs(old: Source, new: Source) -> list[str]:
    """What makes images/s of the same cell measure something else: the machine's cores, the epoch's length
    (start-up is inside a short one), the batch, the timed epochs, the window rule (one measured under it, the
    other not, or under another: throughput's window-rule diff)."""
    rec_o, rec_n = recorded(old.doc), recorded(new.doc)
    out = setup_diffs(_setup(old.doc, rec_o), _setup(new.doc, rec_n))
    rule_o, rule_n = rec_o.window_rule, rec_n.window_rule
    if (rule_o or rule_n) and rule_o != rule_n:
        fixed = "fixed: {} timed epochs after a warm-up epoch"
        out.append(f"window ({rule_o or fixed.format(rec_o.epochs)} vs {rule_n or fixed.format(rec_n.epochs)})")
    return out


COMPARER = Comparer(rows=load_rows, change=median_change, text=median_text, unit="images/s (median [interval])",
                    unit_short="images/s", data_diffs=_data_diffs, context=data_context)
