"""--slots: several candidates of one search at the same time on one device (core/slots.py).

* The per-slot gate: real processes, the named fake NVML (tests/fake_nvml.py) listing their PIDs with
  scripted per-process memory; one NVML loop for all slots; the candidate over its threshold is killed,
  the others go on.
* What fits: N × (limit + allowance) against the device, auto, and the one-line refusals of the CLI.
* k slots on the committed H200 searches (results/reference): the same verified (max, next) as the
  sequential protocol, in fewer rounds.
* The runner with slot lanes (a scripted runtime, as tests/test_speculate_lanes.py): the one-slot
  answers, a calibration that runs alone, the gate's offset, each candidate's slot and times.
* Real PyTorch trials on the CPU through the CLI: --slots 2 ends at --slots 1's (max, next); an
  interrupt with two slots running leaves no process behind and a resumable partial.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fake_nvml import FakeDevice, FakeNvmlLib, FakeProcess, alive
from test_speculate import committed_cells, same
from test_speculate_lanes import PASSES, Scripted, config
from test_gpus import answers

from kitctl.benchmarks.maxbatch.config import MaxbatchConfig
from kitctl.benchmarks.maxbatch.replay import oracle_of, search_config
from kitctl.benchmarks.maxbatch.run import Lane, Runner, RunPlan, SlotPlan
from kitctl.benchmarks.maxbatch.cells import cell_entries, cell_search, shared_device_proof, shared_device_reason
from kitctl.core.artifact import ArtifactStore, load
from kitctl.core.budget import make_budget
from kitctl.core.engines import ENGINES
from kitctl.core.gpu import Nvml
from kitctl.core.outcome import KilledBy, MemoryPeaks, Status, TrialOutcome
from kitctl.core.protocol import TrialRequest
from kitctl.benchmarks.maxbatch.search.strategies import STRATEGIES, run_search
from kitctl.core.slots import SlotSampler, SlotsError, fit, gate_offset, parse_slots
from kitctl.benchmarks.maxbatch.search.speculate import replay, simulate
from kitctl.run.document import new_doc
from kitctl.cli.view import PlainView
from conftest import ROOT, need_module  # noqa: E402

ENTRY = [sys.executable, "-c", "from kitctl.entry import main; main()"]
EAGER = [ENGINES["pytorch-eager"]]


def on_path_batches(cell, cfg):
    """The batches the answer uses, in the order the sequential search asks for them; the trials
    marked on_path are exactly those."""
    r = replay(STRATEGIES[cfg.strategy], cell_entries(cell), cell_search(cfg.search, cell))
    assert sorted(r.path) == [i for i, t in enumerate(cell["trials"]) if t["on_path"]]
    return [cell["trials"][i]["batch"] for i in r.path]


# -- the per-slot gate ---------------------------------------------------------------------------

class Proc:
    """A real candidate: a sleeping process in its own group, killed as the runtimes kill one."""

    def __init__(self) -> None:
        self.p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        self.killed_by = KilledBy.NONE

    def pids(self) -> set[int]:
        return {self.p.pid}

    def kill(self, reason: KilledBy) -> None:
        if self.killed_by is KilledBy.NONE:
            self.killed_by = reason
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def gone(self, within_s: float = 10.0) -> bool:
        try:
            self.p.wait(timeout=within_s)
        except subprocess.TimeoutExpired:
            return False
        return True


def test_each_slot_is_gated_by_its_own_processes_and_only_the_one_over_is_killed():
    procs = [Proc() for _ in range(3)]
    usage = {procs[0].p.pid: 4000.0, procs[1].p.pid: 4000.0, procs[2].p.pid: 4000.0}
    listed = lambda: [FakeProcess(pid, mib) for pid, mib in usage.items() if alive(pid)]  # noqa: E731
    # Three candidates of 4,000 MiB each: the device's used memory (12,000 + idle) is over any one
    # candidate's threshold, its own is not.
    lib = FakeNvmlLib([FakeDevice("GPU-0", used_mib=lambda n: 500.0 + sum(usage.values()),
                                  compute_processes=listed)])
    nvml = Nvml(lib=lib)
    sampler = SlotSampler(nvml, nvml.handle(0))
    watchers = [sampler.watcher(6000.0) for _ in procs]
    try:
        for w, p in zip(watchers, procs):
            w.prepare()
            w.start(p)
        time.sleep(0.3)
        assert all(p.p.poll() is None for p in procs)  # nobody is over its own threshold
        loops = [t for t in threading.enumerate() if t.name == "kit-nvml-slots"]
        assert len(loops) == 1  # one NVML loop for every slot
        usage[procs[1].p.pid] = 7000.0  # the second candidate goes over its threshold
        assert procs[1].gone()
        assert procs[1].killed_by is KilledBy.KIT_VRAM_GATE
        time.sleep(0.3)
        assert procs[0].p.poll() is None and procs[2].p.poll() is None  # the other slots go on
        usage[procs[0].p.pid] = 5900.0  # under its threshold: still on
        time.sleep(0.3)
        assert procs[0].p.poll() is None
        peaks = [w.stop() for w in watchers]
        assert [w.over_budget for w in watchers] == [False, True, False]
        assert [pk.process_mib for pk in peaks] == [5900.0, 7000.0, 4000.0]
        assert peaks[1].release_s is not None and peaks[0].release_s is None
        assert peaks[0].device_delta_mib is None  # no device delta is claimed for a slot's candidate
    finally:
        for p in procs:
            p.kill(KilledBy.KIT_INTERRUPT)
            p.gone()
    time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name == "kit-nvml-slots"]  # no slot left: the loop ends


class Stuck(Proc):
    """A candidate whose PID listing hangs after the first (a Docker daemon slow to answer `top`)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.calls = 0

    def pids(self) -> set[int]:
        self.calls += 1
        if self.calls > 1:
            self.release.wait(60)
        return super().pids()


def test_a_slot_whose_pid_listing_hangs_does_not_hold_up_the_others_gate():
    stuck, over = Stuck(), Proc()
    usage = {stuck.p.pid: 1000.0, over.p.pid: 1000.0}
    listed = lambda: [FakeProcess(pid, mib) for pid, mib in usage.items() if alive(pid)]  # noqa: E731
    nvml = Nvml(lib=FakeNvmlLib([FakeDevice("GPU-0", compute_processes=listed)]))
    sampler = SlotSampler(nvml, nvml.handle(0))
    watchers = [sampler.watcher(6000.0), sampler.watcher(6000.0)]
    try:
        watchers[0].start(stuck)
        watchers[1].start(over)
        while stuck.calls < 2:  # the refresher is now stuck in its listing
            time.sleep(0.01)
        usage[over.p.pid] = 7000.0
        assert over.gone(30) and over.killed_by is KilledBy.KIT_VRAM_GATE
        assert not stuck.release.is_set() and stuck.p.poll() is None  # killed while the other listing hung
    finally:
        stuck.release.set()
        for w in watchers:
            w.stop()
        for p in (stuck, over):
            p.kill(KilledBy.KIT_INTERRUPT)
            p.gone()


def test_the_gate_offset_is_the_calibrations_device_delta_beyond_its_processes():
    assert gate_offset(1200.0, 1100.0) == (100.0, "")
    assert gate_offset(1100.0, 1130.0) == (0.0, "")  # NVML's rounding: within the slack, no offset
    off, why = gate_offset(1000.0, 1500.0)
    assert off is None and "exceeds the device delta" in why
    assert gate_offset(1000.0, None)[0] is None
    assert gate_offset(None, 900.0)[0] is None


# -- what fits ---------------------------------------------------------------------------------------

def test_slots_fit_when_n_times_limit_and_allowance_fit_the_device():
    h200 = 143771.0
    f = fit(None, 16376, 512, h200, "GPU total (NVML)", cores=16)
    assert f.slots == 8 and f.requested == "auto"  # 8 × 16,888 = 135,104 ≤ 143,771 < 9 × 16,888
    assert fit(None, 16376, 512, h200, "GPU total (NVML)", cores=4).slots == 4  # at most one per core
    assert fit(None, 200_000, 512, h200, "GPU total (NVML)", cores=4).slots == 1  # at least one
    assert fit(8, 16376, 512, h200, "GPU total (NVML)", cores=16).slots == 8
    with pytest.raises(SlotsError, match=r"--slots 9: 9 × \(16,376 MiB limit \+ 512 MiB allowance\) = 151,992 MiB "
                                         r"does not fit the 143,771 MiB of the GPU total \(NVML\); at most 8 fit"):
        fit(9, 16376, 512, h200, "GPU total (NVML)", cores=16)
    # One slot is today's run: never refused.
    assert fit(1, 200_000, 512, h200, "GPU total (NVML)", cores=1).slots == 1
    assert parse_slots("auto") is None and parse_slots(" 3 ") == 3
    for bad in ("0", "-1", "two", "1.5", ""):
        with pytest.raises(SlotsError, match="--slots takes a number ≥ 1 or auto"):
            parse_slots(bad)


def kitctl(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def last_error(p: subprocess.CompletedProcess) -> str:
    lines = p.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("kitctl: "), p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    return lines[-1]


CPU = ["run", "maxbatch", "--device", "cpu", "--runtime", "local", "--engines", "pytorch-eager",
       "--precision", "fp32"]


@pytest.mark.parametrize("flags, says", [
    (["--slots", "0"], "--slots takes a number ≥ 1 or auto (got '0')"),
    (["--slots", "many"], "--slots takes a number ≥ 1 or auto (got 'many')"),
    (["--slots", "2", "--no-speculate"], "--slots fills its slots with the candidates the search would ask for next"),
    (["--slots", "100000", "--memory-limit", "4096"],
     "--slots 100000: 100000 × (4,096 MiB limit + 256 MiB allowance) = 435,200,000 MiB does not fit the"),
])
def test_slots_that_cannot_run_are_refused_in_one_line_with_nothing_written(tmp_path, flags, says):
    p = kitctl(*CPU, "--start-batch", "2", "--max-batch", "4", *flags, "--results-dir", str(tmp_path / "r"),
               timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert says in last_error(p)
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


STAND_IN = Path(__file__).resolve().parent / "nvml_stand_in"


def test_gpu_slots_that_do_not_fit_the_card_are_refused(tmp_path):
    """The stand-in NVML's card holds 16,376 MiB: three emulated 8,000 MiB cards do not fit it."""
    env = {"PYTHONPATH": os.pathsep.join([str(STAND_IN), os.environ.get("PYTHONPATH", "")])}
    p = kitctl("run", "maxbatch", "--device", "cuda", "--runtime", "local", "--engines", "pytorch-eager",
               "--precision", "fp32", "--vram-limit", "8000", "--slots", "3", "--start-batch", "2",
               "--max-batch", "4", "--results-dir", str(tmp_path / "r"), env=env, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert last_error(p) == ("kitctl: --slots 3: 3 × (8,000 MiB limit + 512 MiB allowance) = 25,536 MiB does not fit "
                             "the 16,376 MiB of the GPU total (NVML); at most 1 fit (or --slots auto)")
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


def test_gpu_slots_refuse_a_card_that_is_not_idle(tmp_path):
    """Slots are sized to the whole card: 2,000 MiB held by someone else (the stand-in's idle value,
    over --idle-threshold 1,024) refuses them, naming who holds it."""
    env = {"PYTHONPATH": os.pathsep.join([str(STAND_IN), os.environ.get("PYTHONPATH", "")]),
           "KITCTL_TEST_NVML_IDLE_MIB": "2000"}
    p = kitctl("run", "maxbatch", "--device", "cuda", "--runtime", "local", "--engines", "pytorch-eager",
               "--precision", "fp32", "--vram-limit", "4000", "--slots", "2", "--start-batch", "2",
               "--max-batch", "4", "--results-dir", str(tmp_path / "r"), env=env, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    line = last_error(p)
    assert line.startswith("kitctl: --slots 2: GPU is not idle: 2000 MiB in use (threshold 1024 MiB)"), line
    assert line.endswith("slots share the whole card with nothing else (free it, or run with --slots 1)"), line
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


# -- k slots on the committed searches --------------------------------------------------------------

def test_k_slots_end_at_the_protocols_pair_on_the_committed_searches():
    """Each committed bounded search replayed with k = 2..8 candidates per round: the speculative
    tree puts the k candidates of a round on the bisection's next levels (k = 3: the midpoint and
    both quarter points), and the replayed answer is the sequential protocol's verified pair."""
    cells = list(committed_cells())
    assert len(cells) >= 5
    seq_total, rounds_total = 0, {k: 0 for k in (2, 3, 4, 8)}
    for name, doc, cell in cells:
        cfg = search_config(doc, cell)
        ref, hist = run_search(oracle_of(cell), cfg, "protocol")
        assert (ref.max_batch, ref.next_batch) == (cell["max_batch"], cell["next_batch"]), name
        seq_total += len(hist)
        prev = len(hist)
        for k in (2, 3, 4, 8):
            sim = simulate(oracle_of(cell), cfg, "protocol", k)
            assert same(sim.decision, ref), (name, cell["engine"], k)
            assert [sim.trials[i] for i in sim.path] == hist  # the answer's candidates are protocol's
            assert sim.rounds <= prev, (name, k)  # more slots never take more rounds
            prev = sim.rounds
            rounds_total[k] += sim.rounds
    assert rounds_total[3] < 0.75 * seq_total and rounds_total[8] < rounds_total[2]


# -- the runner with slot lanes ---------------------------------------------------------------------

class Slotted(Scripted):
    """Scripted, with per-process memory as a real GPU reports it (device delta − 40 MiB), and a log of
    what ran when (to see the calibration run alone)."""

    log: list[tuple[str, int, float, float]] = []

    def run(self, request, *, timeout_s, watcher=None):
        t0 = time.monotonic()
        out = super().run(request, timeout_s=timeout_s, watcher=watcher)
        out.peaks.process_mib = out.peaks.device_delta_mib - 40.0
        Slotted.log.append((request.mode, request.batch, t0, time.monotonic()))
        return out


def slot_runner(tmp_path: Path, cfg, rts, watched: list | None = None) -> Runner:
    budget = make_budget(16376, 16376, 256)
    doc = new_doc("abc123", cfg, None, rts[0], EAGER)
    doc["budget"] = budget.to_json()
    from test_runner import NullWatcher

    def slot_watcher(threshold: float):
        if watched is not None:
            watched.append(threshold)
        return NullWatcher()

    lanes = [Lane(rt, budget, lambda b: NullWatcher(), None, slot=i) for i, rt in enumerate(rts)]
    plan = RunPlan(engines=EAGER, precisions=list(cfg.run.precisions),
                   base_request=TrialRequest("", "", "maxbatch", 1, "fp32", cfg.run.device),
                   search=cfg.search, strategy=cfg.strategy, timeout_s=120, budget=budget,
                   calibration_batch=cfg.calibration_batch, watcher_factory=lanes[0].watcher_factory)
    store = ArtifactStore.create(tmp_path, "maxbatch", "resnet50", "synthetic", stamp="T")
    return Runner(plan, rts[0], store, doc, PlainView(), lanes=lanes if len(rts) > 1 else None,
                  slot_plan=SlotPlan(len(rts), slot_watcher) if len(rts) > 1 else None)


@pytest.mark.parametrize("case", list(PASSES))
@pytest.mark.parametrize("k", [2, 4])
def test_k_slots_give_the_one_slot_answer_and_path(tmp_path, case, k):
    cfg = config("protocol")
    one = slot_runner(tmp_path / "one", cfg, [Slotted(PASSES[case], delay=0.02)]).run()
    Slotted.log = []
    watched: list[float] = []
    many = slot_runner(tmp_path / "k", cfg, [Slotted(PASSES[case], delay=0.02) for _ in range(k)], watched).run()
    assert answers(many) == answers(one)
    [c1], [ck] = one["results"], many["results"]
    assert on_path_batches(ck, cfg) == [t["batch"] for t in c1["trials"]]
    assert cfg.cell_problem(ck) is None  # what --resume checks
    # One slot: today's artifact, nothing of slots in it.
    assert "slot_gate" not in c1 and "slots_wall_s" not in c1 and not any("slot" in t for t in c1["trials"])
    # The calibration ran alone on the device: no candidate overlapped it.
    [(_, _, c0, c1_end)] = [x for x in Slotted.log if x[1] == cfg.calibration_batch][:1]
    assert all(end <= c0 or start >= c1_end for m, b, start, end in Slotted.log if (start, end) != (c0, c1_end))
    if ck["calibration"]["status"] != "ok":  # nothing fits: the cell ends at its calibration
        assert "slot_gate" not in ck and not ck["trials"]
        return
    # The gate: offset = calibration's device delta − its per-process peak (40 MiB here); every search
    # candidate gated at B − offset.
    assert ck["slot_gate"]["offset_mib"] == 40.0 and ck["slot_gate"]["threshold_mib"] == 16120 - 40.0
    assert watched and set(watched) == {16080.0}
    # Every candidate names its slot and when it ran; the search's wall time is recorded.
    slots = [t["slot"] for t in ck["trials"] + ck.get("cancelled", [])]
    assert all(0 <= s["index"] < k and s["ended_unix_s"] >= s["started_unix_s"] for s in slots)
    assert ck["slots_wall_s"] == pytest.approx(max(s["ended_unix_s"] for s in slots)
                                               - min(s["started_unix_s"] for s in slots), abs=0.002)
    if len(c1["trials"]) > 2:
        assert len({s["index"] for s in slots}) >= 2  # the slots were used
    assert "slot" not in ck["calibration"]


class Warming(Slotted):
    """Slotted, recording each `warm` (the runtime hook a lane calls while a cell calibrates alone): which
    runtime, on which thread, for what request, when."""

    warmed: list[tuple[int, int, TrialRequest, float]] = []

    def warm(self, request):
        Warming.warmed.append((id(self), threading.get_ident(), request, time.monotonic()))


def test_idle_slots_warm_their_runtime_for_the_calibrating_cell(tmp_path):
    cfg = config("protocol")
    Slotted.log, Warming.warmed = [], []
    rts = [Warming(PASSES["monotone"], delay=0.3) for _ in range(3)]
    threads: dict[int, int] = {}  # runtime -> the lane thread that ran its candidates
    for rt in rts:
        run = rt.run

        def logged(request, *, _rt=rt, _run=run, **kw):
            threads.setdefault(id(_rt), threading.get_ident())
            return _run(request, **kw)
        rt.run = logged
    doc = slot_runner(tmp_path, cfg, rts).run()
    [(_, _, _, cal_end)] = [x for x in Slotted.log if x[1] == cfg.calibration_batch][:1]
    # Every lane but the calibrating one warmed once, for the calibration's engine and precision, on the thread
    # that later ran its candidates, before the calibration ended (so before the search's first round).
    warmed = {rid: (tid, req, t) for rid, tid, req, t in Warming.warmed}
    assert len(Warming.warmed) == len(rts) - 1 == len(warmed)
    for rid, (tid, req, t) in warmed.items():
        assert (req.engine, req.precision, req.batch) == ("pytorch-eager", "fp32", cfg.calibration_batch)
        assert t <= cal_end
        assert threads.get(rid, tid) == tid
    one = slot_runner(tmp_path / "one", cfg, [Slotted(PASSES["monotone"], delay=0.01)]).run()
    assert answers(doc) == answers(one)


class Contended(Slotted):
    """Slotted, where a candidate at batch `slow` or more passes its deadline (status timeout) whenever another
    candidate ran at any time beside it, and ends as scripted alone: jax-xla with 4 slots on an H100, whose
    candidates near the boundary took over 150 s side by side against 47-60 s alone
    (results/reference/logs/h100-slots-jax-20261207.log)."""

    slow = 150
    lock = threading.Lock()
    live: dict[object, bool] = {}  # running candidates: whether another ran beside it

    def run(self, request, *, timeout_s, watcher=None):
        me = object()
        with Contended.lock:
            for k in Contended.live:
                Contended.live[k] = True
            Contended.live[me] = bool(Contended.live)
        out = super().run(request, timeout_s=timeout_s, watcher=watcher)
        with Contended.lock:
            beside = Contended.live.pop(me)
        if beside and request.batch >= Contended.slow and request.batch != 16:
            return TrialOutcome(batch=request.batch, status=Status.TIMEOUT, exit_code=None, runtime=self.name,
                                killed_by=KilledBy.KIT_DEADLINE, error="deadline passed; killed by the kit",
                                peaks=out.peaks)
        return out


def test_a_retry_runs_alone_so_a_deadline_passed_beside_others_is_judged_as_one_slot_would(tmp_path):
    cfg = config("protocol")
    one = slot_runner(tmp_path / "one", cfg, [Slotted(PASSES["monotone"], delay=0.02)]).run()
    Slotted.log = []
    many = slot_runner(tmp_path / "k", cfg, [Contended(PASSES["monotone"], delay=0.05) for _ in range(4)]).run()
    assert answers(many) == answers(one)  # without running the retries alone: "timeout then timeout", no answer
    [ck] = many["results"]
    runs = ck["trials"] + ck.get("cancelled", [])
    retries = [t for t in ck["trials"] if t["attempt"] > 1]
    assert retries and all(t["status"] != "timeout" for t in retries)
    for r in retries:  # nothing else ran while it did
        a, b = r["slot"]["started_unix_s"], r["slot"]["ended_unix_s"]
        assert all(t["slot"]["ended_unix_s"] <= a or t["slot"]["started_unix_s"] >= b for t in runs if t is not r)


def test_once_a_retry_alone_proves_the_sharing_the_cell_runs_one_candidate_at_a_time(tmp_path, capsys):
    """The H100's jax-xla cell (…20261208T001023Z.partial.json): after 14,732 timed out beside three others and
    ended alone in 64 s, the next round again put four candidates side by side and all four passed the deadline.
    Once a retry alone has ended inside the deadline its first attempt passed beside others, no candidate of the
    cell starts beside another: no first attempt times out after it, and the answer is still one slot's."""
    cfg = config("protocol")
    one = slot_runner(tmp_path / "one", cfg, [Slotted(PASSES["monotone"], delay=0.02)]).run()
    Slotted.log = []
    many = slot_runner(tmp_path / "k", cfg, [Contended(PASSES["monotone"], delay=0.05) for _ in range(4)]).run()
    assert answers(many) == answers(one)
    [ck] = many["results"]
    runs = ck["trials"] + ck.get("cancelled", [])
    proof = shared_device_proof(ck)
    assert proof is not None
    first, retry = proof
    assert first.status == "timeout" and first.attempt == 1 and retry.batch == first.batch and retry.attempt == 2
    after = [t for t in runs if t["slot"]["started_unix_s"] >= retry.slot.ended_unix_s]
    assert after  # the search went on after the proof
    for r in after:  # alone: nothing overlapped it, so no first attempt timed out
        a, b = r["slot"]["started_unix_s"], r["slot"]["ended_unix_s"]
        assert all(t["slot"]["ended_unix_s"] <= a or t["slot"]["started_unix_s"] >= b for t in runs if t is not r)
        assert not (r["status"] == "timeout" and r["attempt"] == 1)
    assert "pytorch-eager fp32: one candidate at a time from now on: batch" in capsys.readouterr().err


def test_the_proof_needs_a_first_attempt_beside_others_and_a_retry_alone():
    """shared_device_proof on the committed jax-xla partial (H100, 4 slots) and on cells that prove nothing."""
    doc = json.loads((ROOT / "results/reference/maxbatch-resnet50-synthetic-20261208T001023Z.partial.json")
                     .read_text())
    [cell] = doc["results"]
    first, retry = shared_device_proof(cell)
    assert (first.batch, first.status, retry.status, round(retry.elapsed_s)) == (14732, "timeout", "oom", 64)
    assert shared_device_reason(cell) == ("batch 14,732 timed out after 150 s beside other candidates and ended "
                                          "alone in 64 s (oom)")
    # The same candidates with the retry also timed out, or without slots (no slot times): no proof.
    also_late = dict(cell, trials=[dict(t, status="timeout") if t["attempt"] > 1 else t for t in cell["trials"]],
                     cancelled=[])
    assert shared_device_proof(also_late) is None
    no_slots = dict(cell, trials=[{k: v for k, v in t.items() if k != "slot"} for t in cell["trials"]], cancelled=[])
    assert shared_device_proof(no_slots) is None


class SlotWatched(Slotted):
    """Slotted, as a GPU with slots reports it: a candidate under the per-slot gate (watcher from the
    slot plan) has its own per-process memory and no device delta."""

    def run(self, request, *, timeout_s, watcher=None):
        out = super().run(request, timeout_s=timeout_s, watcher=watcher)
        if getattr(watcher, "slot", False):
            out.peaks.device_delta_mib = None
        return out


def test_guided_with_slots_reads_per_process_peak_plus_offset_as_the_device_delta(tmp_path):
    """`guided` aims with the peaks: a slot's candidate has none of the device's own, and its
    per-process peak + the cell's offset (what the gate held against B) stands in; here that is the
    one-slot run's device delta exactly, so the answer's candidates are the one-slot run's."""
    from test_runner import NullWatcher

    class SlotNull(NullWatcher):
        slot = True

    cfg = config("guided")
    one = slot_runner(tmp_path / "one", cfg, [Slotted(PASSES["monotone"], delay=0.02)]).run()
    r = slot_runner(tmp_path / "k", cfg, [SlotWatched(PASSES["monotone"], delay=0.02) for _ in range(3)])
    r.slot_plan = SlotPlan(3, lambda threshold: SlotNull())
    many = r.run()
    [c1], [ck] = one["results"], many["results"]
    assert all(t["peaks"]["device_delta_mib"] is None for t in ck["trials"])
    assert answers(many) == answers(one)
    assert on_path_batches(ck, cfg) == [t["batch"] for t in c1["trials"]]
    # Resume's check replays with the same stand-in peaks; without the offset the path would differ.
    assert cfg.cell_problem(ck) is None
    from kitctl.benchmarks.maxbatch.cells import replay_problem
    assert replay_problem(ck["trials"], cell_search(cfg.search, ck), "guided") is not None


def test_without_per_process_memory_a_cell_runs_one_candidate_at_a_time(tmp_path):
    cfg = config("protocol")
    rts = [Scripted(PASSES["monotone"], delay=0.02) for _ in range(3)]  # no per-process memory
    many = slot_runner(tmp_path, cfg, rts).run()
    [c] = many["results"]
    assert c["slot_gate"]["offset_mib"] is None and "no per-process memory" in c["slot_gate"]["note"]
    assert {t["slot"]["index"] for t in c["trials"]} == {0} and all(t["on_path"] for t in c["trials"])
    assert sum(1 for rt in rts if rt.batches) == 1


# -- real PyTorch trials on the CPU, through the CLI ----------------------------------------------

# Where a memory cap stops ResNet-50 on the CPU moves by a few batches from one run to the next (the
# allocator's layout under RLIMIT_DATA: 119/120, 123/124 and 125/126 were seen under a 1,000 MiB cap on
# one host), so two runs compare on a range far under their cap: every candidate passes, and the pair
# is (--max-batch, none) for both. The slots' bounded pairs are compared on replays above and checked
# for a verified pass and memory failure on the stand-in GPU below.
RANGE = ["--memory-limit", "1500", "--start-batch", "2", "--max-batch", "16", "--timeout", "300"]


def only_final(results: Path) -> dict:
    [f] = [f for f in results.glob("maxbatch-*.json") if not f.name.endswith(".partial.json")]
    return load(f)


def test_cpu_two_slots_end_at_the_one_slot_pair(tmp_path):
    need_module("torch", "the local runtime runs the PyTorch trial on this interpreter")
    one = kitctl(*CPU, *RANGE, "--results-dir", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-3000:]
    two = kitctl(*CPU, *RANGE, "--slots", "2", "--results-dir", str(tmp_path / "two"))
    assert two.returncode == 0, two.stderr[-3000:]
    d1, d2 = only_final(tmp_path / "one"), only_final(tmp_path / "two")
    [c1], [c2] = d1["results"], d2["results"]
    assert (c1["search_status"], c1["max_batch"], c1["next_batch"]) == ("censored_at_max_batch", 16, None)
    assert (c2["search_status"], c2["max_batch"], c2["next_batch"]) == (c1["search_status"], c1["max_batch"],
                                                                         c1["next_batch"])
    # One slot writes nothing of slots; two record the arithmetic, each candidate's slot, the wall time.
    assert "slots" not in d1 and "slots" not in d1["configuration"]
    assert not any("slot" in t for t in c1["trials"]) and "slots_wall_s" not in c1
    assert d2["configuration"]["slots"] == "2" and d2["slots"]["slots"] == 2
    assert d2["slots"]["device_source"] == "available RAM (MemAvailable)" and d2["slots"]["limit_mib"] == 1500
    assert {t["slot"]["index"] for t in c2["trials"]} == {0, 1}
    # Two candidates did run at the same time.
    spans = sorted((t["slot"]["started_unix_s"], t["slot"]["ended_unix_s"]) for t in c2["trials"] + c2.get("cancelled", []))
    assert any(b0 < a1 for (a0, a1), (b0, b1) in zip(spans, spans[1:]))
    assert c2["slots_wall_s"] > 0
    # The answer's candidates are the one-slot run's, in its order.
    cfg = MaxbatchConfig.from_json(d2["configuration"])
    assert on_path_batches(c2, cfg) == [t["batch"] for t in c1["trials"]]


def trial_pids(owner: int) -> set[int]:
    """The live processes below `owner` (kitctl's local trials and their children)."""
    from fake_nvml import _parents

    parents = _parents()
    found, todo = set(), [p for p, pp in parents.items() if pp == owner]
    while todo:
        p = todo.pop()
        if p not in found:
            found.add(p)
            todo.extend(c for c, pp in parents.items() if pp == p)
    return {p for p in found if alive(p)}


def test_sigint_with_two_slots_running_leaves_no_process_and_a_resumable_partial(tmp_path):
    need_module("torch", "the local runtime runs the PyTorch trial on this interpreter")
    from test_adversarial_cli import assert_nothing_or_a_resumable_partial, error_lines

    results = tmp_path / "r"
    proc = subprocess.Popen([*ENTRY, *CPU, *RANGE, "--slots", "2", "--results-dir", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200", "KITCTL_RUN_STATE_DIR": str(tmp_path / "state")})
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            # Python trials: the interpreter and nothing else, one per slot.
            running = {p for p in trial_pids(proc.pid) if "trial" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")} \
                if proc.poll() is None else set()
            seen |= running
            if len(running) >= 2 and list(results.glob("*.partial.json")):
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before two slots ran at once"
        time.sleep(1.0)  # the trials are importing the framework, well before they end
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("kitctl: interrupted (SIGINT)") and "--resume" in lines[0]
    assert len(seen) >= 2
    time.sleep(0.5)
    assert not [p for p in seen if alive(p)], "a trial outlived the interrupted run"
    assert not list((tmp_path / "state").glob("*.json"))  # no run-state record left behind
    assert assert_nothing_or_a_resumable_partial(results) == "partial"
    [partial] = results.glob("*.partial.json")
    assert load(partial)["configuration"]["slots"] == "2"
    # Resumed: with the partial's two slots, to the one answer the range has.
    r = kitctl("run", "maxbatch", "--resume", str(partial), env={"KITCTL_RUN_STATE_DIR": str(tmp_path / "state")})
    assert r.returncode == 0, r.stderr[-3000:]
    [c] = only_final(results)["results"]
    assert (c["search_status"], c["max_batch"], c["next_batch"]) == ("censored_at_max_batch", 16, None)
    assert {t["slot"]["index"] for t in c["trials"]} <= {0, 1}


# -- the per-slot gate in a real run: the named stand-in NVML, real PyTorch trials on the CPU --------

# tests/nvml_stand_in answers a card whose used memory is an idle value plus the resident memory of
# kitctl's candidates, each listed as a compute process with its own RSS; the local runtime is told
# to run each "cuda" candidate on the CPU (as tests/test_speculate_lanes.py does). Everything else is
# kitctl's: the calibration alone under the device-delta gate, the offset, one NVML loop gating each
# slot's candidate by its own processes, the kills.
GPU_SHIM = """
import dataclasses
from kitctl.runtimes.local import LocalRuntime
_run = LocalRuntime.run
LocalRuntime.run = lambda self, request, **kw: _run(self, dataclasses.replace(request, device="cpu"), **kw)
from kitctl.entry import main
main()
"""


def test_stand_in_gpu_two_slots_gate_each_candidate_by_its_own_processes(tmp_path):
    need_module("torch", "the local runtime runs the PyTorch trial on this interpreter")
    env = {**os.environ, "COLUMNS": "200", "KITCTL_TEST_NVML_IDLE_MIB": "300",
           "PYTHONPATH": os.pathsep.join([str(STAND_IN), os.environ.get("PYTHONPATH", "")])}
    # B = 1,150 − 256 = 894 MiB: the trial's resident memory passes that between batch 64 and 96.
    p = subprocess.run([sys.executable, "-c", GPU_SHIM, "run", "maxbatch", "--device", "cuda", "--runtime", "local",
                        "--engines", "pytorch-eager", "--precision", "fp32", "--vram-limit", "1150",
                        "--start-batch", "64", "--max-batch", "96", "--calibration-batch", "2", "--slots", "2",
                        "--timeout", "300", "--results-dir", str(tmp_path / "r")],
                       capture_output=True, text=True, env=env, timeout=900)
    assert p.returncode in (0, 1) and "Traceback" not in p.stderr, p.stderr[-3000:]
    doc = only_final(tmp_path / "r")
    [c] = doc["results"]
    assert doc["slots"]["slots"] == 2 and doc["slots"]["device_source"] == "GPU total (NVML)"
    gate = c["slot_gate"]
    cal = c["calibration"]["peaks"]
    assert gate["offset_mib"] == pytest.approx(max(0.0, cal["device_delta_mib"] - cal["process_mib"]), abs=0.11)
    assert gate["threshold_mib"] == pytest.approx(doc["budget"]["budget_mib"] - gate["offset_mib"], abs=0.11)
    assert c["search_status"] in ("bounded_by_memory_failure", "censored_at_max_batch"), c["reason"]
    if c["search_status"] == "bounded_by_memory_failure":  # a verified pass at max, a memory failure at max + 1
        last = {t["batch"]: t["status"] for t in c["trials"] if t["on_path"]}
        assert c["next_batch"] == c["max_batch"] + 1
        assert (last[c["max_batch"]], last[c["next_batch"]]) == ("ok", "vram_cap_exceeded")
    for t in c["trials"]:
        assert t["peaks"]["device_delta_mib"] is None and t["peaks"]["process_mib"] is not None
        if t["status"] == "ok":
            assert t["peaks"]["process_mib"] <= gate["threshold_mib"]
        else:
            assert (t["status"], t["killed_by"]) == ("vram_cap_exceeded", "kit_vram_gate"), t["error"]
            # Over the threshold when it was killed (the recorded peak is rounded to 0.1 MiB).
            assert t["peaks"]["process_mib"] >= gate["threshold_mib"] and "per-process" in t["error"]
    spans = sorted((t["slot"]["started_unix_s"], t["slot"]["ended_unix_s"]) for t in c["trials"] + c.get("cancelled", []))
    assert any(b0 < a1 for (a0, a1), (b0, b1) in zip(spans, spans[1:]))  # two candidates at once


def test_the_report_states_the_slots_gate_and_each_searchs_wall_time(tmp_path):
    from types import SimpleNamespace

    from kitctl.benchmarks.maxbatch.report import measured_rules

    cfg = config("protocol")
    doc = slot_runner(tmp_path, cfg, [Slotted(PASSES["monotone"], delay=0.02) for _ in range(2)]).run()
    doc["slots"] = fit(2, 16376, 512, 143771.0, "GPU total (NVML)", cores=16).to_json()  # as the command records it
    src = SimpleNamespace(doc={**doc, "runtime": {"name": "local"}}, budget_mib=16120,
                          config=SimpleNamespace(memory_limit_mib=None, own=SimpleNamespace(
                              strategy="protocol", start_batch=8, max_batch=400)))
    rows = dict(measured_rules(src, "a fresh subprocess"))
    assert "its own per-process memory + the cell's calibrated offset ≤ B" in rows["Capacity rule"]
    wall = doc["results"][0]["slots_wall_s"]
    assert rows["Slots"] == ("up to 2 candidates of a search at once on the device (--slots 2); the answer is the "
                             f"one-slot search's; search wall time, first candidate to answer: pytorch-eager fp32 "
                             f"{wall:,.0f} s")
    del doc["slots"]  # one slot: the rules of a run before --slots
    rows = dict(measured_rules(SimpleNamespace(**{**vars(src), "doc": doc}), "a fresh subprocess"))
    assert "Slots" not in rows and "device delta ≤ B" in rows["Capacity rule"]


def test_docker_two_slots_each_candidate_a_fresh_container_none_left(client, image, tmp_path):
    """The Docker runtime's slot copies: two candidates in two containers at once, each removed."""
    p = kitctl("run", "maxbatch", "--device", "cpu", "--runtime", "docker", "--engines", "pytorch-eager",
               "--precision", "fp32", "--memory-limit", "1500", "--start-batch", "2", "--max-batch", "4",
               "--slots", "2", "--timeout", "300", "--results-dir", str(tmp_path / "r"),
               env={"KITCTL_IMAGE_VARIANT": "cpu-ci"})
    assert p.returncode == 0, p.stderr[-3000:]
    doc = only_final(tmp_path / "r")
    [c] = doc["results"]
    assert (c["search_status"], c["max_batch"], c["next_batch"]) == ("censored_at_max_batch", 4, None)
    ran = c["trials"] + c.get("cancelled", [])
    assert len({t["container_id"] for t in ran}) == len(ran)  # every candidate a fresh container
    assert {t["slot"]["index"] for t in ran} == {0, 1}
    spans = sorted((t["slot"]["started_unix_s"], t["slot"]["ended_unix_s"]) for t in ran)
    assert any(b0 < a1 for (a0, a1), (b0, b1) in zip(spans, spans[1:]))  # at the same time
    assert not client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"})


def test_the_end_table_shows_a_slot_candidates_own_memory():
    from kitctl.benchmarks.maxbatch.table import _peak

    slot = MemoryPeaks(process_mib=880.5, framework_mib=700.0, host_rss_mib=950.0, samples=10)
    assert _peak(vars(slot)) == (880.5, "per-process (NVML)")
    one = MemoryPeaks(device_delta_mib=900.0, process_mib=880.5, baseline_mib=300.0, samples=10)
    assert _peak(vars(one)) == (900.0, "device delta (NVML)")
