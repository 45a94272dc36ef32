"""The end-of-run table and ratios, as the reference report prints them.

Pure functions of the artifact, so `kitctl report` can reuse them later.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .engines import ENGINES


@dataclass(frozen=True)
class Row:
    engine: str
    precision: str
    max_batch: int | None
    peak_mib: float | None
    peak_source: str
    next_batch: int | None
    next_status: str | None
    result: str


def _label(engine: str) -> str:
    e = ENGINES.get(engine)
    return e.label if e else engine


def _peak(peaks: dict[str, Any] | None) -> tuple[float | None, str]:
    if not peaks:
        return None, ""
    if peaks.get("device_delta_mib") is not None:
        return peaks["device_delta_mib"], "device delta (NVML)"
    if peaks.get("framework_mib") is not None:
        return peaks["framework_mib"], "framework allocator"
    return None, ""


def maxbatch_rows(doc: dict[str, Any]) -> list[Row]:
    rows = []
    for c in doc["results"]:
        peak, src = _peak(c.get("peaks_at_max"))
        nxt = c.get("next_batch")
        next_status = None
        if nxt is not None:
            at = [t for t in c["trials"] if t["batch"] == nxt]
            next_status = at[-1]["status"] if at else None
        status = c.get("search_status")
        if status == "bounded_by_memory_failure":
            result = f"bounded by memory failure ({next_status} at {nxt:,})"
        elif status == "censored_at_max_batch":
            result = "censored at --max-batch (no failure found)"
        elif status == "no_passing_batch":
            result = "no passing batch"
        elif status == "invalid_non_memory_failure":
            result = f"invalid: {c.get('reason') or 'non-memory failure'}"
        else:
            result = c.get("state", "pending")
        rows.append(Row(c["engine"], c["precision"], c.get("max_batch"), peak, src, nxt, next_status, result))
    return rows


def ratios(rows: list[Row]) -> list[str]:
    """Ratio lines per precision: each engine against the first listed, and family bests
    against each other ("TensorFlow XLA vs PyTorch best", "PyTorch best vs OpenNN")."""
    lines: list[str] = []
    for precision in dict.fromkeys(r.precision for r in rows):
        valid = [r for r in rows if r.precision == precision and r.max_batch
                 and not r.result.startswith("invalid")]
        if len(valid) < 2:
            continue
        base = valid[0]
        for r in valid[1:]:
            lines.append(f"{_label(r.engine)} vs {_label(base.engine)} ({precision}): "
                         f"{r.max_batch / base.max_batch:.2f}× {'larger' if r.max_batch >= base.max_batch else 'smaller'} batch")
        fams: dict[str, Row] = {}
        for r in valid:
            fam = ENGINES[r.engine].family if r.engine in ENGINES else r.engine
            if fam not in fams or r.max_batch > fams[fam].max_batch:
                fams[fam] = r
        names = list(fams)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                ra, rb = fams[a], fams[b]
                hi, lo = (ra, rb) if ra.max_batch >= rb.max_batch else (rb, ra)
                fh = ENGINES[hi.engine].family if hi.engine in ENGINES else hi.engine
                fl = ENGINES[lo.engine].family if lo.engine in ENGINES else lo.engine
                lines.append(f"{fh} best vs {fl} best ({precision}): {hi.max_batch / lo.max_batch:.2f}× larger batch")
    return lines
