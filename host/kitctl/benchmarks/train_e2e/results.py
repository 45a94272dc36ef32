"""train-e2e's recorded results, typed: a cell per model × loader (`TrainE2ECell`) with its runs (`TrainE2ERun`: the
trial's outcome, then its figures: training images/s, the loader alone's, the busy fraction, the per-step losses,
a GPU loader's decode check, the loader-alone measurement), their summaries (`TrainE2ESummary`) and, under the
window rule, the loader alone's steadiness (data/results.py). The runner writes them, the end table, the report,
compare and --resume read them; core/typed.py turns them to and from the artifact's JSON, tests/test_typed_data.py
checks them against the JSON Schema."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.typed import Record, from_json, record_fields
from ...core.stats import Summary
from ...core.steadiness import Steadiness
from ..data.results import CellEnd, DataRun, Epoch, Window
from ..data.trial import TrialRun


@dataclass(frozen=True, kw_only=True)
class LoaderAlone(Record):
    """The loader alone, measured before training as dataload measures it (trials/dataload/measure.py: source
    ram): its start-up, warm-up epoch, timed epochs, the window's images, seconds and images/s, a batch's shape,
    the window (rule and halves), what each figure is, and the loader's build time."""
    startup_seconds: float | None = None
    warmup_seconds: float | None = None
    warmup_epoch: Epoch | None = None
    epochs: tuple[Epoch, ...] | None = None
    images: int | None = None
    window_seconds: float | None = None
    images_per_second: float | None = None
    batch_shape: list[int] | None = None
    window: Window | None = None
    figures: dict[str, Any] | None = None
    build_seconds: float | None = None


@dataclass(frozen=True, kw_only=True)
class StepLosses(Record):
    """Every step's loss, warm-up and timed (a non-finite one as None)."""
    warmup: tuple[float | None, ...] | None = None
    timed: tuple[float | None, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class NonfiniteLoss(Record):
    """Where the loss first went non-finite: the phase (warmup, timed), the step (from 1) of how many, and the
    value's repr."""
    phase: str
    step: int
    of: int | None = None
    value: str | None = None


@dataclass(frozen=True, kw_only=True)
class ProbeCount(Record):
    """Of a probe's iterations: how many were handed a freed block, and how many found it overwritten."""
    handed_a_freed_block: int | None = None
    corrupted: int | None = None


@dataclass(frozen=True, kw_only=True)
class DecodeProbe(Record):
    """The hazard probe of pytorch/vision#9606: decode_jpeg on the caller's stream and on the loader's own path, over
    `iterations`."""
    caller_stream: ProbeCount | None = None
    loader: ProbeCount | None = None
    iterations: int | None = None


@dataclass(frozen=True, kw_only=True)
class DecodeCheck(Record):
    """A GPU loader's self-check: its GPU decode of some images against a CPU decode (max and mean |Δ|, shapes that
    differ), the probe, and why the check did not run to the end (None: it did)."""
    images: int | None = None
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    shape_mismatches: int | None = None
    probe: DecodeProbe | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class TrainE2ERun(DataRun):
    """One fresh training run: after its trial's outcome (DataRun), what the trial measured (FIGURES, each as the
    trial's result line named it; training images/s None where the run failed). Later trials recorded more of these
    (the losses, the decode check, the loader alone): absent in older runs."""
    train_images_per_second: float | None = None  # the schema requires it; a hand-written input may omit it
    loader_images_per_second: float | None = None
    busy_fraction: float | None = None
    data_wait_fraction: float | None = None
    window_seconds: float | None = None
    warmup_seconds: float | None = None
    images: int | None = None
    steps: int | None = None
    data_wait_seconds: float | None = None
    loader_images: int | None = None
    loader_seconds: float | None = None
    final_loss: float | None = None
    loss_after_warmup: float | None = None
    precision: str | None = None
    device: str | None = None
    parameters: int | None = None
    impl: str | None = None
    layout: str | None = None
    busy_basis: str | None = None
    resident_before: float | None = None
    drained_batches: int | None = None
    epoch_starts_in_window: int | None = None
    loader_epoch_starts: int | None = None
    cpu_count: int | None = None
    versions: dict[str, Any] | None = None
    step_losses: StepLosses | None = None
    first_nonfinite_loss: NonfiniteLoss | None = None
    decode_check: DecodeCheck | None = None
    loader_alone: LoaderAlone | None = None
    loader_startup_seconds: float | None = None

    @property
    def figure(self) -> Any:
        """The figure the cell's median is of (data/recorded.py)."""
        return self.train_images_per_second

    @classmethod
    def of_trial(cls, run: int, tr: TrialRun) -> TrainE2ERun:
        """Run `run` of a cell from its trial: the outcome, then each of FIGURES from its result line (absent: None),
        training images/s None unless the run passed with it."""
        r = tr.result or {}
        ok = tr.status == "ok" and isinstance(r.get("train_images_per_second"), (int, float))
        figures = {k: r.get(k) for k in FIGURES}
        if not ok:
            figures["train_images_per_second"] = None
        return from_json(cls, {"run": run, **tr.to_json(), **figures})


# What a run keeps of its trial's result line, in the artifact's order: the run's fields after the outcome's.
FIGURES = tuple(f.name for f in record_fields(TrainE2ERun)
                if f.name not in {g.name for g in record_fields(DataRun)})


@dataclass(frozen=True, kw_only=True)
class TrainE2ESummary(Record):
    """A finished cell's medians: training images/s, the busy fraction, the loader alone's images/s (None: no run
    measured it, as synthetic's) and, under the window rule, its start-up (absent where no run recorded one)."""
    train: Summary
    busy: Summary
    loader: Summary | None = None  # the schema requires it (null for synthetic); a hand-written input may omit it
    loader_startup: Summary | None = None


# The keys a new cell records; under the window rule the loader's steadiness comes when it finishes.
PENDING_KEYS = ("model", "loader", "status", "reason", "runs", "summary")


@dataclass(frozen=True, kw_only=True)
class TrainE2ECell(CellEnd, Record):
    """One model × loader: how it ended (pending, ok or failed, and why it failed), its runs and their summaries
    (None unless ok); under the window rule, the loader alone's steadiness over the runs (absent before the rule,
    for synthetic, and until the cell finishes)."""
    model: str
    loader: str
    status: str
    reason: str = ""
    runs: tuple[TrainE2ERun, ...]
    summary: TrainE2ESummary | None = None  # the schema requires it (null until ok); a hand-written input may omit it
    loader_steadiness: Steadiness | None = None

    @classmethod
    def pending(cls, model: str, loader: str) -> TrainE2ECell:
        """A cell before its first run, written with the keys a new cell has always had."""
        return cls(model=model, loader=loader, status="pending", runs=(), recorded_keys=PENDING_KEYS)

    @property
    def key(self) -> tuple[str, str]:
        """The cell's place in the configuration's grid (TrainE2EConfig.cells)."""
        return self.model, self.loader


def cells(doc: dict[str, Any]) -> list[TrainE2ECell]:
    """A train-e2e artifact's cells, typed (any recorded version)."""
    return [from_json(TrainE2ECell, c) for c in doc["results"]]
