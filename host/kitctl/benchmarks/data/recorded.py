"""What a resumed data partial's runs are trusted for: a partial is a file anyone can edit, so a resume re-derives
every cell's figure from its runs (never keeps a recorded summary) and keeps only runs whose figure is what their
own window says (images ÷ seconds)."""
from __future__ import annotations

import math
from typing import Any

# The trial computes the figure as images / seconds; JSON round-trips a float exactly, so only an edit differs.
REL_TOLERANCE = 1e-9


def consistent(run: dict[str, Any], figure: str) -> bool:
    """A passing run whose `figure` is a finite positive number and, where the run recorded its window's images
    and seconds, equals images ÷ seconds."""
    ips, images, seconds = run.get(figure), run.get("images"), run.get("window_seconds")
    if run.get("status") != "ok" or isinstance(ips, bool) or not isinstance(ips, (int, float)):
        return False
    if not math.isfinite(ips) or ips <= 0:
        return False
    if isinstance(images, (int, float)) and isinstance(seconds, (int, float)) and seconds > 0:
        return math.isclose(ips, images / seconds, rel_tol=REL_TOLERANCE)
    return True


def kept_runs(runs: list[dict[str, Any]], figure: str) -> list[dict[str, Any]]:
    """The runs a resumed cell keeps (passing and consistent), numbered again from 1 in their order."""
    return [{**r, "run": i} for i, r in enumerate((r for r in runs if consistent(r, figure)), 1)]


def measured(runs: list[dict[str, Any]], figure: str, wanted: int) -> bool:
    """Whether a cell holds all `wanted` runs, each with its figure (a resumed cell then needs no dataset: a
    problem with one is not this cell's failure)."""
    return len(runs) >= wanted and all(r.get(figure) is not None for r in runs)
