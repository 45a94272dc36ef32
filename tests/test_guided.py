"""The `guided` max-batch search: simulated GPUs (a capacity plus a peak model, clean, noisy,
non-monotone or plainly wrong) and the real histories of every committed max-batch artifact.

Whatever the peaks say, guided must end exactly like `protocol`: a verified pass at max_batch,
a verified memory failure at next_batch = max_batch + 1 (or censored / no pass), same answer.
"""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from hypothesis import example, given, settings, strategies as st  # the test extra

from kitctl.benchmarks.maxbatch.replay import replay
from kitctl.benchmarks.maxbatch.search.guided import guided_strategy, predict
from kitctl.core.outcome import SearchStatus, Status
from kitctl.benchmarks.maxbatch.search.protocol import SearchConfig
from kitctl.benchmarks.maxbatch.search.strategies import run_search

RESULTS = Path(__file__).resolve().parents[1] / "results" / "reference"
B = 16120.0  # the gate budget of the committed 16,376 MiB runs


def gpu(c: int, peak, fail: Status = Status.OOM):
    """A simulated GPU: batch ≤ c passes with device-delta peak `peak(batch)`, above fails."""
    def oracle(batch: int):
        return (Status.OK, peak(batch)) if batch <= c else (fail, None)
    return oracle


def linear(overhead: float, per_image: float):
    return lambda b: overhead + per_image * b


def check(d, hist, c, cfg):
    """Ends like protocol, with protocol's answer."""
    ref, _ = run_search(lambda b: Status.OK if b <= c else Status.OOM, cfg, "protocol")
    assert (d.status, d.max_batch, d.next_batch) == (ref.status, ref.max_batch, ref.next_batch)
    last = {t[0]: t[1] for t in hist}
    if d.status is SearchStatus.BOUNDED:
        assert last[d.max_batch] is Status.OK and last[d.next_batch].is_memory_failure
        assert d.next_batch == d.max_batch + 1
    assert all(cfg.min_batch <= t[0] <= cfg.max_batch for t in hist)
    assert len({t[0] for t in hist}) == len(hist)  # no batch run twice without a flake


def test_exact_linear_peaks_find_the_boundary_in_a_few_candidates():
    # OpenNN's peaks grow by a steady 2.07 MiB per image: the line predicts the boundary.
    per = 2.07
    c = math.floor((B - 1008.8) / per)
    cfg = SearchConfig(4096, 1 << 20, target_mib=B, anchor=(16, 1008.8 + 16 * per))
    d, hist = run_search(gpu(c, linear(1008.8, per)), cfg, "guided")
    check(d, hist, c, cfg)
    assert len(hist) <= 4, hist
    proto, phist = run_search(gpu(c, linear(1008.8, per)), cfg, "protocol")
    assert len(phist) > 10


def test_without_a_target_it_is_a_plain_doubling_and_bisection():
    cfg = SearchConfig(128, 1 << 20)  # --device cpu: no budget, no peaks
    d, hist = run_search(gpu(8704, lambda b: None), cfg, "guided")
    check(d, hist, 8704, cfg)
    d2, phist = run_search(gpu(8704, lambda b: None), cfg, "protocol")
    assert len(hist) <= len(phist) + 2


@pytest.mark.parametrize("wrong", [
    lambda b: 1.0 + 0.001 * b,         # peaks say "nearly free": predicts a boundary far above
    lambda b: B - 1.0,                 # peaks sit at the budget: predicts lo + 1 every time
    lambda b: 1000.0 + 50.0 * b,       # peaks far above what would fit (cannot be, yet a model may say so)
    lambda b: 1300.0 + (9.7 * b if b < 4096 else 40000 - 1.0 * b),  # decreasing: negative secants
])
@pytest.mark.parametrize("c", [1, 2, 127, 128, 129, 4095, 8832, 83968, 99999])
def test_a_wrong_prediction_costs_candidates_never_the_answer(wrong, c):
    cfg = SearchConfig(128, 1 << 17, target_mib=B, anchor=(16, 1300.0))
    d, hist = run_search(gpu(c, wrong), cfg, "guided")
    check(d, hist, c, cfg)
    # Bounded: at most about three times protocol's logarithmic count.
    assert len(hist) <= 3 * (2 * math.ceil(math.log2(cfg.max_batch + 1)) + 3), hist


def test_non_monotone_peaks_like_cudnn_workspaces():
    # The whole-card eager run: 16,384 peaked above 32,768 (a larger workspace when free).
    rng = random.Random(7)
    for trial in range(200):
        c = rng.randint(2, 200000)
        start = rng.choice([1, 16, 128, 1000, 4096])
        noise = {}

        def peak(b):
            if b not in noise:
                noise[b] = rng.uniform(0, 0.5) * B  # a workspace of up to half the budget
            return min(B, 1300.0 + 1.7 * b * B / (1.7 * c + 1300.0) + noise[b])
        cfg = SearchConfig(start, 1 << 18, target_mib=B, anchor=(16, 1300.0))
        d, hist = run_search(gpu(c, peak), cfg, "guided")
        check(d, hist, c, cfg)


def test_flakes_and_nonfinite_follow_protocol_rules():
    cfg = SearchConfig(128, 1 << 20, target_mib=B, anchor=(16, 1008.8))
    script = {"n": 0}

    def flaky(b):
        script["n"] += 1
        if script["n"] == 3:
            return Status.CRASH, None
        return gpu(7285, linear(1008.8, 2.07))(b)
    d, hist = run_search(flaky, cfg, "guided")
    assert hist[3][0] == hist[2][0]  # the crashed batch is retried at once
    assert (d.max_batch, d.next_batch) == (7285, 7286)
    d, hist = run_search(lambda b: (Status.NONFINITE, None) if b > 500 else (Status.OK, 1300.0 + b), cfg, "guided")
    assert d.status is SearchStatus.INVALID and "non-finite" in d.reason
    twice = lambda b: (Status.TIMEOUT, None) if b == 128 else (Status.OK, 1.0)  # noqa: E731
    d, hist = run_search(twice, cfg, "guided")
    assert d.status is SearchStatus.INVALID and [t[0] for t in hist] == [128, 128]


def test_resume_by_replay_reaches_the_same_decision():
    cfg = SearchConfig(128, 1 << 20, target_mib=B, anchor=(16, 1300.0))
    o = gpu(8832, lambda b: min(B - 5, 1300.0 + 1.9 * b))
    d, hist = run_search(o, cfg, "guided")
    for k in range(len(hist)):
        d2, hist2 = run_search(o, cfg, "guided", history=hist[:k])
        assert hist2 == hist and d2 == d


def test_prediction_is_the_line_through_the_largest_passes():
    cfg = SearchConfig(128, 1 << 20, target_mib=1000.0, anchor=(16, 116.0))
    hist = [(128, Status.OK, 228.0), (256, Status.OK, 356.0)]  # 1 MiB per image, 100 overhead
    assert predict(hist, cfg, 256) == pytest.approx(900.0)
    assert predict([(128, Status.OK, None)], cfg, 128) is None  # no peak at lo


# -- the real histories: every committed max-batch artifact ---------------------------------

def _bounded(path: Path) -> bool:
    """A search that found a boundary (a search ended otherwise, e.g. jax-xla bf16's invalid one whose doubled
    candidate timed out twice, has none to replay)."""
    return any(c.get("state") == "done" and c.get("search_status") == "bounded_by_memory_failure"
               for c in json.loads(path.read_text())["results"])


ARTIFACTS = sorted(p for p in RESULTS.glob("maxbatch-*.json")
                   if not p.name.endswith(".partial.json") and _bounded(p))


def test_there_are_committed_artifacts_to_replay():
    assert len(ARTIFACTS) >= 10


@pytest.mark.parametrize("path", ARTIFACTS, ids=lambda p: p.name)
def test_committed_search_replayed_gives_the_same_answer(path):
    doc = json.loads(path.read_text())
    proto = replay(doc, "protocol")
    guided = replay(doc, "guided")
    assert guided, "a bounded cell to replay"
    for p, g in zip(proto, guided):
        if _strategy(doc) == "protocol":
            assert p.trials == p.recorded_trials  # the oracle reproduces the recorded run
        assert p.same, (p.engine, p.precision, p.answer, p.recorded, p.batches)
        assert g.same, (g.engine, g.precision, g.answer, g.recorded, g.batches)


def _strategy(doc):
    return doc["configuration"].get("strategy") or "protocol"


def test_flat_peaks_say_nothing_so_growth_doubles():
    # jax-xla preallocates its pool: every candidate peaks at the pool whatever its batch. The
    # calibration (no pool) and the first pass gave a line that crept 1 % at a time (H200, call 12).
    cfg = SearchConfig(12288, 1 << 20, target_mib=16120.0, anchor=(16, 10887.0))
    hist = [(12288, Status.OK, 16067.0), (12415, Status.OK, 16067.0)]
    assert predict(hist, cfg, 12415) is None
    assert guided_strategy(hist, cfg).batch == 2 * 12415
    pool = gpu(13568, lambda b: 16067.0)
    d, hist = run_search(pool, cfg, "guided")
    _, proto = run_search(pool, cfg, "protocol")
    # protocol's count plus the one candidate the first line cost (it was 18 vs 16 before)
    assert (d.max_batch, d.next_batch) == (13568, 13569) and len(hist) <= len(proto) + 1


def test_guided_needs_fewer_candidates_than_protocol_on_the_committed_searches():
    # Against the searches protocol recorded (a guided run's own count is no comparison).
    docs = [json.loads(p.read_text()) for p in ARTIFACTS]
    rows = [r for d in docs if _strategy(d) == "protocol" for r in replay(d, "guided")]
    searches = [r for r in rows if r.recorded_trials > 2]  # the 2-candidate runs re-verify a known answer
    assert len(searches) >= 8  # 8 when written; later committed searches join
    # Fewer in all, not on every search: 20 % fewer or more until the H100 searches of 2026-12-07 (several card
    # sizes, slots: per-process peaks + the gate's offset) joined; guided needs more than protocol on some of those
    # (33 against 21 at 24,564 MiB), and 15 % fewer over all the committed searches then.
    guided, protocol = sum(r.trials for r in searches), sum(r.recorded_trials for r in searches)
    assert guided < 0.9 * protocol, (guided, protocol)
    opennn = [r for r in searches if r.engine.startswith("opennn") and r.recorded[0] == 7285]
    assert opennn and all(r.trials <= 4 for r in opennn)  # linear peaks: found in ≤ 4


# -- compiled peaks: jax-xla's pool is flat, XLA's compiled peak is not ------------------------

JAX_BF16 = RESULTS / "maxbatch-resnet50-synthetic-20261201T215512Z.json"  # protocol, every candidate has one
JAX_FP32 = RESULTS / "maxbatch-resnet50-synthetic-20261201T163217Z.json"  # guided, recorded before the field


def test_recorded_jax_searches_replayed_with_compiled_peaks(capsys):
    """The recorded jax-xla searches, replayed (not measured): the oracle answers a recorded batch
    with its recorded outcome and compiled peak, any other batch by the recorded answer with a
    compiled peak interpolated between the recorded candidates either side."""
    counts = {}
    for path in (JAX_BF16, JAX_FP32):
        doc = json.loads(path.read_text())
        (proto,) = replay(doc, "protocol")
        (today,) = replay(doc, "guided", compiled=False)
        (new,) = replay(doc, "guided")
        for r in (proto, today, new):
            assert r.same, (path.name, r.answer, r.recorded, r.batches)
        counts[path] = proto.trials, today.trials, new.trials
        with capsys.disabled():
            print(f"\nREPLAY (recorded outcomes; unrecorded batches: outcome by the recorded answer, compiled "
                  f"peak interpolated between recorded neighbours) {path.name} {new.engine} {new.precision}: "
                  f"{new.recorded[0]:,}/{new.recorded[1]:,}; candidates protocol {proto.trials} "
                  f"(~{proto.elapsed_s:.0f} s), guided before {today.trials} (~{today.elapsed_s:.0f} s), "
                  f"guided with compiled peaks {new.trials} (~{new.elapsed_s:.0f} s): {list(new.batches)}")
    # bf16: protocol's recorded 15 candidates; the flat device peaks gave guided nothing (16).
    assert counts[JAX_BF16][:2] == (15, 16)
    assert counts[JAX_BF16][2] <= 12
    # fp32 was recorded before the trial reported compiled peaks: guided is exactly as before.
    assert counts[JAX_FP32] == (16, 16, 16)


def test_compiled_peaks_of_older_jax_artifacts_come_from_xla_memory_analysis():
    from kitctl.benchmarks.maxbatch.cells import cell_search, compiled_peak, trial_entry

    doc = json.loads(JAX_BF16.read_text())
    cell = doc["results"][0]
    t = cell["trials"][-1]  # 27,098 ok, recorded before `compiled_peak_mib` existed
    assert "compiled_peak_mib" not in t["result"]
    assert trial_entry(t) == (27098, Status.OK, t["peaks"]["device_delta_mib"],
                              pytest.approx(16084752760 / 2**20))
    t2 = json.loads(json.dumps(t))
    t2["result"]["compiled_peak_mib"] = 15000.5  # the field wins where a trial reports it
    assert compiled_peak(t2) == 15000.5
    t2["result"].update(compiled_peak_mib=None, xla_memory_analysis=None)
    assert compiled_peak(t2) is None and compiled_peak({"result": None}) is None
    assert cell_search(SearchConfig(26000, 36000), cell).compiled_target_mib == cell["framework_budget_mib"]


def jax_like(c: int, pool: float, per: float = 0.56, jitter: float = 0.0, seed: int = 0):
    """A simulated jax-xla GPU: the device peak is the preallocated pool whatever the batch; the
    compiled peak grows `per` MiB per image (with jitter, not monotone) and batch ≤ c passes."""
    rng = random.Random(seed)
    noise: dict[int, float] = {}

    def oracle(b: int):
        if b not in noise:
            noise[b] = rng.uniform(-jitter, jitter)
        cp = 300.0 + per * b + noise[b]
        return (Status.OK, pool, cp) if b <= c else (Status.OOM, pool - 16, cp)
    return oracle


@pytest.mark.parametrize("c", [13568, 27098, 20000, 40000])
def test_compiled_peaks_find_a_flat_pool_boundary_in_fewer_candidates(c):
    pool = 300.0 + 0.56 * c + 0.3  # the compiled peak at which the outcome splits
    cfg = SearchConfig(12288, 1 << 20, target_mib=B, anchor=(16, 1160.8), compiled_target_mib=pool + 130)
    d, hist = run_search(jax_like(c, 16068.8), cfg, "guided")
    check(d, hist, c, cfg)
    _, before = run_search(lambda b: jax_like(c, 16068.8)(b)[:2], cfg, "guided")
    _, proto = run_search(jax_like(c, 16068.8), cfg, "protocol")
    assert len(hist) <= len(proto) - 3 and len(hist) < len(before), (len(hist), len(before), len(proto))


def test_compiled_threshold_and_prediction():
    from kitctl.benchmarks.maxbatch.search.guided import compiled_threshold, predict_compiled

    cfg = SearchConfig(100, 1 << 20, compiled_target_mib=1000.0)
    assert compiled_threshold([], cfg) == 1000.0  # no failure yet: the framework's budget
    hist = [(100, Status.OK, 5000.0, 200.0)]
    # one pass: the line through the origin, 2 MiB per image, reaches 1,000 at 500
    assert predict_compiled(hist, cfg, 100, None) == pytest.approx(500.0)
    hist += [(500, Status.OK, 5000.0, 600.0)]  # secant: 1 MiB per image from here
    assert predict_compiled(hist, cfg, 500, None) == pytest.approx(900.0)
    hist += [(900, Status.OOM, 4990.0, 1400.0)]  # failed above the budget: still the budget
    assert compiled_threshold(hist, cfg) == 1000.0
    assert predict_compiled(hist, cfg, 500, 900) == pytest.approx(500 + 400 * 400 / 800)  # false position
    hist += [(700, Status.OOM, 4990.0, 700.0)]  # failed under the budget: bisect the threshold
    assert compiled_threshold(hist, cfg) == pytest.approx(650.0)
    assert predict_compiled(hist, cfg, 500, 700) == pytest.approx(500 + 50 * 200 / 100)
    # a pass above a failure's compiled peak contradicts any threshold: no prediction
    assert compiled_threshold(hist + [(650, Status.OK, 5000.0, 750.0)], cfg) is None
    assert predict_compiled([(100, Status.OK, 5000.0)], cfg, 100, None) is None  # none reported
    assert compiled_threshold([(100, Status.OK, 5000.0, 200.0)], SearchConfig(100)) is None


@pytest.mark.parametrize("c", [1, 2, 127, 128, 129, 4095, 27098, 99999])
@pytest.mark.parametrize("model", [
    lambda b: 1.0 + 0.001 * b,            # says "nearly free"
    lambda b: 15000.0,                    # flat
    lambda b: 1e6 - 3.0 * b,              # falling
    lambda b: (b * 7919) % 20000,         # scattered
])
def test_wrong_compiled_peaks_cost_candidates_never_the_answer(c, model):
    cfg = SearchConfig(128, 1 << 17, target_mib=B, anchor=(16, 1160.8), compiled_target_mib=15469.0)
    d, hist = run_search(lambda b: (Status.OK if b <= c else Status.OOM, 16068.8, model(b)), cfg, "guided")
    check(d, hist, c, cfg)
    assert len(hist) <= 3 * (2 * math.ceil(math.log2(cfg.max_batch + 1)) + 3), hist


def test_resume_with_compiled_peaks_replays_the_same_decisions():
    cfg = SearchConfig(12288, 1 << 20, target_mib=B, compiled_target_mib=15469.0)
    o = jax_like(27098, 16068.8, jitter=3.0, seed=4)
    d, hist = run_search(o, cfg, "guided")
    for k in range(len(hist)):
        d2, hist2 = run_search(o, cfg, "guided", history=hist[:k])
        assert hist2 == hist and d2 == d


# -- in the runner: peaks and target reach the strategy; a partial replays for --resume -------

def test_runner_guided_run_records_its_target_and_replays(tmp_path):
    from test_runner import NullWatcher, ScriptedRuntime

    from kitctl.benchmarks.maxbatch.config import MaxbatchConfig
    from kitctl.benchmarks.maxbatch.run import Runner, RunPlan
    from kitctl.core.artifact import ArtifactStore
    from kitctl.core.budget import make_budget
    from kitctl.core.engines import ENGINES
    from kitctl.core.protocol import TrialRequest
    from kitctl.run.document import new_doc
    from kitctl.cli.view import PlainView

    # ScriptedRuntime: peak = 800 + batch MiB, which reaches B = 16,120 at 15,320 images.
    rt = ScriptedRuntime(capacity=15320)
    cfg = MaxbatchConfig.from_flags("pytorch-eager", "fp32", "cuda", None, 256, 8, 1 << 16, None, "local",
                                    "synthetic", None, False, None, 4, "guided", None)
    doc = new_doc("abc123", cfg, None, rt, [ENGINES["pytorch-eager"]])
    budget = make_budget(16376, 16376, 256)
    doc["budget"] = budget.to_json()
    plan = RunPlan(engines=[ENGINES["pytorch-eager"]], precisions=["fp32"],
                   base_request=TrialRequest("", "", "maxbatch", 1, "fp32", "cuda"),
                   search=cfg.search, strategy="guided", timeout_s=10, budget=budget,
                   calibration_batch=4, watcher_factory=lambda b: NullWatcher())
    store = ArtifactStore.create(tmp_path, "maxbatch", "resnet50", "synthetic", stamp="T")
    out = Runner(plan, rt, store, doc, PlainView()).run()
    cell = out["results"][0]
    assert (cell["max_batch"], cell["next_batch"]) == (15320, 15321)
    assert cell["search_target_mib"] == 16120
    assert len(cell["trials"]) <= 6  # exact linear peaks: a few candidates, not ~24
    assert cfg.cell_problem(cell) is None  # what --resume checks: the strategy replays them
    tampered = json.loads(json.dumps(cell))
    tampered["trials"][1]["batch"] += 1
    assert "where the search asks for" in cfg.cell_problem(tampered)


# -- property: any capacity, any peaks (even absurd ones), the protocol's answer --------------



@settings(max_examples=300, deadline=None, database=None)
@given(st.integers(0, 300000), st.integers(1, 5000), st.integers(0, 5),
       st.lists(st.floats(0, 2 * B, allow_nan=False), min_size=1, max_size=50))
def test_property_any_peaks_give_the_protocol_answer(c, start, maxexp, noise):
    maxb = max(start, start << maxexp) if maxexp else 1 << 19
    cfg = SearchConfig(start, maxb, target_mib=B, anchor=(16, noise[0]))
    d, hist = run_search(gpu(c, lambda b: noise[b % len(noise)]), cfg, "guided")
    check(d, hist, c, cfg)


@settings(max_examples=300, deadline=None, database=None)
@given(st.integers(0, 300000), st.integers(1, 5000), st.integers(0, 5),
       st.lists(st.floats(0, 2 * B, allow_nan=False), min_size=1, max_size=50),
       st.one_of(st.none(), st.floats(1, 2 * B, allow_nan=False)))
@example(1, 1, 0, [5e-324], 1.0)  # a denormal compiled peak: an infinite prediction, once an OverflowError
def test_property_any_compiled_peaks_give_the_protocol_answer(c, start, maxexp, cps, target):
    maxb = max(start, start << maxexp) if maxexp else 1 << 19
    cfg = SearchConfig(start, maxb, target_mib=B, anchor=(16, 1160.8), compiled_target_mib=target)

    def oracle(b):
        cp = cps[b % len(cps)]
        return (Status.OK, 16068.8, cp) if b <= c else (Status.OOM, 16050.8, cp)
    d, hist = run_search(oracle, cfg, "guided")
    check(d, hist, c, cfg)
