"""The runner's own logic (calibration order, partial saving, a runtime that goes away),
driven by a scripted runtime: a stand-in for the real runtimes, which other tests run for real."""
from __future__ import annotations

from pathlib import Path

import pytest

from kitctl.core.artifact import ArtifactStore, load
from kitctl.core.budget import make_budget
from kitctl.benchmarks.maxbatch.config import MaxbatchConfig
from kitctl.run.document import new_doc as _new_doc
from kitctl.core.engines import ENGINES
from kitctl.core.outcome import MemoryPeaks, Status, TrialOutcome
from kitctl.core.protocol import TrialRequest
from kitctl.benchmarks.maxbatch.run import Runner, RunPlan
from kitctl.runtimes.base import Runtime, RuntimeUnavailable
from kitctl.benchmarks.maxbatch.search.protocol import SearchConfig
from kitctl.cli.view import PlainView


class ScriptedRuntime(Runtime):
    """Stand-in runtime: capacity `cap` MiB-per-image arithmetic, no process is started."""

    name = "local"

    def __init__(self, capacity: int, die_after: int | None = None) -> None:
        self.capacity = capacity
        self.die_after = die_after
        self.requests: list[TrialRequest] = []

    def run(self, request, *, timeout_s, watcher=None):
        if self.die_after is not None and len(self.requests) >= self.die_after:
            raise RuntimeUnavailable("the Docker daemon stopped answering")
        self.requests.append(request)
        ok = request.batch <= self.capacity
        peaks = MemoryPeaks(device_delta_mib=800.0 + request.batch, framework_mib=float(request.batch), samples=3)
        result = {"protocol": 1, "engine": request.engine, "mode": request.mode, "precision": request.precision,
                  "batch": request.batch, "status": "ok" if ok else "oom", "loss_warmup": 2.3, "loss_final": 2.2,
                  "versions": {"torch": "stand-in"}}
        return TrialOutcome(batch=request.batch, status=Status.OK if ok else Status.OOM, exit_code=0 if ok else 1,
                            result=result, peaks=peaks, runtime=self.name)


class NullWatcher:
    def prepare(self): ...
    def start(self, handle): ...
    def stop(self): return MemoryPeaks()
    over_budget = False


def _runner(tmp_path: Path, rt: Runtime, gpu: bool) -> Runner:
    cfg = MaxbatchConfig.from_flags("pytorch-eager", "fp32", "cuda" if gpu else "cpu", None, 256, 8, 64, None, "local",
                         "synthetic", None, False, None, 4, "protocol", None)
    doc = _new_doc("abc123", cfg, None, rt, [ENGINES["pytorch-eager"]])
    budget = make_budget(16376, 16376, 256) if gpu else None
    if gpu:
        doc["budget"] = budget.to_json()
    plan = RunPlan(engines=[ENGINES["pytorch-eager"]], precisions=["fp32"],
                   base_request=TrialRequest("", "", "maxbatch", 1, "fp32", "cuda" if gpu else "cpu"),
                   search=SearchConfig(8, 64, min_batch=2), strategy="protocol", timeout_s=10, budget=budget,
                   calibration_batch=4, watcher_factory=(lambda b: NullWatcher()) if gpu else None)
    store = ArtifactStore.create(tmp_path, "maxbatch", "resnet50", "synthetic", stamp="T")
    return Runner(plan, rt, store, doc, PlainView())


def test_calibration_comes_first_and_sets_the_framework_budget(tmp_path):
    rt = ScriptedRuntime(capacity=20)
    doc = _runner(tmp_path, rt, gpu=True).run()
    cell = doc["results"][0]
    assert rt.requests[0].batch == 4 and rt.requests[0].memory_budget_mib is None
    assert cell["overhead"]["overhead_mib"] == 800.0  # delta (804) − framework (4)
    assert cell["framework_budget_mib"] == 16120 - 800
    assert all(r.memory_budget_mib == 15320 for r in rt.requests[1:])
    assert (cell["max_batch"], cell["next_batch"]) == (20, 21)


def test_a_runtime_that_goes_away_keeps_a_resumable_partial(tmp_path):
    runner = _runner(tmp_path, ScriptedRuntime(capacity=20, die_after=2), gpu=False)
    with pytest.raises(RuntimeUnavailable):
        runner.run()
    doc = load(runner.store.partial)
    assert doc["state"] == "interrupted" and "daemon" in doc["interrupted_by"]
    assert [t["batch"] for t in doc["results"][0]["trials"]] == [8, 16]
