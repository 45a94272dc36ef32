"""What a resumed data partial's runs are trusted for: a partial is a file anyone can edit, so a resume re-derives
every cell's figure from its runs (never keeps a recorded summary) and keeps only runs whose figure is what their
own window says (images ÷ seconds)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ...core.typed import updated

# The trial computes the figure as images / seconds; JSON round-trips a float exactly, so only an edit differs.
REL_TOLERANCE = 1e-9


@dataclass(frozen=True)
class DataRecorded:
    """The "configuration" keys dataload and train-e2e both record, as an artifact recorded them (each value as
    written, a missing key its default: kitctl.core.recorded); each benchmark's view adds its own. The window keys
    are absent before the window rule."""
    corpus: Any = None
    data_dir: Any = None
    loaders: Any = ()
    runs: Any = None
    batch: Any = None
    limit: Any = None
    timeout_s: Any = None
    python: Any = None
    runtime: Any = None
    image_tag: Any = None
    ci_level: Any = None
    window_images: Any = None
    window_seconds: Any = None
    steady_tolerance: Any = None
    window_rule: Any = None
    pipeline: Any = ""

    @property
    def has_window_rule(self) -> bool:
        """Whether the run was measured under the window rule (artifacts from before it keep their table)."""
        return isinstance(self.window_rule, str)


class MeasuredRun(Protocol):
    """A data benchmark's typed run (dataload's DataloadRun, train-e2e's TrainE2ERun): its status, the figure its
    cell's median is of, and the window that figure was measured over."""
    @property
    def status(self) -> str | None: ...
    @property
    def figure(self) -> Any: ...
    @property
    def images(self) -> Any: ...
    @property
    def window_seconds(self) -> Any: ...


Run = TypeVar("Run", bound=MeasuredRun)


def consistent(run: MeasuredRun) -> bool:
    """A passing run whose figure is a finite positive number and, where the run recorded its window's images
    and seconds, equals images ÷ seconds."""
    ips, images, seconds = run.figure, run.images, run.window_seconds
    if run.status != "ok" or isinstance(ips, bool) or not isinstance(ips, (int, float)):
        return False
    if not math.isfinite(ips) or ips <= 0:
        return False
    if isinstance(images, (int, float)) and isinstance(seconds, (int, float)) and seconds > 0:
        return math.isclose(ips, images / seconds, rel_tol=REL_TOLERANCE)
    return True


def kept_runs(runs: tuple[Run, ...]) -> tuple[Run, ...]:
    """The runs a resumed cell keeps (passing and consistent), numbered again from 1 in their order."""
    return tuple(updated(r, run=i) for i, r in enumerate((r for r in runs if consistent(r)), 1))


def measured(runs: tuple[MeasuredRun, ...], wanted: int) -> bool:
    """Whether a cell holds all `wanted` runs, each with its figure (a resumed cell then needs no dataset: a
    problem with one is not this cell's failure)."""
    return len(runs) >= wanted and all(r.figure is not None for r in runs)
