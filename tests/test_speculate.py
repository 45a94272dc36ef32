"""Speculative split (benchmarks/maxbatch/search/speculate.py): several candidates of one cell at once, and the answer
is the sequential strategy's, by construction.

Simulated GPUs (no GPU needed): a pass/fail per batch that may be monotone or not, scripted
flakes (timeout/crash/error: the strategy retries), a cap, no passing batch at all; peaks for
`guided`. Each is run sequentially (`run_search`) and with k = 1..4 candidates at once, in
lock-step rounds and with lanes finishing in random order; the replayed path must be exactly
the sequential history. Then the committed H200 searches (results/*.json) with k = 2, 3.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from kitctl.benchmarks.maxbatch.replay import oracle_of, search_config
from kitctl.core.outcome import SearchStatus, Status
from kitctl.benchmarks.maxbatch.search.protocol import SearchConfig
from kitctl.benchmarks.maxbatch.search.strategies import STRATEGIES, run_search
from kitctl.benchmarks.maxbatch.search.speculate import candidates, replay, simulate, simulate_lanes, useless

RESULTS = Path(__file__).resolve().parents[1] / "results" / "reference"
RETRYABLE = [Status.TIMEOUT, Status.CRASH, Status.ERROR]


class Gpu:
    """A simulated GPU. `passes(b)` says whether batch b fits (any function: monotone or not);
    the first runs of a batch in `flakes` answer the scripted statuses instead. Peaks are a line
    with a per-batch wobble. Stateful per batch only (its n-th run answers the same whoever asks),
    which is what makes speculative and sequential runs comparable run for run."""

    def __init__(self, passes, flakes: dict[int, list[Status]] | None = None) -> None:
        self.passes = passes
        self.flakes = {b: list(v) for b, v in (flakes or {}).items()}
        self.runs: dict[int, int] = {}

    def __call__(self, b: int):
        n = self.runs.get(b, 0)
        self.runs[b] = n + 1
        script = self.flakes.get(b, [])
        if n < len(script):
            return script[n], None
        if self.passes(b):
            return Status.OK, 700.0 + 1.9 * b + (b * 7919 % 13)
        return Status.OOM, None


def same(d, ref) -> bool:
    return (d.done, d.status, d.max_batch, d.next_batch) == (ref.done, ref.status, ref.max_batch, ref.next_batch)


def async_lanes(make_gpu, cfg: SearchConfig, strategy: str, k: int, rng: random.Random, cancel: bool = False):
    """k lanes that finish in random order: a free lane takes `candidates(1, pending)`, as the
    runner does; with `cancel`, after each recorded trial the running candidates `useless` names
    are dropped unrecorded, as the runner kills them; returns (replay, every recorded trial)."""
    decide = STRATEGIES[strategy]
    gpu = make_gpu()
    trials: list[tuple] = []
    running: list[int] = []
    for _ in range(10_000):
        r = replay(decide, trials, cfg)
        if r.decision.done and not running:
            return r, trials
        while len(running) < k and not r.decision.done:
            [*c] = candidates(decide, trials, cfg, 1, running)
            if not c:
                break
            running.extend(c)
        # One running candidate (a random lane) finishes and is recorded.
        b = running.pop(rng.randrange(len(running)))
        trials.append((b, *gpu(b)))
        if cancel:
            gone = useless(decide, trials, cfg, running)
            running = [x for x in running if x not in gone]
    raise AssertionError("did not finish")


def check_all_k(make_gpu, cfg: SearchConfig, strategy: str, seed: int = 0):
    ref, hist = run_search(make_gpu(), cfg, strategy)
    for k in range(1, 5):
        sim = simulate(make_gpu(), cfg, strategy, k)
        assert same(sim.decision, ref), (k, sim.decision, ref)
        # Not only the answer: the trials on the path are the sequential history, in its order.
        assert [sim.trials[i] for i in sim.path] == hist
        if k == 1:
            assert list(sim.trials) == hist and sim.rounds == len(hist)
        else:
            assert sim.rounds <= len(hist)
        r, trials = async_lanes(make_gpu, cfg, strategy, k, random.Random(seed + k))
        assert same(r.decision, ref) and list(r.history) == hist
        # Cancelling useless candidates changes what is measured, never the answer or its path.
        r, trials = async_lanes(make_gpu, cfg, strategy, k, random.Random(seed + k), cancel=True)
        assert same(r.decision, ref) and list(r.history) == hist
        rng = random.Random(seed)
        secs = {}
        t = simulate_lanes(make_gpu(), cfg, lambda b: secs.setdefault(b, rng.uniform(1, 60)), strategy, k)
        assert same(t.decision, ref) and [t.trials[i] for i in t.path] == hist
    return ref, hist


@st.composite
def cases(draw):
    min_b = draw(st.integers(1, 4))
    start = draw(st.integers(min_b, 300))
    maxb = draw(st.integers(start, 5000))
    cap = draw(st.integers(0, 6000))
    # Non-monotone: some batches below the capacity fail, some above pass.
    holes = frozenset(draw(st.lists(st.integers(1, 6000), max_size=6)))
    monotone = draw(st.booleans())
    flakes = draw(st.dictionaries(st.integers(1, 6000), st.lists(st.sampled_from(RETRYABLE + [Status.OOM]),
                                                                   min_size=1, max_size=2), max_size=4))
    # Flakes at batches the search will surely ask for (the start, its doublings).
    for b in draw(st.lists(st.sampled_from([start, 2 * start, start // 2 or 1]), max_size=2)):
        flakes[b] = [draw(st.sampled_from(RETRYABLE))] + draw(st.lists(st.sampled_from(RETRYABLE + [Status.OK]),
                                                                       max_size=1))
    target = draw(st.one_of(st.none(), st.floats(500, 12000)))
    anchor = draw(st.one_of(st.none(), st.just((16, 730.4))))

    def passes(b):
        inside = b <= cap
        return inside if monotone else inside != (b in holes)
    cfg = SearchConfig(start, maxb, min_batch=min_b, target_mib=target, anchor=anchor)
    return cfg, passes, flakes


@settings(max_examples=250, deadline=None, database=None)
@given(cases(), st.sampled_from(["protocol", "guided"]), st.integers(0, 1000))
def test_any_k_gives_the_sequential_answer_and_path(case, strategy, seed):
    cfg, passes, flakes = case
    check_all_k(lambda: Gpu(passes, flakes), cfg, strategy, seed)


@pytest.mark.parametrize("strategy", ["protocol", "guided"])
@pytest.mark.parametrize("passes, flakes, status", [
    (lambda b: b <= 8704, {}, SearchStatus.BOUNDED),                      # monotone
    (lambda b: b <= 8704 and b not in (4224, 4225), {}, SearchStatus.BOUNDED),  # a hole below
    (lambda b: b <= 3000 or 5000 <= b <= 6000, {}, SearchStatus.BOUNDED),  # passes again above a failure
    (lambda b: True, {}, SearchStatus.CENSORED),                          # censored at --max-batch
    (lambda b: False, {}, SearchStatus.NO_PASS),                          # no passing batch
    (lambda b: b <= 700, {128: [Status.TIMEOUT], 256: [Status.CRASH]}, SearchStatus.BOUNDED),  # retried once
    (lambda b: b <= 700, {128: [Status.CRASH, Status.ERROR]}, SearchStatus.INVALID),  # twice: invalid
])
def test_named_cases(strategy, passes, flakes, status):
    cfg = SearchConfig(128, 20000, target_mib=16120.0, anchor=(16, 730.0))
    ref, _ = check_all_k(lambda: Gpu(passes, flakes), cfg, strategy)
    assert ref.status is status


def test_k3_runs_two_levels_of_bisection_at_once():
    """Between a pass at 100 and a failure at 200: the midpoint and both quarter points."""
    cfg = SearchConfig(100, 1000)
    trials = [(100, Status.OK), (200, Status.OOM)]
    decide = STRATEGIES["protocol"]
    # the midpoint first; then the likelier branch's quarter point: with the boundary equally likely at any
    # scale in [100, 200], 150 fails more often than it passes (log 200/150 < log 150/100), so 125 first
    assert candidates(decide, trials, cfg, 3) == [150, 125, 175]
    # 150 already running on another lane: the next free lanes take the quarter points.
    assert candidates(decide, trials, cfg, 2, pending=[150]) == [125, 175]
    # A speculative 175 recorded but 150 not yet: it is measured, not on the path.
    r = replay(decide, trials + [(175, Status.OK)], cfg)
    assert r.path == (0, 1) and r.decision.batch == 150
    assert candidates(decide, trials + [(175, Status.OK)], cfg, 1) == [150]
    # 150 failed: the path jumps back to 125 (not run yet), 175 stays off the path for good.
    r = replay(decide, trials + [(175, Status.OK), (150, Status.OOM)], cfg)
    assert r.path == (0, 1, 3) and r.decision.batch == 125


def test_a_timeout_is_retried_as_the_next_candidate():
    cfg = SearchConfig(100, 1000)
    decide = STRATEGIES["protocol"]
    trials = [(100, Status.OK), (200, Status.TIMEOUT)]
    assert candidates(decide, trials, cfg, 2)[0] == 200  # the retry first, as on one GPU


def test_a_failure_on_the_path_makes_the_speculation_above_it_useless():
    """Lane 0 runs 8,192 (on the path), lane 1 16,384 (speculating that 8,192 passes)."""
    cfg = SearchConfig(128, 100_000)
    decide = STRATEGIES["protocol"]
    trials = [(b, Status.OK) for b in (128, 256, 512, 1024, 2048, 4096)]
    assert candidates(decide, trials, cfg, 2) == [8192, 16384]
    assert useless(decide, trials, cfg, [8192, 16384]) == set()  # both still possible
    assert useless(decide, trials + [(8192, Status.OOM)], cfg, [16384]) == {16384}  # bisects below
    assert useless(decide, trials + [(8192, Status.OK)], cfg, [16384]) == set()  # the path's next
    # A timeout at 8,192: the retry comes first, then 16,384 may still be needed (one unstarted
    # candidate, the retry, is within the horizon).
    assert useless(decide, trials + [(8192, Status.TIMEOUT)], cfg, [16384]) == set()
    assert useless(decide, trials + [(8192, Status.TIMEOUT)], cfg, [16384], horizon=0) == {16384}


def test_quarter_points_after_the_midpoint_ends():
    cfg = SearchConfig(100, 1000)
    decide = STRATEGIES["protocol"]
    trials = [(100, Status.OK), (200, Status.OOM)]
    assert useless(decide, trials, cfg, [150, 175, 125]) == set()
    assert useless(decide, trials + [(150, Status.OK)], cfg, [175, 125]) == {125}
    assert useless(decide, trials + [(150, Status.OOM)], cfg, [175, 125]) == {175}


def test_a_done_search_cancels_everything_still_running():
    cfg = SearchConfig(4, 4)
    assert useless(STRATEGIES["protocol"], [(4, Status.OK)], cfg, [2, 3]) == {2, 3}
    assert useless(STRATEGIES["protocol"], [(4, Status.OK)], cfg, []) == set()


def test_done_means_no_candidates():
    cfg = SearchConfig(4, 4)
    assert candidates(STRATEGIES["protocol"], [(4, Status.OK)], cfg, 3) == []


# -- the committed H200 searches ------------------------------------------------------------

def committed_cells():
    for f in sorted(RESULTS.glob("maxbatch-*.json")):
        if f.name.endswith(".partial.json"):
            continue
        doc = json.loads(f.read_text())
        for c in doc["results"]:
            if c.get("state") == "done" and c.get("search_status") == "bounded_by_memory_failure":
                yield f.name, doc, c


def speedups(ks=(2, 3)) -> list[tuple[str, str, str, str, int, dict[int, int]]]:
    rows = []
    for name, doc, cell in committed_cells():
        cfg = search_config(doc, cell)
        for strategy in ("protocol", "guided"):
            ref, hist = run_search(oracle_of(cell), cfg, strategy)
            rounds = {}
            for k in ks:
                sim = simulate(oracle_of(cell), cfg, strategy, k)
                assert same(sim.decision, ref), (name, cell["engine"], strategy, k)
                assert [sim.trials[i] for i in sim.path] == hist
                assert (sim.decision.max_batch, sim.decision.next_batch) == (cell["max_batch"], cell["next_batch"])
                rounds[k] = sim.rounds
            rows.append((name, cell["engine"], cell["precision"], strategy, len(hist), rounds))
    return rows


def test_committed_h200_searches_same_answers_in_fewer_rounds(capsys):
    rows = speedups()
    assert len(rows) >= 10
    seq = {s: sum(r[4] for r in rows if r[3] == s) for s in ("protocol", "guided")}
    for s in ("protocol", "guided"):
        for k in (2, 3):
            rounds = sum(r[5][k] for r in rows if r[3] == s)
            assert rounds <= seq[s]
            with capsys.disabled():
                print(f"\n{s} k={k}: {seq[s]} sequential candidates, {rounds} rounds, "
                      f"expected speed-up {seq[s] / rounds:.2f}x")
    # Protocol's doubling and bisection: two levels at k = 3, so well under the sequential count.
    assert sum(r[5][3] for r in rows if r[3] == "protocol") < 0.75 * seq["protocol"]


def test_committed_h200_searches_cancellation_saves_wall_time_in_replay(capsys):
    """Replayed, not measured: each committed cell's search on k lanes in simulated time, a
    candidate taking the recorded elapsed_s of its batch (of the nearest recorded batch when the
    run never tested it), with and without cancelling useless candidates."""
    total = {}
    for name, doc, cell in committed_cells():
        el = {t["batch"]: t["elapsed_s"] for t in cell["trials"] if t.get("elapsed_s") is not None}
        cfg = search_config(doc, cell)
        for strategy in ("protocol", "guided"):
            ref, _ = run_search(oracle_of(cell), cfg, strategy)
            for k in (2, 3):
                for cancel in (False, True):
                    t = simulate_lanes(oracle_of(cell), cfg, lambda b: el[min(el, key=lambda x: (abs(x - b), x))],
                                       strategy, k, cancel)
                    assert same(t.decision, ref), (name, cell["engine"], strategy, k, cancel)
                    w, c, n = total.get((strategy, k, cancel), (0.0, 0, 0))
                    total[strategy, k, cancel] = (w + t.wall_s, c + t.cancelled, n + 1)
    for strategy in ("protocol", "guided"):
        for k in (2, 3):
            (w0, _, n), (w1, c, _) = total[strategy, k, False], total[strategy, k, True]
            assert w1 <= w0
            with capsys.disabled():
                print(f"\nREPLAY (recorded elapsed_s, not measured) {strategy} k={k}, {n} committed searches: "
                      f"{w0:.0f} s without cancelling, {w1:.0f} s with ({c} candidates cancelled), "
                      f"{100 * (w0 - w1) / w0:.0f} % less wall time")


def test_while_doubling_the_lanes_take_the_chain_of_passes():
    """No failure yet and no peaks but the calibration's: each next doubling is likelier to pass than not (the
    boundary equally likely at any scale up to --max-batch), so 8 lanes run 8 doublings at once instead of
    spending half of them on bisections below batches that will probably pass."""
    cfg = SearchConfig(128, 1 << 20, target_mib=16120.0, anchor=(16, 1300.8))
    assert candidates(STRATEGIES["protocol"], [], cfg, 8) == [128 << i for i in range(8)]


def test_the_committed_h200_fp32_search_takes_five_rounds_of_eight():
    """PyTorch eager fp32 at 16,376 MiB (the committed one-slot search, 21 candidates): 7 rounds of 8 on the
    H200 with the breadth-first tree (results/reference/reports/h200-slots.md), 5 when the likeliest future
    is expanded first; the same answer and path."""
    (cell_doc,) = [(doc, c) for name, doc, c in committed_cells()
                   if name == "maxbatch-resnet50-synthetic-20261129T195932Z.json" and c["precision"] == "fp32"]
    doc, cell = cell_doc
    cfg = search_config(doc, cell)
    ref, hist = run_search(oracle_of(cell), cfg, "protocol")
    sim = simulate(oracle_of(cell), cfg, "protocol", 8)
    assert same(sim.decision, ref) and [sim.trials[i] for i in sim.path] == hist
    assert (len(hist), sim.rounds) == (21, 5)


def test_pass_probability_reads_the_guessed_peak_against_the_budget():
    """With two measured passes the line through their peaks decides: a batch guessed far under the budget is a
    near-certain pass, one guessed at the budget even, one far over a near-certain failure (floored, never 0)."""
    from kitctl.benchmarks.maxbatch.search.speculate import PASS_FLOOR, pass_probability

    cfg = SearchConfig(100, 1 << 20, target_mib=10000.0)
    hist = [(1000, Status.OK, 2000.0), (2000, Status.OK, 3000.0)]  # 1 MiB per image, 1,000 MiB fixed
    assert pass_probability(hist, 3000, cfg) == 1 - PASS_FLOOR  # guessed 4,000: 60 % under
    assert abs(pass_probability(hist, 9000, cfg) - 0.5) < 1e-9  # guessed 10,000: at the budget
    assert pass_probability(hist, 20000, cfg) == PASS_FLOOR  # guessed 21,000
    # Without a budget (CPU) or peaks: the boundary equally likely at any scale in [largest pass, smallest failure]
    plain = SearchConfig(100, 1000)
    assert abs(pass_probability([(100, Status.OK), (400, Status.OOM)], 200, plain) - 0.5) < 1e-9
