"""dataload's part of `kitctl compare`: per loader × data · source · workers, the change in median images/s,
by throughput's rule (`median_change`: beyond noise when the intervals of the medians do not overlap, a
regression also needs a drop of at least the threshold; one run: the threshold alone). Two runs measure the
same thing only on as many cores, with as many images per epoch, the same batch and timed epochs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...reports.compare import Comparer, median_change, median_text
from ...reports.sources import Source
from .report import cell_key
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
    for c in doc["results"]:
        for r in c["runs"]:
            for e in r.get("epochs") or []:
                if isinstance(e.get("images"), int):
                    return e["images"]
    return None


def _setup(doc: dict[str, Any]) -> dict[str, Any]:
    c = doc["configuration"]
    return {"cores": (doc.get("host") or {}).get("cpu_count"), "images per epoch": _epoch_images(doc),
            "batch": c.get("batch"), "timed epochs": c.get("epochs")}


def _data_diffs(old: Source, new: Source) -> list[str]:
    """What makes images/s of the same cell measure something else: the machine's cores, the epoch's length
    (start-up is inside a short one), the batch, the timed epochs."""
    o, n = _setup(old.doc), _setup(new.doc)
    return [f"{k} ({_n(o[k])} vs {_n(n[k])})" for k in o if o[k] is not None and n[k] is not None and o[k] != n[k]]


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) else str(x)


def _versions(doc: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in doc["results"]:
        for r in c["runs"]:
            for k, v in (r.get("versions") or {}).items():
                if v:
                    out.setdefault(k, v)
    return out


def _context(old: Source, new: Source) -> list[str]:
    """Another runtime or other package versions: still the same measurement, the reader should know."""
    out = []
    ort, nrt = old.doc["configuration"].get("runtime", "local"), new.doc["configuration"].get("runtime", "local")
    if ort != nrt:
        out.append(f"runtime ({ort} vs {nrt})")
    ov, nv = _versions(old.doc), _versions(new.doc)
    out += [f"{k} ({ov[k]} vs {nv[k]})" for k in ov if k in nv and ov[k] != nv[k]]
    return out


COMPARER = Comparer(rows=load_rows, change=median_change, text=median_text, unit="images/s (median [interval])",
                    unit_short="images/s", data_diffs=_data_diffs, context=_context)
