"""Several GPUs of one host: cells (engine × precision) run side by side, one lane per GPU,
each with its own sampler, budget and calibration; the answers equal the one-GPU run, every
candidate records its GPU, the partial is saved after each candidate and resumes.

Two stand-ins only: a scripted runtime (capacity arithmetic, no process) for the bounded
answers, and the named fake NVML (tests/fake_nvml.py) for GPUs this host lacks — beside the
real local runtime running the real PyTorch trial on CPU.
"""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fake_nvml import FakeDevice, FakeNvmlLib
from test_runner import NullWatcher

from kitctl.benchmarks.maxbatch.config import MaxbatchConfig
from kitctl.benchmarks.maxbatch.run import Lane, Runner, RunPlan
from kitctl.core.artifact import ArtifactStore, load, open_for_resume
from kitctl.core.budget import make_budget
from kitctl.core.engines import ENGINES
from kitctl.core.gpu import Nvml
from kitctl.core.outcome import MemoryPeaks, Status, TrialOutcome
from kitctl.core.protocol import TrialRequest
from kitctl.core.sampler import NvmlSampler
from kitctl.run.document import new_doc
from kitctl.runtimes.base import Runtime, RuntimeUnavailable
from kitctl.runtimes.local import LocalRuntime
from kitctl.cli.view import PlainView
from conftest import need_module  # noqa: E402

ENGS = [ENGINES["pytorch-eager"], ENGINES["pytorch-compile"]]
CAPACITY = {("pytorch-eager", "fp32"): 20, ("pytorch-eager", "bf16"): 41,
            ("pytorch-compile", "fp32"): 23, ("pytorch-compile", "bf16"): 9}
UUIDS = ["GPU-00000000-0000-0000-0000-00000000000a", "GPU-00000000-0000-0000-0000-00000000000b"]


class LaneRuntime(Runtime):
    """Stand-in runtime for one GPU: capacity per cell, peak = 800 + batch MiB. With a barrier,
    its first candidate waits until every lane has started one: the run fails unless the lanes
    really run at the same time."""

    name = "local"

    def __init__(self, barrier: threading.Barrier | None = None, die_after: int | None = None) -> None:
        self.barrier = barrier
        self.die_after = die_after
        self.batches: list[tuple[str, str, int]] = []
        self.closed = False

    def run(self, request, *, timeout_s, watcher=None):
        if self.die_after is not None and len(self.batches) >= self.die_after:
            raise RuntimeUnavailable("the Docker daemon stopped answering")
        if self.barrier is not None and not self.batches:
            self.barrier.wait(timeout=20)  # BrokenBarrierError: the lanes did not overlap
        self.batches.append((request.engine, request.precision, request.batch))
        ok = request.batch <= CAPACITY[(request.engine, request.precision)]
        result = {"protocol": 1, "engine": request.engine, "mode": request.mode, "precision": request.precision,
                  "batch": request.batch, "status": "ok" if ok else "oom", "loss_warmup": 2.3, "loss_final": 2.2,
                  "versions": {"torch": "stand-in"}}
        return TrialOutcome(batch=request.batch, status=Status.OK if ok else Status.OOM, exit_code=0 if ok else 1,
                            result=result, runtime=self.name, peaks=MemoryPeaks(
                                device_delta_mib=800.0 + request.batch, framework_mib=float(request.batch)))

    def close(self):
        self.closed = True


def _setup(tmp_path: Path, strategy: str = "protocol", device: str = "cuda", engines=ENGS, start=8, maxb=64):
    names = ",".join(e.name for e in engines)
    cfg = MaxbatchConfig.from_flags(names, "both", device, None, 256, start, maxb, None, "local", "synthetic",
                                    None, False, None, 4, strategy, None)
    return cfg


def _runner(tmp_path, cfg, runtimes, gpu=True, engines=ENGS, doc=None, store=None, watchers=None):
    budget = make_budget(16376, 16376, 256) if gpu else None
    if doc is None:
        doc = new_doc("abc123", cfg, None, runtimes[0], engines)
        if gpu:
            doc["budget"] = budget.to_json()
    lanes = [Lane(rt, budget, (watchers[i] if watchers else (lambda b: NullWatcher())) if gpu else None,
                  {"index": i, "uuid": UUIDS[i]}) for i, rt in enumerate(runtimes)]
    plan = RunPlan(engines=engines, precisions=list(cfg.run.precisions),
                   base_request=TrialRequest("", "", "maxbatch", 1, "fp32", cfg.run.device),
                   search=cfg.search, strategy=cfg.strategy, timeout_s=120, budget=budget,
                   calibration_batch=cfg.calibration_batch, watcher_factory=lanes[0].watcher_factory)
    store = store or ArtifactStore.create(tmp_path, "maxbatch", "resnet50", "synthetic", stamp="T")
    return Runner(plan, runtimes[0], store, doc, PlainView(), lanes=lanes if len(lanes) > 1 else None)


def answers(doc):
    return {(c["engine"], c["precision"]): (c["search_status"], c["max_batch"], c["next_batch"])
            for c in doc["results"]}


@pytest.mark.parametrize("strategy", ["protocol", "guided"])
def test_two_gpus_run_cells_side_by_side_with_the_one_gpu_answers(tmp_path, strategy):
    cfg = _setup(tmp_path, strategy)
    one = _runner(tmp_path / "one", cfg, [LaneRuntime()]).run()
    barrier = threading.Barrier(2)
    rts = [LaneRuntime(barrier), LaneRuntime(barrier)]
    runner = _runner(tmp_path / "two", cfg, rts)
    two = runner.run()
    assert answers(two) == answers(one)
    assert all(v[0] == "bounded_by_memory_failure" for v in answers(two).values())
    # Every candidate (calibration too) names its GPU, and it is the lane that ran it. A cell
    # runs on the lane that calibrated it; only when no cell is left to start does the free lane
    # join a running one (speculation: candidates off the search's path are marked).
    for c in two["results"]:
        for lane, uuid in enumerate(UUIDS):
            ran = [b for e, p, b in rts[lane].batches if (e, p) == (c["engine"], c["precision"])]
            mine = [t["batch"] for t in c["trials"] if t["gpu"]["uuid"] == uuid]
            cal = [c["calibration"]["batch"]] if c["calibration"]["gpu"]["uuid"] == uuid else []
            assert ran == cal + mine
        assert cfg.cell_problem(c) is None
    assert all(rt.batches for rt in rts) and all(rt.closed for rt in rts)
    # The partial on disk is the whole document, as saved after the last candidate.
    assert answers(load(runner.store.partial)) == answers(two)


def test_a_lane_that_fails_stops_the_run_and_the_partial_resumes_to_the_same_answers(tmp_path):
    cfg = _setup(tmp_path)
    one = _runner(tmp_path / "one", cfg, [LaneRuntime()]).run()
    runner = _runner(tmp_path / "two", cfg, [LaneRuntime(), LaneRuntime(die_after=3)])
    with pytest.raises(RuntimeUnavailable):
        runner.run()
    partial = runner.store.partial
    runner.store.release()
    doc = load(partial)
    assert doc["state"] == "interrupted" and "daemon" in doc["interrupted_by"]
    assert any(c["state"] != "done" for c in doc["results"])
    for c in doc["results"]:  # what was recorded replays (what --resume checks)
        assert cfg.cell_problem(c) is None
    store, doc = open_for_resume(partial)
    rts = [LaneRuntime(), LaneRuntime()]
    done = _runner(tmp_path, cfg, rts, doc=doc, store=store).run()
    assert answers(done) == answers(one)
    assert done["state"] == "complete"


def test_two_fake_nvml_gpus_and_real_cpu_trials(tmp_path):
    """Real trials (PyTorch on CPU, local runtime), one real NvmlSampler per lane on its own
    device of the fake NVML, each with its own idle baseline: the same answers as one lane."""
    need_module("torch", "the local runtime runs the PyTorch trial on this interpreter")
    lib = FakeNvmlLib([FakeDevice(UUIDS[0], used_mib=(500.0,)), FakeDevice(UUIDS[1], used_mib=(900.0,))])
    nvml = Nvml(lib=lib)
    handles = [nvml.resolve(str(i))[1] for i in range(2)]
    engines = [ENGINES["pytorch-eager"]]
    cfg = _setup(tmp_path, device="cpu", engines=engines, start=2, maxb=4)
    samplers: list[NvmlSampler] = []

    def watcher_for(h):
        def make(budget_mib):
            s = NvmlSampler(nvml, h, budget_mib)
            samplers.append(s)
            return s
        return make

    def run(n):
        rts = [LocalRuntime(run_id=f"t{n}{i}") for i in range(n)]
        return _runner(tmp_path / str(n), cfg, rts, engines=engines,
                       watchers=[watcher_for(handles[i]) for i in range(n)]).run()
    one = run(1)
    two = run(2)
    assert answers(two) == answers(one) == {("pytorch-eager", "fp32"): ("censored_at_max_batch", 4, None),
                                            ("pytorch-eager", "bf16"): ("censored_at_max_batch", 4, None)}
    used = {c["calibration"]["gpu"]["uuid"] for c in two["results"]}
    assert used == set(UUIDS)  # both lanes ran a cell
    for c in two["results"]:
        baseline = c["calibration"]["peaks"]["baseline_mib"]
        assert baseline == (500.0 if c["calibration"]["gpu"]["uuid"] == UUIDS[0] else 900.0)
        assert all(t["status"] == "ok" and t["result"]["versions"] for t in c["trials"])


# -- the CLI: `kitctl run maxbatch --gpus`, in a real process whose NVML is the named fake --------

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

TESTS = Path(__file__).resolve().parent
FAKE_MAIN = """
import sys
sys.path.insert(0, {tests!r})
from fake_nvml import FakeDevice, FakeNvmlLib
import kitctl.core.gpu as g
real = g.Nvml
devices = [FakeDevice({a!r}), FakeDevice({b!r}, pci_bus_id="00000000:19:00.0"){third}]
g.Nvml = lambda lib=None: real(lib=FakeNvmlLib(devices))
from kitctl.cli import main
main()
"""


def fake_kitctl(tmp_path: Path, *args: str, third: str = "") -> subprocess.CompletedProcess:
    code = FAKE_MAIN.format(tests=str(TESTS), a=UUIDS[0], b=UUIDS[1], third=third)
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", code, "run", "maxbatch", "--runtime", "local",
                           "--results-dir", str(tmp_path / "results"), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("args, third, match", [
    (["--gpus", "0,0"], "", "GPU 0 is listed twice"),
    (["--gpus", "0,7"], "", "--gpus: 7: no such GPU"),
    (["--gpus", "0,,1"], "", "--gpus takes indices or UUIDs"),
    (["--gpus", "all,1"], "", "--gpus takes indices or UUIDs"),
    (["--gpus", "0,1", "--device", "cpu"], "", "needs --device cuda"),
    (["--gpus", "0,1", "--gpu", "1"], "", "--gpu and --gpus: give one"),
    (["--gpus", "0"], "", "list at least two GPUs"),
    (["--gpus", "all"], ', FakeDevice("GPU-c", name="NVIDIA H100 80GB HBM3")', "not the same kind of card"),
])
def test_gpus_refusals_are_one_line_exit_2_nothing_written(tmp_path, args, third, match):
    p = fake_kitctl(tmp_path, "--engines", "pytorch-eager", *args, third=third)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert match in p.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_gpus_all_places_cells_on_both_gpus_and_records_them(tmp_path):
    # This host has no CUDA, so each real trial fails at its calibration (one candidate per
    # cell): enough to see both cells start on different GPUs, side by side, and be recorded.
    p = fake_kitctl(tmp_path, "--engines", "pytorch-eager", "--precision", "both", "--gpus", "all",
                    "--start-batch", "2", "--max-batch", "4", "--calibration-batch", "2")
    assert "Traceback" not in p.stderr, p.stderr
    [art] = list((tmp_path / "results").glob("maxbatch-*.json"))
    doc = json.loads(art.read_text())
    assert doc["configuration"]["gpus"] == "all"
    assert [g["uuid"] for g in doc["host"]["gpus"]] == UUIDS
    cal = {c["precision"]: c["calibration"]["gpu"] for c in doc["results"]}
    assert {g["uuid"] for g in cal.values()} == set(UUIDS)
    assert all(c["search_status"] == "invalid_non_memory_failure" for c in doc["results"])


def test_a_gpus_partial_resumes_on_its_gpus(tmp_path):
    """A --gpus run's partial (here: the finished run turned back into a partial with one cell not
    yet run) resumes: the lanes are reopened from the recorded configuration, the missing cell runs
    on one of them, and the artifact still lists both cards."""
    p = fake_kitctl(tmp_path, "--engines", "pytorch-eager", "--precision", "both", "--gpus", "0,1",
                    "--start-batch", "2", "--max-batch", "4", "--calibration-batch", "2")
    assert "Traceback" not in p.stderr, p.stderr
    [art] = list((tmp_path / "results").glob("maxbatch-*.json"))
    doc = json.loads(art.read_text())
    doc["state"] = "interrupted"
    doc["results"] = [c for c in doc["results"] if c["precision"] == "fp32"]
    partial = art.with_name(art.name.replace(".json", ".partial.json"))
    partial.write_text(json.dumps(doc))
    art.unlink()
    code = FAKE_MAIN.format(tests=str(TESTS), a=UUIDS[0], b=UUIDS[1], third="")
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", code, "run", "maxbatch", "--resume", str(partial)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert "Traceback" not in r.stderr and r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]
    final = json.loads(art.read_text())
    assert final["configuration"]["gpus"] == "0,1"
    assert [g["uuid"] for g in final["host"]["gpus"]] == UUIDS
    bf16 = next(c for c in final["results"] if c["precision"] == "bf16")
    assert bf16["calibration"]["gpu"]["uuid"] in UUIDS


class BlockingRuntime(LaneRuntime):
    """Its calibration passes; its first search candidate runs until the kit interrupts it."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = threading.Event()
        self.started = threading.Event()

    def run(self, request, *, timeout_s, watcher=None):
        if len(self.batches) == 1:  # after the calibration
            self.started.set()
            assert self.interrupted.wait(30), "never interrupted"
            return TrialOutcome(batch=request.batch, status=Status.CRASH, runtime=self.name)
        return super().run(request, timeout_s=timeout_s, watcher=watcher)

    def interrupt(self):
        self.interrupted.set()


def test_a_signal_stops_every_lane_and_keeps_a_resumable_partial(tmp_path):
    import os as _os
    import signal as _signal

    from kitctl.core.signals import Interrupted

    cfg = _setup(tmp_path)
    rts = [BlockingRuntime(), BlockingRuntime()]
    runner = _runner(tmp_path, cfg, rts)

    def kill_when_both_run():
        for rt in rts:
            rt.started.wait(30)
        _os.kill(_os.getpid(), _signal.SIGINT)
    threading.Thread(target=kill_when_both_run, daemon=True).start()
    with pytest.raises(Interrupted):
        runner.run()
    assert all(rt.interrupted.is_set() for rt in rts)  # each lane's running candidate was killed
    doc = load(runner.store.partial)
    assert doc["state"] == "interrupted" and doc["interrupted_by"] == "SIGINT"
    # The killed candidates are not recorded (only the calibrations are): nothing to mistake for a result.
    assert all(c["trials"] == [] and c["calibration"]["status"] == "ok" for c in doc["results"])
    assert not any(t.name.startswith("lane-") for t in threading.enumerate())
