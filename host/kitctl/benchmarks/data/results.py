"""What dataload's and train-e2e's recorded results share, typed: a run's trial outcome (`DataRun`, the base of
both benchmarks' runs) and what the
loader measurement records of its epochs and window (`Epoch`, `Window`). Each benchmark's own cells and runs are in
its results.py; core/typed.py turns them to and from the artifact's JSON, tests/test_typed_data.py checks them."""
from __future__ import annotations

from dataclasses import dataclass

from ...core.typed import Record


class CellEnd:
    """How a data cell ended, from its status, reason and runs (a mixin of dataload's and train-e2e's cells)."""
    status: str
    reason: str | None
    runs: tuple[DataRun, ...]

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def runs_ok(self) -> int:
        """How many of its runs passed."""
        return sum(1 for r in self.runs if r.ok)

    @property
    def failure(self) -> str | None:
        """Why the cell has no figure (its reason), or None where it did not fail (data/caveats.py)."""
        return (self.reason or self.status) if self.status == "failed" else None


@dataclass(frozen=True, kw_only=True)
class DataRun(Record):
    """A run's number and its trial's outcome (data/trial.py's TrialRun.to_json: status, exit code, seconds,
    error, stderr's tail); a benchmark's run adds its figures after these. kitctl always writes the run's number and
    status (the schema requires them); a hand-written input to a renderer may omit them."""
    run: int | None = None
    status: str | None = None
    exit_code: int | None = None
    elapsed_s: float | None = None
    error: str | None = None
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True, kw_only=True)
class Epoch(Record):
    """One epoch the loader measurement timed (trials/dataload/measure.py: Epoch.record): images, seconds and their
    rate, the first batch's wait, each batch's seconds, the batches short of the batch size ([index, images]), the
    page cache's resident fraction before it and the source's preparation (untimed). Earlier trials recorded
    fewer of these."""
    images: int | None = None
    seconds: float | None = None
    images_per_second: float | None = None
    first_batch_seconds: float | None = None
    batches: int | None = None
    batch_seconds: tuple[float, ...] | None = None
    short_batches: tuple[list[int], ...] | None = None
    resident_before: float | None = None
    prepare_seconds: float | None = None


@dataclass(frozen=True, kw_only=True)
class Window(Record):
    """A run's timed window under the window rule: the rule (its words and minimums, or the fixed epochs of a
    configuration from before it) and tolerance, then what the window held (epochs, batches, images, seconds) and
    its halves: each half's images/s, their change and whether it is within the tolerance (None: not measured)."""
    rule: str | None = None
    min_images: int | None = None
    min_seconds: float | None = None
    min_epochs: int | None = None
    fixed_epochs: int | None = None
    tolerance: float | None = None
    epochs: int | None = None
    batches: int | None = None
    images: int | None = None
    seconds: float | None = None
    first_half_ips: float | None = None
    second_half_ips: float | None = None
    halves_change: float | None = None
    steady: bool | None = None
