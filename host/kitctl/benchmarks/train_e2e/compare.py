"""train-e2e's part of `kitctl compare`: per loader × model, the change in median training images/s by
throughput's rule (`median_change`). Two runs measure the same thing only with the same batch, steps,
warm-up, workers, data (encoding, side, images), precision and device setting, on as many cores."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...reports.compare import Comparer, data_context, median_change, median_text, setup_diffs
from ...reports.sources import Source
from .config import recorded
from .table import rows


@dataclass(frozen=True)
class TrainRow:
    engine: str  # the loader (compare's first column; synthetic: the training step alone)
    precision: str  # the model (compare's second column)
    median: float | None
    ci_low: float | None
    ci_high: float | None
    runs: int


def train_rows(src: Source) -> list[TrainRow]:
    return [TrainRow(r["loader"], r["model"], r["train"], r["ci_low"], r["ci_high"], r["runs"]) for r in rows(src.doc)]


def _setup(doc: dict[str, Any]) -> dict[str, Any]:
    c = recorded(doc)
    return {"cores": (doc.get("host") or {}).get("cpu_count"), "batch": c.batch, "steps": c.steps,
            "warmup": c.warmup, "workers": c.workers, "encoding": c.encoding, "side": c.side, "limit": c.limit,
            "precision": c.precision, "device": c.device}


def _data_diffs(old: Source, new: Source) -> list[str]:
    return setup_diffs(_setup(old.doc), _setup(new.doc))


COMPARER = Comparer(rows=train_rows, change=median_change, text=median_text,
                    unit="training images/s (median [interval])", unit_short="training images/s",
                    data_diffs=_data_diffs, context=data_context)
