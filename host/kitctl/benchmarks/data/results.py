"""What dataload's and train-e2e's recorded results share, typed: a run's trial outcome (`DataRun`, the base of
both benchmarks' runs), the median of a cell's runs (`Summary`), a cell's steadiness (`Steadiness`) and what the
loader measurement records of its epochs and window (`Epoch`, `Window`). Each benchmark's own cells and runs are in
its results.py; core/typed.py turns them to and from the artifact's JSON, tests/test_typed_data.py checks them."""
from __future__ import annotations

from dataclasses import dataclass

from ...core.stats import summarize
from ...core.typed import Record, from_json


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
class Summary(Record):
    """The median of a cell's runs (core/stats.py's summarize, the schema's throughput_summary): n, median, min,
    max, std, the interval of the median and the level it reaches, the level asked for and how it was computed."""
    n: int
    median: float
    min: float  # noqa: A003  (the JSON key)
    max: float  # noqa: A003  (the JSON key)
    std: float | None = None
    ci_low: float | None
    ci_high: float | None
    ci_level: float | None
    ci_requested_level: float | None = None
    ci_method: str | None = None

    @classmethod
    def of(cls, values: list[float], level: float) -> Summary:
        """The summary of `values` at the interval level `level`, as summarize writes it."""
        return from_json(cls, summarize(values, level))


@dataclass(frozen=True, kw_only=True)
class Steadiness(Record):
    """Whether a cell's figure is steady (core/steadiness.py's cell_steadiness; None: no run measured its halves)
    and why not, the runs whose window halves differ, how many were judged, the tolerance and the interval's
    spread against its limit."""
    steady: bool | None = None
    why: str | None = None
    runs_not_steady: tuple[int, ...] = ()
    runs_judged: int | None = None
    tolerance: float | None = None
    interval_spread: float | None = None
    max_interval_spread: float | None = None


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
