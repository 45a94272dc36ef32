"""Several candidates of one cell at once (speculative split), answers equal by construction.

A strategy (`strategies.STRATEGIES`) asks for one batch at a time. With k free GPUs the next
candidates it *could* ask for are known in advance: the one it asks for now, and for each
possible outcome of that one (pass / memory failure) the one it would ask for then, and so on —
a tree of the strategy's own decisions, expanded likeliest future first (`pass_probability`: a
guessed peak against the budget, else the boundary equally likely at any scale in the bracket, so
while doubling the chain of passes fills the lanes). For bisection, k = 3 runs two levels of
the tree at once (the midpoint and both quarter points); whichever way the midpoint goes, the
next candidate is already measured.

The answer never depends on the speculation: `replay` walks the sequential strategy over the
recorded trials, handing it a recorded trial of the batch it asks for (the earliest one not yet
used), until it stops or asks for a batch not recorded. The trials it used are "on the path";
the others were measured but are excluded from the answer. So the answer is what one GPU would
have found given the same measurements, even where pass/fail is not monotone in the batch, and
`--resume` is the same replay over the partial's trials, speculative ones included.

Hypotheses: a pending candidate either passes (status ok, its device-delta peak guessed on the
line through the nearest recorded passes: only `guided` reads it, and a wrong guess only costs
a useless speculative candidate) or fails with a memory failure ("oom"); where the recorded
candidates carry compiled peaks (jax-xla), both outcomes carry one guessed the same way from
the nearest recorded candidates that have one, passes and memory failures alike. A retry-class outcome
(timeout/crash/error) is not hypothesised: when one happens, the replay hands it to the strategy,
which asks for the same batch again, and that retry becomes the next candidate, as on one GPU.

Cancellation (`useless`): when a candidate ends, a running candidate of the same cell whose
batch no future of the search can ask for any more is cancelled (the runner kills it through
the runtime's interrupt, the Ctrl-C path, and records it under the cell's `cancelled`, never
among the trials: it is neither a pass nor a memory failure, and the replay never sees it).
"No future" is the hypothesis tree above, branching on every running candidate (pass / memory
failure) and on at most one candidate not started yet (`horizon`: a retry, or the step the
freed lane takes next), ending where the search is done or needs a second unstarted candidate.
E.g. 8,192 on the path and 16,384 speculated on its pass: 8,192 fails, the search bisects below
it, 16,384 is cancelled. A search that is done cancels everything still running. Cancelling
only ever costs a re-run (a cancelled batch the search asks for later is simply run again):
the answer stays the replay of the recorded trials.
Pure functions, no I/O.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ....core.outcome import Status
from .guided import compiled_points
from .protocol import Decision, SearchConfig, Trial
from .strategies import STRATEGIES

Decide = Callable[[Sequence[Trial], SearchConfig], Decision]

# Nodes of the hypothesis tree looked at per call: enough for k ≤ 8 at depth 3 with a few
# pending candidates, small enough to stay a few milliseconds.
MAX_NODES = 512
# pass_probability: a guessed peak this fraction of the budget under it is a pass with odds e:1; the floor
# keeps every branch possible.
PASS_SCALE = 0.1
PASS_FLOOR = 0.02


@dataclass(frozen=True)
class Replayed:
    """The sequential strategy walked over recorded trials."""

    decision: Decision  # done (the answer), or the batch it asks for that is not recorded yet
    path: tuple[int, ...]  # indices (into the recorded trials) it used, in the order it asked
    history: tuple[Trial, ...]  # those trials, in that order: what one GPU would have seen

    def on_path(self, n: int) -> list[bool]:
        """Per recorded trial (n of them): did the answer use it?"""
        used = set(self.path)
        return [i in used for i in range(n)]


def replay(decide: Decide, trials: Sequence[Trial], cfg: SearchConfig) -> Replayed:
    """Ask the strategy, hand it the earliest unused recorded trial of the batch it asks for,
    repeat. A batch's attempts are used in the order they were recorded, so a retry after a
    timeout gets the batch's next recorded attempt."""
    unused: dict[int, deque[int]] = {}
    for i, t in enumerate(trials):
        unused.setdefault(t[0], deque()).append(i)
    path: list[int] = []
    history: list[Trial] = []
    while True:
        d = decide(history, cfg)
        if d.done or not unused.get(d.batch):
            return Replayed(d, tuple(path), tuple(history))
        i = unused[d.batch].popleft()
        path.append(i)
        history.append(trials[i])


def _line_through_nearest(pts: dict[int, float], batch: int) -> float | None:
    """The value at `batch` on the line through the two recorded points nearest it, or None
    without two of them."""
    near = sorted(pts, key=lambda b: (abs(b - batch), b))[:2]
    if len(near) < 2:
        return None
    (b0, b1) = sorted(near)
    p0, p1 = pts[b0], pts[b1]
    return p0 + (p1 - p0) * (batch - b0) / (b1 - b0)


def guess_peak(history: Sequence[Trial], batch: int, cfg: SearchConfig) -> float | None:
    """A passing batch's device-delta peak as the line through the two nearest recorded passes
    (with peaks; the calibration anchor counts) predicts it, or None without two of them."""
    pts: dict[int, float] = {}
    if cfg.anchor is not None:
        pts[int(cfg.anchor[0])] = float(cfg.anchor[1])
    for t in history:
        if t[1] is Status.OK and len(t) > 2 and t[2] is not None:
            pts[t[0]] = float(t[2])
    return _line_through_nearest(pts, batch)


def guess_compiled(history: Sequence[Trial], batch: int) -> float | None:
    """A candidate's compiled peak as the line through the two nearest recorded candidates that
    report one (passes and memory failures: XLA compiles both), or None without two of them."""
    return _line_through_nearest({b: cp for b, (_, cp) in compiled_points(history).items()}, batch)


def hypotheses(history: Sequence[Trial], batch: int, cfg: SearchConfig) -> tuple[Trial, Trial]:
    """The two outcomes a pending candidate is assumed to have: pass, then memory failure."""
    cp = guess_compiled(history, batch)
    if cp is None:  # an engine without compiled peaks: the trials it always had
        return (batch, Status.OK, guess_peak(history, batch, cfg)), (batch, Status.OOM, None)
    return (batch, Status.OK, guess_peak(history, batch, cfg), cp), (batch, Status.OOM, None, cp)


def pass_probability(history: Sequence[Trial], batch: int, cfg: SearchConfig) -> float:
    """How likely a pending candidate is to pass, for ordering the hypothesis tree (never for the answer): its
    peak guessed as in `hypotheses` against the budget the search aims at, on a logistic curve of the relative
    margin (PASS_SCALE); without a budget or two points to guess from, by its place in the bracket
    (`_log_uniform`). Where candidates report compiled peaks, those against the framework's budget."""
    cp = guess_compiled(history, batch)
    if cp is not None and cfg.compiled_target_mib:
        peak, target = cp, float(cfg.compiled_target_mib)
    else:
        peak, target = guess_peak(history, batch, cfg), cfg.target_mib
    if peak is None or not target:
        return _log_uniform(history, batch, cfg)
    x = (float(target) - peak) / float(target) / PASS_SCALE
    return _floored(1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, x)))))


def _floored(p: float) -> float:
    return min(1.0 - PASS_FLOOR, max(PASS_FLOOR, p))


def _log_uniform(history: Sequence[Trial], batch: int, cfg: SearchConfig) -> float:
    """P(pass) with the boundary equally likely at any scale between the largest pass and the smallest memory
    failure (or --max-batch): while doubling, each next batch likely passes; mid-bisection, about even."""
    lo = max([t[0] for t in history if t[1] is Status.OK], default=cfg.min_batch)
    hi = min([t[0] for t in history if t[1] is Status.OOM], default=cfg.max_batch + 1)
    if not lo < batch < hi:
        return 0.5
    return _floored(math.log(hi / batch) / math.log(hi / lo))


def _leftover(trials: Sequence[Trial], root: Replayed) -> dict[int, list[Trial]]:
    """The recorded trials off the replayed path, per batch: real outcomes, not hypotheses."""
    used = set(root.path)
    leftover: dict[int, list[Trial]] = {}
    for i, t in enumerate(trials):
        if i not in used:
            leftover.setdefault(t[0], []).append(t)
    return leftover


def _advance(decide: Decide, hist: tuple[Trial, ...], taken: dict[int, int], leftover: dict[int, list[Trial]],
             cfg: SearchConfig) -> tuple[Decision, tuple[Trial, ...], dict[int, int]]:
    """Follow the strategy along one branch through batches measured already (speculatively), until it is
    done or asks for a batch with no measurement left: (that decision, the branch's history, leftovers used)."""
    while True:
        d = decide(hist, cfg)
        if d.done:
            return d, hist, taken
        n = taken.get(d.batch, 0)
        if n >= len(leftover.get(d.batch, ())):
            return d, hist, taken
        hist = hist + (leftover[d.batch][n],)
        taken = {**taken, d.batch: n + 1}


def candidates(decide: Decide, trials: Sequence[Trial], cfg: SearchConfig, k: int,
               pending: Iterable[int] = ()) -> list[int]:
    """Up to k batches to start now, best first, given the recorded trials and the batches
    already running (`pending`, one entry per running candidate).

    The first is the batch the sequential strategy asks for (unless it is already running);
    the rest are the batches it would ask for next under each outcome of the pending and
    chosen ones, breadth first. A batch is never chosen twice nor while it runs: its one
    outcome serves every branch that asks for it. Empty when the search is done or every
    branch waits on a running candidate within the node limit."""
    if k <= 0:
        return []
    root = replay(decide, trials, cfg)
    if root.decision.done:
        return []
    leftover = _leftover(trials, root)
    running = set(pending)
    chosen: list[int] = []
    # A node: how likely its future is (log), its order of creation (ties: breadth first), the history that
    # future would hand the strategy, how many leftover trials of each batch it has used, and the batches it
    # has hypothesised. The likeliest future is expanded first: a pass that the peaks make near certain
    # (a small batch far under the budget) puts the next candidates on its branch, not on its failure's.
    queue: list[tuple[float, int, tuple[Trial, ...], dict[int, int], frozenset[int]]] = [
        (-0.0, 0, root.history, {}, frozenset())]
    order = 1
    seen = 0
    while queue and len(chosen) < k and seen < MAX_NODES:
        neg_logp, _, hist, taken, assumed = heapq.heappop(queue)
        seen += 1
        d, hist, taken = _advance(decide, hist, taken, leftover, cfg)
        b = d.batch
        # Done, or asks again for a batch this branch assumed (a retry, not hypothesised): a leaf.
        if d.done or b in assumed:
            continue
        if b not in running and b not in chosen:
            chosen.append(b)
            if len(chosen) >= k:
                break
        ok = pass_probability(hist, b, cfg)
        for h, p in zip(hypotheses(hist, b, cfg), (ok, 1.0 - ok)):
            heapq.heappush(queue, (neg_logp - math.log(p), order, hist + (h,), taken, assumed | {b}))
            order += 1
    return chosen


def useless(decide: Decide, trials: Sequence[Trial], cfg: SearchConfig, running: Iterable[int],
            horizon: int = 1) -> set[int]:
    """The batches among `running` (the cell's candidates running now) that the search can no
    longer use: no branch of the hypothesis tree asks for them, where a branch hypothesises
    each running candidate's outcome and at most `horizon` candidates not started yet.
    Everything when the search is done; nothing when the tree is larger than MAX_NODES (then
    it cannot tell, and keeping a candidate is never wrong)."""
    pending = set(running)
    if not pending:
        return set()
    root = replay(decide, trials, cfg)
    if root.decision.done:
        return pending
    leftover = _leftover(trials, root)
    needed: set[int] = set()
    # A node: history, leftover trials used per batch, batches hypothesised, unstarted ones spent.
    queue: deque[tuple[tuple[Trial, ...], dict[int, int], frozenset[int], int]] = deque(
        [(root.history, {}, frozenset(), 0)])
    seen = 0
    while queue and needed != pending:
        if seen >= MAX_NODES:
            return set()
        hist, taken, assumed, spent = queue.popleft()
        seen += 1
        d, hist, taken = _advance(decide, hist, taken, leftover, cfg)
        if d.done:
            continue
        b = d.batch
        if b in pending and b not in assumed:
            needed.add(b)
        elif spent < horizon:  # not started (or a retry of one this branch assumed)
            spent += 1
        else:
            continue
        for h in hypotheses(hist, b, cfg):
            queue.append((hist + (h,), taken, assumed | {b}, spent))
    return pending - needed


@dataclass(frozen=True)
class Simulated:
    decision: Decision
    trials: tuple[Trial, ...]  # every candidate run, in the order recorded (rounds in order)
    path: tuple[int, ...]
    rounds: int  # rounds of up to k candidates at once: wall time ~ rounds × one candidate


def simulate(oracle: Callable[[int], Any], cfg: SearchConfig, strategy: str = "protocol",
             k: int = 2) -> Simulated:
    """Run a search with k GPUs in lock-step rounds against `oracle(batch) -> Status | (Status,
    peak)` (tests, replays of recorded runs): each round starts `candidates(k)` and records them."""
    decide = STRATEGIES[strategy]
    trials: list[Trial] = []
    rounds = 0
    while True:
        r = replay(decide, trials, cfg)
        if r.decision.done:
            return Simulated(r.decision, tuple(trials), r.path, rounds)
        batch = candidates(decide, trials, cfg, k)
        if not batch:  # pragma: no cover - the sequential next batch is always a candidate
            raise RuntimeError("no candidate while the search is not done")
        rounds += 1
        for b in batch:
            answer = oracle(b)
            trials.append((b, *answer) if isinstance(answer, tuple) else (b, answer))


@dataclass(frozen=True)
class Timed:
    """A search on k lanes in simulated time: each candidate takes `duration(batch)` seconds."""

    decision: Decision
    trials: tuple[Trial, ...]  # every candidate recorded, in the order they ended (cancelled ones not)
    path: tuple[int, ...]
    wall_s: float  # until the answer, with nothing of the cell left running
    busy_s: float  # lane-seconds spent on candidates, cancelled ones up to their cancellation
    cancelled: int


def simulate_lanes(oracle: Callable[[int], Any], cfg: SearchConfig, duration: Callable[[int], float],
                   strategy: str = "protocol", k: int = 2, cancel: bool = True) -> Timed:
    """The runner's loop in simulated time (tests, replays of recorded runs): a free lane takes
    `candidates(1, running)`; when a candidate ends it is recorded and, with `cancel`, the
    running candidates `useless` names are dropped at once (their lanes are free again)."""
    decide = STRATEGIES[strategy]
    trials: list[Trial] = []
    running: list[tuple[float, int, int, float]] = []  # (end, order, batch, start)
    now = busy = 0.0
    order = cancelled = 0
    while True:
        r = replay(decide, trials, cfg)
        if r.decision.done and not running:
            return Timed(r.decision, tuple(trials), r.path, now, busy, cancelled)
        while len(running) < k and not r.decision.done:
            c = candidates(decide, trials, cfg, 1, [x[2] for x in running])
            if not c:
                break
            running.append((now + float(duration(c[0])), order, c[0], now))
            order += 1
        if not running:  # pragma: no cover - the sequential next batch is always a candidate
            raise RuntimeError("no candidate while the search is not done")
        running.sort()
        end, _, b, start = running.pop(0)
        now, busy = end, busy + end - start
        answer = oracle(b)
        trials.append((b, *answer) if isinstance(answer, tuple) else (b, answer))
        if cancel:
            gone = useless(decide, trials, cfg, [x[2] for x in running])
            for x in [x for x in running if x[2] in gone]:
                running.remove(x)
                cancelled += 1
                busy += now - x[3]
