"""The `guided` max-batch strategy: the measured peaks predict the boundary, the protocol's
rules verify it.

Every passing candidate's device-delta peak says how much of the budget B a batch used.
A line through the largest passes (slope = MiB per image) predicts the batch whose peak
reaches B; the search runs candidates near that prediction instead of doubling and
bisecting blindly. It is only a guide: peaks are noisy and not monotone in the batch
(cuDNN takes larger workspaces when memory is free), so

* every pass and every memory failure shrinks the interval [largest pass, smallest fail]
  exactly as in `protocol`, and the search ends only by protocol's rule (a verified pass at
  max_batch, a verified failure at next_batch = max_batch + 1, or censored at --max-batch);
* a prediction outside the open interval, or one that did not at least halve it over the
  last two candidates, is replaced by a bisection, so a wrong model costs at most about
  twice protocol's bisection, never the answer;
* a prediction is bracketed with a margin that grows while it keeps landing on one side
  (galloping), so a small error costs a few candidates, not a bisection of the whole gap.

Compiled peaks (a trial's `compiled_peak_mib`: the framework's ahead-of-time estimate of the
step's peak, XLA's for jax-xla). jax-xla preallocates its pool, so its device peak is flat and
says nothing; but XLA reports the compiled step's peak before it runs, for memory failures as
well as passes, and the outcome splits sharply on it (H200 bf16: every pass at or below
16.0848e9 bytes, every failure above). Where the candidates carry it, the prediction is the batch
at which the compiled peak reaches a threshold: the framework's budget (`compiled_target_mib`)
until a failure's compiled peak comes in under it, then the middle between the largest passing
and the smallest failing compiled peak; by false position between lo and hi (both compiled
peaks are known), or on the secant through the largest passes while growing. The compiled peak
is not monotone in the batch (rematerialisation changes with the size): the same brackets and
bisection fallback catch a wrong model. Without compiled peaks (every other engine) the device
peaks decide, exactly as before.

Retries (timeout/crash/error once), non-finite losses and min_batch are protocol's rules,
shared through `checked_verdicts`. A pure function of the history: resume replays it.
"""
from __future__ import annotations

import math
from typing import Sequence

from ....core.outcome import Status
from .protocol import Decision, SearchConfig, Trial, bounds, checked_verdicts, finished

# Growth without a failure yet: never more than this factor above the largest pass in one
# step (a prediction from small batches, where workspaces dominate, can be far off).
MAX_GROWTH = 8
# The first margin around a prediction inside the interval: 1/MARGIN_DIV of it (tuned on the
# committed H200 histories: 16..128 all keep the answers; 128 used the fewest candidates).
MARGIN_DIV = 128
CREEP_DIV = 256


def _peaks(history: Sequence[Trial]) -> dict[int, float]:
    """Device-delta peak of each batch whose last attempt passed and has a peak."""
    out: dict[int, float] = {}
    for t in history:
        b, status = t[0], t[1]
        peak = t[2] if len(t) > 2 else None
        if status is Status.OK and peak is not None:
            out[b] = float(peak)
        else:
            out.pop(b, None)
    return out


def slope(history: Sequence[Trial], cfg: SearchConfig, lo: int) -> float | None:
    """MiB per image near lo: the secant through the two largest passes at or below lo
    (the calibration point counts as one), or None when the data give no positive slope."""
    pts = _peaks(history)
    if cfg.anchor is not None and cfg.anchor[0] not in pts:
        pts[int(cfg.anchor[0])] = float(cfg.anchor[1])
    below = sorted(b for b in pts if b <= lo)
    if len(below) < 2:
        return None
    b2, b1 = below[-1], below[-2]
    s = (pts[b2] - pts[b1]) / (b2 - b1)
    if s > 0:
        return s
    if s == 0:
        # Flat: the peak does not depend on the batch (a preallocated pool, as jax-xla's): the
        # peaks say nothing about the boundary. Protocol's steps (H200, call 12: a line through
        # the calibration, measured without the pool, crept up 1 % at a time instead).
        return None
    # Non-monotone (a larger workspace at the smaller batch): the average cost per image
    # above the smallest point is still an upper bound on the marginal cost.
    b0 = below[0]
    s = (pts[b2] - pts[b0]) / (b2 - b0)
    return s if s > 0 else None


def predict(history: Sequence[Trial], cfg: SearchConfig, lo: int) -> float | None:
    """The batch at which the line through lo's peak reaches the target, or None."""
    if cfg.target_mib is None:
        return None
    peak = _peaks(history).get(lo)
    s = slope(history, cfg, lo)
    if peak is None or s is None:
        return None
    return lo + (cfg.target_mib - peak) / s


def compiled_points(history: Sequence[Trial]) -> dict[int, tuple[bool, float]]:
    """(passed?, compiled peak) of each batch whose last attempt passed or failed for memory and
    carries a compiled peak (the 4th element of a trial)."""
    out: dict[int, tuple[bool, float]] = {}
    for t in history:
        b, status = t[0], t[1]
        cp = t[3] if len(t) > 3 else None
        if cp is not None and (status is Status.OK or status.is_memory_failure):
            out[b] = (status is Status.OK, float(cp))
        else:
            out.pop(b, None)
    return out


def compiled_threshold(history: Sequence[Trial], cfg: SearchConfig) -> float | None:
    """The compiled peak the boundary sits at, as far as the history says, or None.

    The framework's budget while it is above every passing compiled peak and no failure came in
    under it (a failure above the budget only says its batch was too large). Once a failure's
    compiled peak is under the budget, the budget is known to be too high: the middle between the
    largest passing and the smallest failing compiled peak (a bisection of the threshold).
    None when nothing bounds it or a pass sits at or above a failure (no threshold fits)."""
    pts = compiled_points(history).values()
    lower = max((cp for ok, cp in pts if ok), default=None)
    fail = min((cp for ok, cp in pts if not ok), default=None)
    target = cfg.compiled_target_mib
    if lower is not None and fail is not None and fail <= lower:
        return None
    if target is not None and (lower is None or target > lower) and (fail is None or fail > target):
        return target
    if fail is None:
        return None
    return fail if lower is None else (lower + fail) / 2


def predict_compiled(history: Sequence[Trial], cfg: SearchConfig, lo: int, hi: int | None) -> float | None:
    """The batch at which the compiled peak reaches the threshold: false position between lo and
    hi, or (no failure above lo yet) the secant through the two largest passes at or below lo
    (one pass alone: the line through the origin, whose slope a fixed part only overestimates).
    None without compiled peaks at lo (and hi), or with a flat or falling secant."""
    pts = compiled_points(history)
    at_lo = pts.get(lo)
    thr = compiled_threshold(history, cfg)
    if at_lo is None or not at_lo[0] or thr is None:
        return None
    y0 = at_lo[1]
    if hi is not None:
        at_hi = pts.get(hi)
        if at_hi is None or at_hi[1] <= y0:
            return None
        return lo + (thr - y0) * (hi - lo) / (at_hi[1] - y0)
    below = sorted(b for b, (ok, _) in pts.items() if ok and b < lo)
    s = (y0 - pts[below[-1]][1]) / (lo - below[-1]) if below else y0 / lo
    return lo + (thr - y0) / s if s > 0 else None


def _trailing_side(history: Sequence[Trial], since: int) -> tuple[bool | None, int]:
    """(passed?, how many) of the run of same-verdict candidates ending the history, counting
    only candidates after index `since` (the bracket phase)."""
    side: bool | None = None
    n = 0
    for t in reversed(history[since:]):
        ok = t[1] is Status.OK
        if side is None:
            side = ok
        if ok != side:
            break
        n += 1
    return side, n


def _bracket_start(history: Sequence[Trial], cfg: SearchConfig) -> int:
    """Index of the first memory failure above every pass before it (growth ends there)."""
    best_pass = cfg.min_batch - 1
    for i, t in enumerate(history):
        if t[1] is Status.OK:
            best_pass = max(best_pass, t[0])
        elif t[1].is_memory_failure and t[0] > best_pass:
            return i
    return len(history)


def _halved(history: Sequence[Trial], cfg: SearchConfig) -> bool:
    """Did the last two candidates at least halve the interval they started from?"""
    from .protocol import _verdicts

    if len(history) < 2:
        return True
    before, _ = _verdicts(history[:-2])
    after, _ = _verdicts(history)
    lo0, hi0 = bounds(before, cfg)
    lo1, hi1 = bounds(after, cfg)
    if hi0 is None or hi1 is None:
        return True
    return (hi1 - lo1) * 2 <= (hi0 - lo0)


def guided_strategy(history: Sequence[Trial], cfg: SearchConfig) -> Decision:
    verdict, forced = checked_verdicts(history)
    if forced is not None:
        return forced
    if cfg.start_batch not in verdict:
        return Decision(batch=cfg.start_batch, reason="start batch")
    lo, hi = bounds(verdict, cfg)
    done = finished(lo, hi, cfg)
    if done is not None:
        return done
    floor = cfg.min_batch - 1
    pred = None
    if lo > floor:
        pred = predict_compiled(history, cfg, lo, hi)
        if pred is None:
            pred = predict(history, cfg, lo)
        if pred is not None and not math.isfinite(pred):
            pred = None  # a vanishing slope (denormal peaks): no prediction, protocol's steps

    if hi is None:  # growing: no failure above the largest pass yet
        cap = min(cfg.max_batch, MAX_GROWTH * lo)
        if pred is None:
            return Decision(batch=min(2 * lo, cfg.max_batch), reason="doubling (no prediction)")
        # Never creep: predictions that keep passing with short steps are underestimates
        # (peaks at small batches carry large workspaces), so after two short steps the
        # least step doubles with each further one, from lo/256: growth stays
        # logarithmic whatever the peaks say. The first short step is lo + 1, the check
        # that an exact prediction needs.
        n = _short_steps(history)
        least = lo + 1 if n < 2 else lo + max(1, (lo << min(n - 2, 8)) // CREEP_DIV)
        c = min(max(math.ceil(pred), least), cap)
        return Decision(batch=c, reason=f"predicted {pred:.0f}")

    mid = (lo + hi) // 2
    if pred is None or not lo < pred < hi or not _halved(history, cfg):
        why = "no prediction" if pred is None else (
            f"prediction {pred:.0f} outside ({lo}, {hi})" if not lo < pred < hi else "slow progress")
        return Decision(batch=mid, reason=f"bisect ({lo}, {hi}): {why}")
    p = pred
    # Bracket the prediction: step past it by a margin that doubles while the candidates keep
    # landing on the same side, so the true boundary is caught between a pass and a fail fast.
    side, n = _trailing_side(history, _bracket_start(history, cfg))
    # The first margin scales with the interval (a prediction is rarely better than ~1/128 of
    # it when peaks are noisy), then doubles while the candidates stay on one side.
    m0 = max(1, (hi - lo) // MARGIN_DIV)
    margin = m0 << max(0, n - 1) if side is not None else m0
    if side:  # last one passed: the boundary is above, aim a little past the prediction
        c = max(math.floor(p), lo + margin)
    else:  # last one failed: aim a little below
        c = min(math.floor(p), hi - margin)
    c = min(max(c, lo + 1), hi - 1)
    return Decision(batch=c, reason=f"predicted {pred:.0f} in ({lo}, {hi})")


def _short_steps(history: Sequence[Trial]) -> int:
    """How many of the passes that end the history (since the last failure) each stepped less
    than a quarter above the pass before them: creeping growth. Long steps do not reset the
    count, so the least step keeps doubling however the predictions alternate."""
    n = 0
    prev = None
    for t in reversed(history):
        if t[1] is not Status.OK:
            break
        if prev is not None and prev - t[0] < t[0] / 4:
            n += 1
        prev = t[0]
    return n
