"""The `protocol` max-batch search, driven by simulated capacity oracles (no GPU).

An oracle stands for a GPU with a capacity C: batch ≤ C passes, batch > C is a memory
failure. Scripted oracles add flakes (crash/timeout/error) at chosen batches.
"""
from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st  # the test extra

from kitctl.core.outcome import SearchStatus, Status
from kitctl.benchmarks.maxbatch.search.protocol import SearchConfig, protocol_strategy
from kitctl.benchmarks.maxbatch.search.strategies import run_search


def capacity(c: int, fail: Status = Status.OOM):
    def oracle(batch: int) -> Status:
        return Status.OK if batch <= c else fail
    return oracle


class Scripted:
    """Capacity C, except that the first `k` runs of some batches answer a scripted status."""

    def __init__(self, c: int, script: dict[int, list[Status]], fail: Status = Status.OOM) -> None:
        self.base = capacity(c, fail)
        self.script = {b: list(v) for b, v in script.items()}
        self.calls: list[int] = []

    def __call__(self, batch: int) -> Status:
        self.calls.append(batch)
        pending = self.script.get(batch)
        if pending:
            return pending.pop(0)
        return self.base(batch)


def verdicts(history):
    """Last status per batch."""
    return {b: s for b, s in history}


def assert_verified(d, history):
    """BOUNDED: a verified pass at max_batch and a verified memory failure at next_batch."""
    v = verdicts(history)
    assert v[d.max_batch] is Status.OK
    assert d.next_batch == d.max_batch + 1
    assert v[d.next_batch].is_memory_failure


def assert_unique_except_retries(history, retried=()):
    counts = Counter(b for b, _ in history)
    for b, n in counts.items():
        assert n == (2 if b in retried else 1), (b, n, history)


# -- monotone capacities ------------------------------------------------------------------

def test_reference_capacity_8704_bounded():
    cfg = SearchConfig(start_batch=128, max_batch=1 << 20)
    d, hist = run_search(capacity(8704), cfg)
    assert d.done and d.status is SearchStatus.BOUNDED
    assert (d.max_batch, d.next_batch) == (8704, 8705)
    assert_verified(d, hist)
    assert_unique_except_retries(hist)
    # Doubling 128 → 16384 (8 trials), then bisecting the 8192-wide gap (13 trials).
    doublings = [b for b, _ in hist[:8]]
    assert doublings == [128 * 2**i for i in range(8)]
    assert len(hist) == 8 + 13
    assert len(hist) <= 2 * math.ceil(math.log2(8705)) + 2


def test_start_batch_is_first_and_doubling_passes_are_in_order():
    d, hist = run_search(capacity(1000), SearchConfig(128, 1 << 20))
    assert hist[0] == (128, Status.OK)
    assert [b for b, _ in hist[:4]] == [128, 256, 512, 1024]
    assert hist[3][1] is Status.OOM
    assert (d.max_batch, d.next_batch, d.status) == (1000, 1001, SearchStatus.BOUNDED)


def test_boundary_at_one():
    d, hist = run_search(capacity(1), SearchConfig(128, 1 << 20))
    assert d.status is SearchStatus.BOUNDED
    assert (d.max_batch, d.next_batch) == (1, 2)
    assert_verified(d, hist)
    assert_unique_except_retries(hist)
    assert len(hist) == 8  # 128, 64, 32, 16, 8, 4, 2, 1


def test_capacity_zero_is_no_pass():
    d, hist = run_search(capacity(0), SearchConfig(128, 1 << 20))
    assert d.done and d.status is SearchStatus.NO_PASS
    assert d.max_batch is None
    assert d.next_batch == 1
    assert verdicts(hist)[1] is Status.OOM
    assert all(s is not Status.OK for _, s in hist)
    assert_unique_except_retries(hist)


def test_always_failing_is_no_pass_for_every_memory_status():
    for fail in (Status.OOM, Status.VRAM_CAP_EXCEEDED, Status.HOST_OOM_KILLED):
        d, hist = run_search(lambda b, f=fail: f, SearchConfig(16, 4096))
        assert d.status is SearchStatus.NO_PASS, fail
        assert d.max_batch is None and d.next_batch == 1
        assert [b for b, _ in hist] == [16, 8, 4, 2, 1]


def test_never_failing_is_censored_at_max_batch():
    cfg = SearchConfig(128, 4096)
    d, hist = run_search(capacity(10**9), cfg)
    assert d.status is SearchStatus.CENSORED
    assert d.max_batch == 4096 and d.next_batch is None
    assert [b for b, _ in hist] == [128, 256, 512, 1024, 2048, 4096]
    assert all(s is Status.OK for _, s in hist)


def test_capacity_exactly_max_batch_is_censored():
    d, hist = run_search(capacity(4096), SearchConfig(128, 4096))
    assert d.status is SearchStatus.CENSORED
    assert (d.max_batch, d.next_batch) == (4096, None)
    assert 4097 not in verdicts(hist)  # never runs above the cap


def test_capacity_one_below_max_batch_is_bounded_at_the_cap():
    d, hist = run_search(capacity(4095), SearchConfig(128, 4096))
    assert d.status is SearchStatus.BOUNDED
    assert (d.max_batch, d.next_batch) == (4095, 4096)
    assert_verified(d, hist)


def test_start_batch_fails_bisects_below_it():
    cfg = SearchConfig(128, 1 << 20)
    d, hist = run_search(capacity(100), cfg)
    assert hist[0] == (128, Status.OOM)
    assert all(1 <= b <= 127 for b, _ in hist[1:])
    assert (d.max_batch, d.next_batch, d.status) == (100, 101, SearchStatus.BOUNDED)
    assert_verified(d, hist)
    assert_unique_except_retries(hist)
    assert len(hist) <= 1 + math.ceil(math.log2(127)) + 1


def test_max_batch_not_a_power_of_two():
    cfg = SearchConfig(100, 300)
    d, hist = run_search(capacity(10**6), cfg)
    assert [b for b, _ in hist] == [100, 200, 300]
    assert (d.status, d.max_batch, d.next_batch) == (SearchStatus.CENSORED, 300, None)

    d, hist = run_search(capacity(250), cfg)
    assert [b for b, _ in hist[:3]] == [100, 200, 300]
    assert (d.status, d.max_batch, d.next_batch) == (SearchStatus.BOUNDED, 250, 251)
    assert max(b for b, _ in hist) == 300


def test_start_equals_max_batch():
    cfg = SearchConfig(64, 64)
    d, hist = run_search(capacity(1000), cfg)
    assert hist == [(64, Status.OK)]
    assert (d.status, d.max_batch, d.next_batch) == (SearchStatus.CENSORED, 64, None)

    d, hist = run_search(capacity(40), cfg)
    assert (d.status, d.max_batch, d.next_batch) == (SearchStatus.BOUNDED, 40, 41)
    assert max(b for b, _ in hist) == 64

    d, hist = run_search(capacity(0), cfg)
    assert (d.status, d.max_batch, d.next_batch) == (SearchStatus.NO_PASS, None, 1)


def test_start_and_max_one():
    d, hist = run_search(capacity(5), SearchConfig(1, 1))
    assert hist == [(1, Status.OK)]
    assert (d.status, d.max_batch, d.next_batch) == (SearchStatus.CENSORED, 1, None)
    d, hist = run_search(capacity(0), SearchConfig(1, 1))
    assert hist == [(1, Status.OOM)]
    assert d.status is SearchStatus.NO_PASS


@pytest.mark.parametrize("start,maxb", [(0, 10), (-3, 10), (10, 5)])
def test_search_config_rejects_bad_bounds(start, maxb):
    with pytest.raises(ValueError):
        SearchConfig(start, maxb)


# -- retries and invalid runs -------------------------------------------------------------

def test_crash_in_the_middle_is_retried_and_does_not_change_the_result():
    clean, clean_hist = run_search(capacity(8704), SearchConfig(128, 1 << 20))
    oracle = Scripted(8704, {1024: [Status.CRASH]})
    d, hist = run_search(oracle, SearchConfig(128, 1 << 20))
    i = hist.index((1024, Status.CRASH))
    assert hist[i + 1] == (1024, Status.OK)  # retried at once
    assert (d.status, d.max_batch, d.next_batch) == (clean.status, clean.max_batch, clean.next_batch)
    assert [t for t in hist if t != (1024, Status.CRASH)] == clean_hist
    assert_unique_except_retries(hist, retried={1024})


@pytest.mark.parametrize("flake", [Status.TIMEOUT, Status.ERROR, Status.CRASH])
def test_one_non_memory_failure_in_the_bisection_is_retried(flake):
    oracle = Scripted(8704, {8705: [flake]})
    d, hist = run_search(oracle, SearchConfig(128, 1 << 20))
    assert hist.count((8705, flake)) == 1
    assert (d.status, d.max_batch, d.next_batch) == (SearchStatus.BOUNDED, 8704, 8705)
    assert_verified(d, hist)
    assert_unique_except_retries(hist, retried={8705})


def test_same_batch_crashing_twice_is_invalid():
    oracle = Scripted(8704, {2048: [Status.CRASH, Status.CRASH]})
    d, hist = run_search(oracle, SearchConfig(128, 1 << 20))
    assert d.done and d.status is SearchStatus.INVALID
    assert d.max_batch is None and d.next_batch is None  # a crash is never a capacity
    assert hist[-2:] == [(2048, Status.CRASH), (2048, Status.CRASH)]
    assert "2048" in d.reason


@pytest.mark.parametrize("first,second", [(Status.TIMEOUT, Status.ERROR), (Status.ERROR, Status.TIMEOUT),
                                          (Status.TIMEOUT, Status.TIMEOUT), (Status.CRASH, Status.ERROR)])
def test_two_different_non_memory_failures_are_invalid(first, second):
    oracle = Scripted(8704, {512: [first, second]})
    d, hist = run_search(oracle, SearchConfig(128, 1 << 20))
    assert d.status is SearchStatus.INVALID
    assert hist[-2:] == [(512, first), (512, second)]
    assert d.max_batch is None


@pytest.mark.parametrize("mem", [Status.OOM, Status.VRAM_CAP_EXCEEDED, Status.HOST_OOM_KILLED])
def test_crash_then_memory_failure_on_retry_counts_as_memory_failure(mem):
    # The crash happens at the first batch above capacity: the retry's OOM bounds the search.
    oracle = Scripted(8704, {16384: [Status.CRASH, mem]})
    d, hist = run_search(oracle, SearchConfig(128, 1 << 20))
    assert (16384, Status.CRASH) in hist and (16384, mem) in hist
    assert (d.status, d.max_batch, d.next_batch) == (SearchStatus.BOUNDED, 8704, 8705)
    # …and when it happens at next_batch itself, that batch is the verified failure.
    oracle = Scripted(8704, {8705: [Status.CRASH, mem]})
    d, hist = run_search(oracle, SearchConfig(128, 1 << 20))
    assert (d.status, d.max_batch, d.next_batch) == (SearchStatus.BOUNDED, 8704, 8705)
    assert [s for b, s in hist if b == 8705] == [Status.CRASH, mem]


def test_crash_at_start_batch_then_ok_continues():
    oracle = Scripted(300, {128: [Status.TIMEOUT]})
    d, hist = run_search(oracle, SearchConfig(128, 1 << 20))
    assert hist[:2] == [(128, Status.TIMEOUT), (128, Status.OK)]
    assert (d.max_batch, d.next_batch) == (300, 301)


def test_nonfinite_is_invalid_without_retry():
    oracle = Scripted(8704, {1024: [Status.NONFINITE]})
    d, hist = run_search(oracle, SearchConfig(128, 1 << 20))
    assert d.status is SearchStatus.INVALID
    assert hist[-1] == (1024, Status.NONFINITE)
    assert oracle.calls.count(1024) == 1
    assert d.max_batch is None


def test_nonfinite_above_capacity_is_still_invalid():
    # A NaN loss is not a memory failure: it must never bound a capacity.
    d, hist = run_search(capacity(8704, fail=Status.NONFINITE), SearchConfig(128, 1 << 20))
    assert d.status is SearchStatus.INVALID
    assert d.max_batch is None


def test_crash_then_nonfinite_is_invalid():
    oracle = Scripted(8704, {256: [Status.CRASH, Status.NONFINITE]})
    d, hist = run_search(oracle, SearchConfig(128, 1 << 20))
    assert d.status is SearchStatus.INVALID


def test_retry_decision_is_for_the_flaked_batch():
    cfg = SearchConfig(128, 1 << 20)
    d = protocol_strategy([(128, Status.OK), (256, Status.ERROR)], cfg)
    assert not d.done and d.batch == 256
    d = protocol_strategy([(128, Status.OK), (256, Status.ERROR), (256, Status.OK)], cfg)
    assert not d.done and d.batch == 512


# -- resume by replay ---------------------------------------------------------------------

@pytest.mark.parametrize("c,script", [(8704, {}), (100, {}), (0, {}), (8704, {1024: [Status.CRASH]}),
                                      (5000, {8192: [Status.TIMEOUT, Status.OOM]})])
def test_resume_by_replay_reaches_the_same_decision(c, script):
    cfg = SearchConfig(128, 1 << 20)
    full_d, full_hist = run_search(Scripted(c, script), cfg)
    for k in range(len(full_hist) + 1):
        # A fresh oracle that has already "used" the scripted flakes seen in the prefix.
        remaining = {b: list(v) for b, v in script.items()}
        for b, s in full_hist[:k]:
            if remaining.get(b) and remaining[b][0] is s:
                remaining[b].pop(0)
        d, hist = run_search(Scripted(c, remaining), cfg, history=full_hist[:k])
        assert d == full_d, k
        assert hist == full_hist, k


def test_resume_halfway_with_a_plain_oracle():
    cfg = SearchConfig(128, 1 << 20)
    full_d, full_hist = run_search(capacity(8704), cfg)
    half = full_hist[: len(full_hist) // 2]
    d, hist = run_search(capacity(8704), cfg, history=half)
    assert (d.status, d.max_batch, d.next_batch) == (full_d.status, full_d.max_batch, full_d.next_batch)
    assert hist[: len(half)] == half
    assert hist == full_hist


def test_resume_of_a_finished_history_runs_nothing():
    cfg = SearchConfig(128, 1 << 20)
    full_d, full_hist = run_search(capacity(700), cfg)

    def boom(batch):
        raise AssertionError(f"ran {batch} after the search was done")

    d, hist = run_search(boom, cfg, history=full_hist)
    assert d == full_d and hist == full_hist


# -- property -----------------------------------------------------------------------------



@st.composite
def cases(draw):
    c = draw(st.integers(0, 5000))
    start = draw(st.integers(1, 600))
    maxb = draw(st.integers(start, 6000))
    return c, start, maxb


@settings(max_examples=400, deadline=None, database=None)
@given(cases())
def test_property_monotone_capacity(case):
    c, start, maxb = case
    cfg = SearchConfig(start, maxb)
    d, hist = run_search(capacity(c), cfg)
    v = verdicts(hist)
    assert d.done
    assert_unique_except_retries(hist)
    assert all(1 <= b <= maxb for b, _ in hist)
    assert d.status is not SearchStatus.INVALID
    # bounded ⇔ 1 ≤ C < max (C = 0 has no passing batch at all)
    assert (d.status is SearchStatus.BOUNDED) == (1 <= c < maxb)
    if c == 0:
        assert d.status is SearchStatus.NO_PASS and d.max_batch is None and d.next_batch == 1
        assert v[1] is Status.OOM
    else:
        assert d.max_batch == min(c, maxb)
        assert v[d.max_batch] is Status.OK
        if c < maxb:
            assert d.next_batch == d.max_batch + 1
            assert v[d.next_batch] is Status.OOM
        else:
            assert d.status is SearchStatus.CENSORED and d.next_batch is None
    # logarithmic: doublings up to the cap plus a bisection of the last gap
    assert len(hist) <= 2 * math.ceil(math.log2(maxb + 1)) + 3


@settings(max_examples=150, deadline=None, database=None)
@given(cases(), st.data())
def test_property_one_flake_never_changes_the_answer(case, data):
    c, start, maxb = case
    cfg = SearchConfig(start, maxb)
    clean_d, clean_hist = run_search(capacity(c), cfg)
    flaky_batch = data.draw(st.sampled_from([b for b, _ in clean_hist]))
    flake = data.draw(st.sampled_from([Status.CRASH, Status.TIMEOUT, Status.ERROR]))
    d, hist = run_search(Scripted(c, {flaky_batch: [flake]}), cfg)
    assert (d.status, d.max_batch, d.next_batch) == (clean_d.status, clean_d.max_batch, clean_d.next_batch)
    assert [t for t in hist if t != (flaky_batch, flake)] == clean_hist


def test_min_batch_floor_never_runs_below_it():
    """ResNet-50 at 32×32 cannot train at batch 1: the bisection stops at min_batch."""
    from kitctl.benchmarks.maxbatch.search.protocol import SearchConfig
    from kitctl.benchmarks.maxbatch.search.strategies import run_search
    from kitctl.core.outcome import SearchStatus, Status

    cfg = SearchConfig(start_batch=128, max_batch=4096, min_batch=2)
    d, hist = run_search(lambda b: Status.OOM, cfg)
    assert d.status is SearchStatus.NO_PASS and d.next_batch == 2
    assert min(b for b, _ in hist) == 2
    d, hist = run_search(lambda b: Status.OK if b <= 2 else Status.OOM, cfg)
    assert (d.status, d.max_batch, d.next_batch) == (SearchStatus.BOUNDED, 2, 3)
    with pytest.raises(ValueError):
        SearchConfig(start_batch=1, max_batch=8, min_batch=2)
