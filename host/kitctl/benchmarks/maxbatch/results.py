"""maxbatch's recorded results, typed: a cell per engine × precision (`MaxbatchCell`, the schema's `$defs/cell`) with
its candidates (`MaxbatchTrial`, `$defs/trial`: what core/outcome.py's TrialOutcome writes, and the lane, slot and
path the run adds), their memory peaks (`Peaks`, `$defs/peaks`: core/outcome.py's MemoryPeaks as written), the
calibrated overhead, the --slots gate and each candidate's slot time. The run writes them, the table, report,
replay and resume read them; core/typed.py turns them to and from the artifact's JSON, and
tests/test_typed_maxbatch.py checks them against the JSON Schema.

Values are kept as recorded (a status is its string, never converted): readers decide. A field absent from an
older record reads as the default the reports used for it before (`.get(key, default)`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.outcome import TrialOutcome
from ...core.typed import Record, from_json, to_json



@dataclass(frozen=True)
class Peaks(Record):
    """One candidate's memory peaks, MiB (None: not measured), as core/outcome.py's MemoryPeaks writes them."""
    device_delta_mib: float | None = None
    process_mib: float | None = None
    framework_mib: float | None = None
    host_rss_mib: float | None = None
    baseline_mib: float | None = None
    samples: int = 0
    sample_rate_hz: float | None = None
    release_s: float | None = None  # absent in artifacts from before the gate timed the card's release


NO_PEAKS = Peaks()  # what a candidate without recorded peaks reads as


@dataclass(frozen=True)
class SlotTime(Record):
    """--slots: the slot that ran a candidate and when (wall clock, seconds since the epoch)."""
    index: int
    started_unix_s: float
    ended_unix_s: float


@dataclass(frozen=True)
class LaneGpu(Record):
    """--gpus: the GPU of this host a candidate ran on."""
    index: int | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class MaxbatchTrial(Record):
    """One candidate (or a cell's calibration): TrialOutcome's fields in its order, then where it ran (a cluster
    node, a GPU of --gpus, a --slots slot), whether the search's path uses it, and why a cancelled one was killed."""
    batch: int
    status: str  # a core.outcome.Status value, as recorded
    killed_by: str = "none"  # a core.outcome.KilledBy value
    exit_code: int | None = None
    signal: int | None = None
    elapsed_s: float | None = None
    result: dict[str, Any] | None = None  # the trial's KIT-RESULT object (engines add their own keys)
    error: str | None = None
    stderr_tail: str = ""
    peaks: Peaks | None = None
    runtime: str | None = None
    container_id: str | None = None
    attempt: int = 1
    node: dict[str, Any] | None = None  # --cluster: the runtime's own account of the node (host, node id, GPU)
    gpu: LaneGpu | None = None
    slot: SlotTime | None = None
    # Absent in runs from before speculation (every candidate then on the path): see `on_search_path`.
    on_path: bool | None = None
    cancelled_because: str | None = None  # only in a cell's `cancelled`

    @classmethod
    def of_outcome(cls, out: TrialOutcome) -> MaxbatchTrial:
        """A candidate as the run records it: its outcome's JSON, every key of it."""
        return from_json(cls, out.to_json())

    def outcome(self) -> TrialOutcome:
        """The candidate as the search and the budget see it (core/outcome.py)."""
        return TrialOutcome.from_json(to_json(self))

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def on_search_path(self) -> bool:
        """The sequential search's path uses it (true where not recorded)."""
        return True if self.on_path is None else self.on_path

    @property
    def measured(self) -> Peaks:
        """Its peaks (all None where none were recorded)."""
        return self.peaks or NO_PEAKS


@dataclass(frozen=True)
class CellOverhead(Record):
    """The calibration's overhead (core/budget.py's Overhead as written): device delta − framework peak."""
    batch: int
    device_delta_peak_mib: float
    framework_peak_mib: float | None
    overhead_mib: float
    note: str = ""


@dataclass(frozen=True)
class SlotGate(Record):
    """--slots on a GPU: the cell's per-slot gate (offset from its calibration, threshold B − offset; both None
    where the cell ran one candidate at a time, the note says why)."""
    offset_mib: float | None
    threshold_mib: float | None
    note: str


@dataclass(frozen=True, kw_only=True)
class MaxbatchCell(Record):
    """One engine × precision: its state, calibration and overhead, the search's answer (status, max and next
    batch, why, the peaks at max), its candidates in the order they ended, and what later runs add: the budget the
    search aimed at, the --slots gate, the speculative candidates cancelled unfinished, the --slots wall time."""
    engine: str
    precision: str
    state: str  # pending | running | done
    calibration: MaxbatchTrial | None = None
    overhead: CellOverhead | None = None
    framework_budget_mib: int | None = None
    max_batch: int | None = None
    next_batch: int | None = None
    search_status: str | None = None  # a core.outcome.SearchStatus value; None until the search ends
    reason: str = ""
    peaks_at_max: Peaks | None = None
    trials: tuple[MaxbatchTrial, ...]
    search_target_mib: float | None = None  # B, recorded since the search aims at it (int as recorded)
    slot_gate: SlotGate | None = None
    cancelled: tuple[MaxbatchTrial, ...] = ()
    slots_wall_s: float | None = None

    @classmethod
    def new(cls, engine: str, precision: str) -> MaxbatchCell:
        """A cell before its first candidate, with the keys a new cell is written with (the later ones are
        written once the run sets them)."""
        return cls(engine=engine, precision=precision, state="pending", trials=(), recorded_keys=NEW_CELL_KEYS)

    @property
    def key(self) -> tuple[str, str]:
        return self.engine, self.precision

    @property
    def done(self) -> bool:
        return self.state == "done"


NEW_CELL_KEYS = ("engine", "precision", "state", "calibration", "overhead", "framework_budget_mib", "max_batch",
                 "next_batch", "search_status", "reason", "peaks_at_max", "trials")


def cell_of(c: MaxbatchCell | dict[str, Any]) -> MaxbatchCell:
    """A cell, typed: as it is, or read from its recorded JSON."""
    return c if isinstance(c, MaxbatchCell) else from_json(MaxbatchCell, c)


def trial_of(t: MaxbatchTrial | dict[str, Any]) -> MaxbatchTrial:
    """A candidate, typed: as it is, or read from its recorded JSON."""
    return t if isinstance(t, MaxbatchTrial) else from_json(MaxbatchTrial, t)


def peaks_of(p: Peaks | dict[str, Any] | None) -> Peaks | None:
    """Peaks, typed: as they are, or read from their recorded JSON (None stays None)."""
    return p if p is None or isinstance(p, Peaks) else from_json(Peaks, p)


def cells(doc: dict[str, Any]) -> list[MaxbatchCell]:
    """A maxbatch artifact's cells, typed (any recorded version)."""
    return [from_json(MaxbatchCell, c) for c in doc["results"]]
