"""The machine-readable forms of `kitctl report`, `compare` and `results list` (--json, --csv): the same
figures the Markdown and the tables show, as typed JSON values beside their display text."""
from __future__ import annotations

import dataclasses
from typing import Any

from .. import benchmarks
from ..core.tables import Ratio
from .compare import Comparison, verdict
from .sources import Source


def _ratio(r: Ratio) -> dict[str, Any]:
    return {"precision": r.precision, "a": r.a, "b": r.b, "value": r.value, "what": r.what,
            "bound": r.bound or None, "reference_claim": r.claim, "text": r.text()}


def _result(src: Source) -> dict[str, Any]:
    b = benchmarks.get(src.benchmark)
    heads = b.cell_heads if b else ("Engine", "Precision")
    cells = []
    for key1, key2, text, figure in (b.cells(src) if b else []):
        cells.append({heads[0].lower(): key1, heads[1].lower(): key2, "text": text,
                      "value": figure[0] if figure else None, "lower_bound": bool(figure and figure[1])})
    return {"file": src.name, "path": str(src.path), "kind": src.kind, "benchmark": src.benchmark,
            "state": src.state, "created_utc": src.created, "gpu": src.gpu_name, "machine": src.machine_short,
            "unit": b.report_unit if b else None, "cells": cells,
            "ratios": [_ratio(r) for r in (b.report_ratios([src]) if b else [])]}


def report_document(sources: list[Source]) -> dict[str, Any]:
    """Every result's figures (each cell: its key, the text the report shows, the number, whether it is
    only a lower bound) and its own headline ratios."""
    return {"kind": "kitctl-report", "results": [_result(s) for s in sources]}


def report_rows(doc: dict[str, Any]) -> list[list[str]]:
    """One CSV row per result and cell: file, benchmark, state, GPU, the two keys, unit, text, value."""
    rows = [["file", "benchmark", "state", "gpu", "key", "key2", "unit", "text", "value", "lower_bound"]]
    for r in doc["results"]:
        for c in r["cells"]:
            k1, k2 = [v for k, v in c.items() if k not in ("text", "value", "lower_bound")][:2]
            rows.append([r["file"], r["benchmark"], r["state"], r["gpu"] or "", k1, k2, r["unit"] or "",
                         c["text"], "" if c["value"] is None else repr(c["value"]),
                         "true" if c["lower_bound"] else "false"])
    return rows


def compare_document(cmp: Comparison, old: Source, new: Source, exit_code: int) -> dict[str, Any]:
    """The comparison as the table and verdict say it, with the exit code the command returns."""
    return {"kind": "kitctl-compare", "old": old.name, "new": new.name, **dataclasses.asdict(cmp),
            "regressions": len(cmp.regressions), "not_comparable": cmp.not_comparable,
            "verdict": verdict(cmp), "exit_code": exit_code}
