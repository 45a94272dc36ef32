"""Replay a recorded max-batch search under another strategy (no GPU).

The oracle is the artifact's own data: a batch the run tested answers its recorded last
status and device-delta peak (a slots run's: its per-process peak + the cell's gate offset, what `guided` read); a batch it never tested answers by the recorded boundary
(pass at or below max_batch, memory failure above), with a peak interpolated linearly
between the nearest recorded passes (None outside them), and a compiled peak (the trial's
`compiled_peak_mib`, for engines that report one: jax-xla) interpolated linearly between the
nearest recorded candidates that carry one, passes and memory failures alike, the calibration
included (None outside them). So the comparison uses only measured figures; interpolated peaks
are guidance for `guided`, never a verdict.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Any

from .search.guided import compiled_points
from ...core.outcome import Status
from ...core.recorded import view
from .search.protocol import Decision, SearchConfig
from .search.strategies import run_search
from .cells import cell_search, compiled_peak, slot_offset, trial_entry
from .config import MaxbatchRecorded
from .results import MaxbatchCell, MaxbatchTrial, cell_of, cells


@dataclass(frozen=True)
class Replay:
    engine: str
    precision: str
    recorded_trials: int
    recorded: tuple[int | None, int | None]
    trials: int
    answer: tuple[int | None, int | None]
    batches: tuple[int, ...]
    # Replayed, not measured: each candidate's recorded elapsed_s (of the nearest recorded batch
    # where the run never tested it), summed.
    elapsed_s: float = 0.0

    @property
    def same(self) -> bool:
        return self.answer == self.recorded


def _interp(points: list[tuple[int, float]], b: int) -> float | None:
    """The line through the recorded points either side of b (sorted by batch), None outside."""
    xs = [x for x, _ in points]
    i = bisect.bisect_left(xs, b)
    if i == 0 or i == len(xs):
        return None
    (b0, p0), (b1, p1) = points[i - 1], points[i]
    return p0 + (p1 - p0) * (b - b0) / (b1 - b0)


def oracle_of(cell: MaxbatchCell | dict[str, Any]):
    cell = cell_of(cell)
    last: dict[int, tuple[Status, float | None, float | None]] = {}
    off = slot_offset(cell)  # a slots run's candidate: its per-process peak + the gate's offset, as guided read it
    for t in cell.trials:
        last[t.batch] = (Status(t.status), trial_entry(t, off)[2], compiled_peak(t))
    passes = sorted((b, p) for b, (s, p, _) in last.items() if s is Status.OK and p is not None)
    # guided's own rule for which candidates carry a compiled peak (a pass or a memory failure)
    compiled = {b: cp for b, (_, cp) in compiled_points([(b, s, p, c) for b, (s, p, c) in last.items()]).items()}
    cal = cell.calibration
    if cal and cal.ok and compiled_peak(cal) is not None:
        compiled.setdefault(int(cal.batch), compiled_peak(cal))
    compiled_pts = sorted(compiled.items())
    boundary = cell.max_batch

    def oracle(b: int) -> tuple[Status, float | None, float | None]:
        if b in last:
            return last[b]
        if boundary is not None and b <= boundary:
            return Status.OK, _interp(passes, b), _interp(compiled_pts, b)
        return Status.OOM, None, _interp(compiled_pts, b)

    return oracle


def _without_compiled(oracle):
    return lambda b: oracle(b)[:2]


def search_config(doc: dict[str, Any], cell: MaxbatchCell | dict[str, Any]) -> SearchConfig:
    conf = view(MaxbatchRecorded, doc)
    budget = (doc.get("budget") or {}).get("budget_mib")
    base = SearchConfig(conf.start_batch, conf.max_batch, min_batch=conf.min_batch)
    # The run's own cell_search (anchor, the framework budget for compiled peaks), aimed at the
    # run's budget: artifacts from before `search_target_mib` was recorded replay the same way.
    return replace(cell_search(base, cell), target_mib=budget)


def replay(doc: dict[str, Any], strategy: str, compiled: bool = True) -> list[Replay]:
    """Each bounded cell's search replayed under `strategy`; compiled=False hides the compiled
    peaks from it (what `guided` did before it read them)."""
    out = []
    for cell in cells(doc):
        if not cell.done or cell.search_status != "bounded_by_memory_failure":
            continue
        oracle = oracle_of(cell)
        if not compiled:
            oracle = _without_compiled(oracle)
        d: Decision
        d, hist = run_search(oracle, search_config(doc, cell), strategy)
        el = {t.batch: float(t.elapsed_s) for t in cell.trials if t.elapsed_s is not None}
        secs = sum(el[min(el, key=lambda x: (abs(x - t[0]), x))] for t in hist) if el else 0.0
        # the recorded search's own candidates: a slots or speculative run also holds some off its path
        out.append(Replay(cell.engine, cell.precision, sum(1 for t in cell.trials if t.on_search_path),
                          (cell.max_batch, cell.next_batch), len(hist), (d.max_batch, d.next_batch),
                          tuple(t[0] for t in hist), secs))
    return out
