"""dataload's recorded results, typed: a cell per loader × encoding × side × source × workers (`DataloadCell`) with
its runs (`DataloadRun`: the trial's outcome, then its figures; under the window rule its start-up, warm-up epoch,
window and steadiness too), their summary and, under the window rule, the start-up's summary and the cell's
steadiness (data/results.py). The runner writes them, the end table, the report, compare and --resume read them;
core/typed.py turns them to and from the artifact's JSON, tests/test_typed_data.py checks them against the JSON
Schema."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.typed import Record, from_json
from ...core.stats import Summary
from ...core.steadiness import Steadiness
from ..data.results import CellEnd, DataRun, Epoch, Window
from ..data.trial import TrialRun


@dataclass(frozen=True, kw_only=True)
class DataloadRun(DataRun):
    """One fresh loader run: after its trial's outcome (DataRun), the steady figure (None where the run failed) and
    what the trial measured: the window's images and seconds, the warm-up epoch's seconds, the timed epochs, the
    loader's implementation, a batch's shape, the cores and versions. Under the window rule (absent before it, and
    where the trial gave no result): the start-up and build apart from the figure, the warm-up epoch, the window,
    what each figure is, the rule's words, steadiness and the halves' change. A capped cold run (--read-mbps): the
    payload's rate over its fastest timed epoch."""
    images_per_second: float | None = None  # the schema requires it; a hand-written input may omit it
    images: int | None = None
    window_seconds: float | None = None
    warmup_seconds: float | None = None
    epochs: tuple[Epoch, ...] | None = None
    impl: str | None = None
    batch_shape: list[int] | None = None
    cpu_count: int | None = None
    affinity_cores: int | None = None  # the CPUs the trial's process could run on (its affinity, as it saw it)
    cpus: tuple[int, ...] | None = None  # --cpus: the CPUs the kit held the run to (absent: not held)
    versions: dict[str, Any] | None = None
    startup_seconds: float | None = None
    build_seconds: float | None = None
    warmup_epoch: Epoch | None = None
    window: Window | None = None
    figures: dict[str, Any] | None = None
    window_rule: str | None = None
    steady: bool | None = None
    halves_change: float | None = None
    payload_mb_per_s: float | None = None

    @property
    def figure(self) -> Any:
        """The figure the cell's median is of (data/recorded.py)."""
        return self.images_per_second

    @classmethod
    def of_trial(cls, run: int, tr: TrialRun) -> DataloadRun:
        """Run `run` of a cell from its trial: the outcome, then the figures its result line gave (`run_figures`)."""
        return from_json(cls, {"run": run, **tr.to_json(), **run_figures(tr)})


def run_figures(tr: TrialRun) -> dict[str, Any]:
    """What a run keeps of its trial's result line (the trial's keys): the figure (None unless the run passed with
    one) and what it measured, and, from a trial under the window rule, `window_figures`."""
    r = tr.result or {}
    ok = tr.status == "ok" and isinstance(r.get("images_per_second"), (int, float))
    return {"images_per_second": r.get("images_per_second") if ok else None, "images": r.get("images"),
            "window_seconds": r.get("window_seconds"), "warmup_seconds": r.get("warmup_seconds"),
            "epochs": r.get("epochs"), "impl": r.get("impl"), "batch_shape": r.get("batch_shape"),
            "cpu_count": r.get("cpu_count"), "affinity_cores": r.get("affinity_cores"), "versions": r.get("versions"),
            **window_figures(r)}


def window_figures(r: dict[str, Any]) -> dict[str, Any]:
    """What a run under the window rule adds: its start-up and build apart from the steady figure, the warm-up
    epoch, the window (rule, images, seconds, halves) and what each figure is; steady and halves_change at the
    top, as throughput's runs carry them. A trial before the rule recorded none of these: nothing is added."""
    w = r.get("window")
    if not isinstance(w, dict):
        return {}
    return {"startup_seconds": r.get("startup_seconds"), "build_seconds": r.get("build_seconds"),
            "warmup_epoch": r.get("warmup_epoch"), "window": w, "figures": r.get("figures"),
            "window_rule": w.get("rule"), "steady": w.get("steady") if isinstance(w.get("steady"), bool) else None,
            "halves_change": w.get("halves_change")}


# The keys a new cell records; under the window rule the start-up and steadiness come when it finishes.
PENDING_KEYS = ("loader", "encoding", "side", "source", "workers", "status", "reason", "runs", "summary")


@dataclass(frozen=True, kw_only=True)
class DataloadCell(CellEnd, Record):
    """One loader × encoding × side × source × workers: how it ended (pending, ok or failed, and why it failed),
    its runs and their summary (None unless ok); under the window rule, the median start-up over its runs and its
    steadiness (absent before the rule, and until the cell finishes)."""
    loader: str
    encoding: str
    side: int
    source: str
    workers: int
    status: str
    reason: str = ""
    runs: tuple[DataloadRun, ...]
    summary: Summary | None = None  # the schema requires it (null until ok); a hand-written input may omit it
    startup: Summary | None = None
    steadiness: Steadiness | None = None

    @classmethod
    def pending(cls, loader: str, encoding: str, side: int, source: str, workers: int) -> DataloadCell:
        """A cell before its first run, written with the keys a new cell has always had."""
        return cls(loader=loader, encoding=encoding, side=side, source=source, workers=workers, status="pending",
                   runs=(), recorded_keys=PENDING_KEYS)

    @property
    def key(self) -> tuple[str, str, int, str, int]:
        """The cell's place in the configuration's grid (DataloadConfig.cells)."""
        return self.loader, self.encoding, self.side, self.source, self.workers


def cells(doc: dict[str, Any]) -> list[DataloadCell]:
    """A dataload artifact's cells, typed (any recorded version)."""
    return [from_json(DataloadCell, c) for c in doc["results"]]
