"""throughput's recorded results, typed: a cell per engine × precision (`ThroughputCell`) with its runs
(`ThroughputRun`: the run's figures, its window's steadiness, energy and readings, then the trial's outcome), its
summary over the runs (core/stats.py's `Summary`), energy (`CellEnergy`) and steadiness (core/steadiness.py's
`Steadiness`). The runner
writes them, the end table, the report and --resume read them; core/typed.py turns them to and from the artifact's
JSON, and tests/test_typed_throughput.py checks them against the JSON Schema.

What is shared with max batch stays as recorded, plain JSON: a run's `peaks` and `result` (the trial's own
object), a cell's `trials` and `peak_vram`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.stats import Summary
from ...core.steadiness import Steadiness
from ...core.typed import Record, from_json

@dataclass(frozen=True, kw_only=True)
class WindowReadings(Record):
    """The host's NVML readings a run keeps around its window (energy.window_readings): the readings' wall-clock
    times and, per reading, the energy counter, SM clock, temperature and power (None where NVML gave none)."""
    t_unix: tuple[float, ...] = ()
    energy_mj: tuple[float | None, ...] = ()
    sm_clock_mhz: tuple[float | None, ...] = ()
    temperature_c: tuple[float | None, ...] = ()
    power_w: tuple[float | None, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RunEnergy(Record):
    """A run's window from the energy counter (energy.window_energy): joules, per image, mean watts; SM clock
    (mean, min, max) and temperature (mean, max) over the readings inside it; the readings, the counter, and why a
    figure is missing (None when none is)."""
    joules: float | None
    joules_per_image: float | None
    mean_watts: float | None
    sm_clock_mhz: dict[str, float] | None = None
    temperature_c: dict[str, float] | None = None
    readings: int
    counter: str | None = None
    note: str | None = None


@dataclass(frozen=True, kw_only=True)
class ThroughputRun(Record):
    """One fresh run: its figures from the trial's result (images, window, warm-up, final loss, images/s: None
    where the run failed), its window's rule, steadiness and energy with the readings they come from (absent in
    runs from before the window rule), then the trial's outcome as core/outcome.py writes it (absent in the
    earliest artifacts)."""
    run: int
    images: int | None = None
    window_seconds: float | None = None
    warmup_seconds: float | None = None
    loss_final: Any = None
    images_per_second: float | None
    window_rule: str | None = None
    steady: bool | None = None
    halves_change: float | None = None
    energy: RunEnergy | None = None
    telemetry: WindowReadings | None = None
    # TrialOutcome.to_json()
    batch: int | None = None
    status: str | None = None
    killed_by: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    elapsed_s: float | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    stderr_tail: str = ""
    peaks: dict[str, Any] | None = None
    runtime: str | None = None
    container_id: str | None = None
    attempt: int | None = None


@dataclass(frozen=True, kw_only=True)
class CellEnergy(Record):
    """A cell's energy: medians over its runs of joules per image and mean watts, and how many runs it had."""
    joules_per_image: float | None
    mean_watts: float | None
    runs: int | None = None


# The keys a new cell records; energy and steadiness come when it finishes (see `updated`).
PENDING_KEYS = ("engine", "precision", "batch", "state", "status", "reason", "runs", "summary", "warmup_seconds",
                "peak_vram", "trials")


@dataclass(frozen=True, kw_only=True)
class ThroughputCell(Record):
    """One engine × precision: where its runs are (state: pending, running, done), how they ended (status ok or
    failed, None until done; the reason of a failure), the runs, their summary and the median warm-up (None unless
    ok), the peak VRAM over the runs, the trials (none: kept as recorded), the energy and steadiness (absent in a
    cell recorded before the window rule, or not yet finished)."""
    engine: str
    precision: str
    batch: int | None = None
    state: str
    status: str | None = None
    reason: str = ""
    runs: tuple[ThroughputRun, ...]
    summary: Summary | None = None
    warmup_seconds: float | None = None
    peak_vram: dict[str, Any] | None = None
    trials: tuple[dict[str, Any], ...] = ()
    energy: CellEnergy | None = None
    steadiness: Steadiness | None = None

    @classmethod
    def pending(cls, engine: str, precision: str, batch: int) -> ThroughputCell:
        """A cell before its first run, written with the keys a new cell has always had."""
        return cls(engine=engine, precision=precision, batch=batch, state="pending", runs=(),
                   recorded_keys=PENDING_KEYS)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def cells(doc: dict[str, Any]) -> list[ThroughputCell]:
    """A throughput artifact's cells, typed (any recorded version)."""
    return [from_json(ThroughputCell, c) for c in doc["results"]]
