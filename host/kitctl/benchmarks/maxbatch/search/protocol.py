"""Max-batch search strategies, as pure functions of the trials so far.

A strategy looks at the history of (batch, status) pairs and says what to run next or that
it is done. Being a pure function of the history makes it testable without a GPU and makes
`--resume` trivial: replay the recorded trials and ask again.

`protocol` (docs/method.md, "Max batch"): run the start batch; if it fails bisect [1, start-1];
else double until the first failure or the cap, bisect the gap to resolution 1, and run
max+1 so the artifact holds a verified pass at max_batch and a verified fail at next_batch.
A timeout/crash/error is retried once; a second non-memory failure stops the engine.
"[1, start-1]" starts at the model's smallest trainable batch (`min_batch`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ....core.outcome import MEMORY_FAILURES, RETRYABLE, SearchStatus, Status


@dataclass(frozen=True)
class SearchConfig:
    start_batch: int = 128
    max_batch: int = 1 << 20
    # The smallest batch the model can train at all (ResNet-50 at 32×32 has 1×1 maps in
    # its last stage, where training-mode BatchNorm needs ≥ 2 samples): bisection never
    # goes below it, and a failure there means no passing batch.
    min_batch: int = 1
    # What the guided strategy aims its prediction at (the gate's budget B, device delta MiB)
    # and a free data point (the calibration candidate: batch, device-delta peak). The
    # protocol strategy ignores both; the guided one without them falls back to protocol steps.
    target_mib: float | None = None
    anchor: tuple[int, float] | None = None
    # What a framework's ahead-of-time peak estimate (a trial's `compiled_peak_mib`) must stay
    # under: the memory the framework was told it may use (the cell's framework budget). Only
    # `guided` reads it, and only for engines whose trials report that estimate.
    compiled_target_mib: float | None = None

    def __post_init__(self) -> None:
        if self.min_batch < 1:
            raise ValueError("min batch must be ≥ 1")
        if self.start_batch < self.min_batch:
            raise ValueError(f"start batch must be ≥ {self.min_batch}")
        if self.max_batch < self.start_batch:
            raise ValueError("max batch must be ≥ start batch")


@dataclass(frozen=True)
class Decision:
    """Either run `batch` (done=False) or stop with the summary fields set."""

    batch: int | None = None
    done: bool = False
    max_batch: int | None = None
    next_batch: int | None = None
    status: SearchStatus | None = None
    reason: str = ""


# (batch, status), (batch, status, device-delta peak MiB or None) or (batch, status, device-delta
# peak, compiled peak MiB or None: the framework's ahead-of-time estimate, known for memory
# failures too): only `guided` reads the peaks.
Trial = tuple  # tuple[int, Status] | tuple[int, Status, float | None] | tuple[int, Status, float | None, float | None]


def _verdicts(history: Sequence[Trial]) -> tuple[dict[int, bool], Decision | None]:
    """Collapse attempts per batch into pass/fail; handle the retry rule.

    Returns the pass/fail verdict per batch and, if the last batch needs a retry or the
    engine must stop, that decision.
    """
    verdict: dict[int, bool] = {}
    attempts: dict[int, list[Status]] = {}
    for batch, status, *_ in history:
        attempts.setdefault(batch, []).append(status)
    for batch, statuses in attempts.items():
        last = statuses[-1]
        if last is Status.OK:
            verdict[batch] = True
        elif last in MEMORY_FAILURES or last is Status.NONFINITE:
            # NONFINITE is a real failure of the candidate, not a flake: no retry, and it
            # is not a memory failure, so it can never bound a capacity (see below).
            verdict[batch] = False
        elif last in RETRYABLE:
            if len(statuses) < 2:
                return verdict, Decision(batch=batch, reason=f"retry after {last.value}")
            return verdict, Decision(
                done=True, status=SearchStatus.INVALID,
                reason=f"batch {batch}: {statuses[0].value} then {last.value}, not a memory failure")
        else:  # pragma: no cover - every status is handled above
            raise ValueError(last)
    return verdict, None


def checked_verdicts(history: Sequence[Trial]) -> tuple[dict[int, bool], Decision | None]:
    """`_verdicts` plus the non-finite rule: shared by every strategy, so retries and invalid
    engines are decided the same way whichever one searches."""
    verdict, forced = _verdicts(history)
    if forced is not None:
        return verdict, forced
    last_status = {t[0]: t[1] for t in history}
    for b, ok in verdict.items():
        if not ok and last_status[b] is Status.NONFINITE:
            return verdict, Decision(done=True, status=SearchStatus.INVALID,
                                     reason=f"batch {b}: non-finite loss, not a memory failure")
    return verdict, None


def bounds(verdict: dict[int, bool], cfg: SearchConfig) -> tuple[int, int | None]:
    """(largest verified pass or min_batch − 1, smallest verified fail above it or None)."""
    passes = [b for b, ok in verdict.items() if ok]
    lo = max(passes) if passes else cfg.min_batch - 1
    above = [b for b, ok in verdict.items() if not ok and b > lo]
    return lo, (min(above) if above else None)


def finished(lo: int, hi: int | None, cfg: SearchConfig) -> Decision | None:
    """The protocol's stopping rule, the only one any strategy may use: censored at the cap,
    or a verified pass at lo and a verified fail at hi == lo + 1."""
    floor = cfg.min_batch - 1
    if hi is None:
        if lo >= cfg.max_batch:
            return Decision(done=True, max_batch=lo, next_batch=None,
                            status=SearchStatus.CENSORED, reason=f"passed at --max-batch {cfg.max_batch}")
        return None
    if hi - lo > 1:
        return None
    if lo == floor:
        return Decision(done=True, max_batch=None, next_batch=hi, status=SearchStatus.NO_PASS,
                        reason=f"batch {hi} (the smallest the model trains at) fails")
    return Decision(done=True, max_batch=lo, next_batch=hi, status=SearchStatus.BOUNDED,
                    reason=f"pass at {lo}, memory failure at {hi}")


def protocol_strategy(history: Sequence[Trial], cfg: SearchConfig) -> Decision:
    verdict, forced = checked_verdicts(history)
    if forced is not None:
        return forced

    passes = sorted(b for b, ok in verdict.items() if ok)
    fails = sorted(b for b, ok in verdict.items() if not ok)
    start = cfg.start_batch
    if start not in verdict:
        return Decision(batch=start, reason="start batch")

    floor = cfg.min_batch - 1  # nothing below min_batch is ever run
    lo = max(passes) if passes else floor  # largest verified pass
    hi_candidates = [f for f in fails if f > lo]
    hi = min(hi_candidates) if hi_candidates else None  # smallest verified fail above it

    if hi is None:
        # Still growing: double until the first failure or the cap.
        if lo >= cfg.max_batch:
            return Decision(done=True, max_batch=lo, next_batch=None,
                            status=SearchStatus.CENSORED, reason=f"passed at --max-batch {cfg.max_batch}")
        return Decision(batch=min(2 * lo, cfg.max_batch), reason="doubling")
    if hi - lo > 1:
        return Decision(batch=(lo + hi) // 2, reason=f"bisect ({lo}, {hi})")
    # Gap closed to resolution 1: hi == lo + 1 is a verified fail, so max+1 is already run.
    if lo == floor:
        return Decision(done=True, max_batch=None, next_batch=hi, status=SearchStatus.NO_PASS,
                        reason=f"batch {hi} (the smallest the model trains at) fails")
    return Decision(done=True, max_batch=lo, next_batch=hi, status=SearchStatus.BOUNDED,
                    reason=f"pass at {lo}, memory failure at {hi}")


def _bisections(lo: int, hi: int) -> int:
    """Midpoints the protocol runs to close (lo, hi) to resolution 1."""
    return max(0, math.ceil(math.log2(hi - lo))) if hi - lo > 1 else 0


def _growth_left(lo: int, cfg: SearchConfig) -> int:
    """At most how many candidates a search still growing from a pass at `lo` runs: each doubling,
    and after the one that fails, the bisection of the gap it opens."""
    worst, steps, b = 0, 0, lo
    while b < cfg.max_batch:
        nxt = min(2 * b, cfg.max_batch)
        steps += 1
        worst = max(worst, steps + _bisections(b, nxt))
        b = nxt
    return max(worst, steps)


def candidates_left(history: Sequence[Trial], cfg: SearchConfig) -> int:
    """At most how many candidates the protocol search still runs (retries not counted): the
    progress line's "at most N left", never a promise that it runs that many."""
    verdict, forced = checked_verdicts(history)
    if forced is not None:
        return 0 if forced.done else 1
    floor = cfg.min_batch - 1
    if cfg.start_batch not in verdict:
        return 1 + max(_bisections(floor, cfg.start_batch), _growth_left(cfg.start_batch, cfg))
    lo, hi = bounds(verdict, cfg)
    if hi is None:
        return _growth_left(lo, cfg)
    return _bisections(lo, hi)
