"""Speculation in the runner: with more GPUs than cells, free lanes run further candidates of a
running cell. The answers equal the one-GPU run's, the candidates the answer uses are exactly
the one-GPU run's candidates, every candidate records its GPU and whether it is on the path, and
an interrupted run resumes to the same answer.

Stand-ins as in tests/test_gpus.py: a scripted runtime (capacity arithmetic, monotone or not,
no process) for the bounded answers, and the named fake NVML (tests/fake_nvml.py) for GPUs
this host lacks, beside real PyTorch trials on CPU through the CLI.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from test_gpus import FAKE_MAIN, TESTS, UUIDS, _setup, answers
from test_runner import NullWatcher

from kitctl.benchmarks.maxbatch.config import MaxbatchConfig
from kitctl.benchmarks.maxbatch.run import Lane, Runner, RunPlan
from kitctl.benchmarks.maxbatch.cells import cell_search, trial_entry
from kitctl.benchmarks.maxbatch.search.strategies import STRATEGIES
from kitctl.benchmarks.maxbatch.search.speculate import replay
from kitctl.core.artifact import ArtifactStore, load, open_for_resume
from kitctl.core.budget import make_budget
from kitctl.core.engines import ENGINES
from kitctl.core.outcome import MemoryPeaks, Status, TrialOutcome
from kitctl.core.protocol import TrialRequest
from kitctl.run.document import new_doc
from kitctl.runtimes.base import Runtime, RuntimeUnavailable
from kitctl.cli.view import PlainView
from conftest import need_module  # noqa: E402

UUIDS3 = [*UUIDS, "GPU-00000000-0000-0000-0000-00000000000c"]
EAGER = [ENGINES["pytorch-eager"]]


class Scripted(Runtime):
    """Stand-in runtime for one GPU: `passes(batch)` decides (any function), peak = 800 + 1.5 ×
    batch MiB; each candidate takes `delay` seconds so that the lanes overlap."""

    name = "local"

    def __init__(self, passes, delay: float = 0.03, die_after: int | None = None) -> None:
        self.passes = passes
        self.delay = delay
        self.die_after = die_after
        self.batches: list[int] = []

    def run(self, request, *, timeout_s, watcher=None):
        if self.die_after is not None and len(self.batches) >= self.die_after:
            raise RuntimeUnavailable("the Docker daemon stopped answering")
        time.sleep(self.delay)
        self.batches.append(request.batch)
        ok = self.passes(request.batch)
        result = {"protocol": 1, "engine": request.engine, "mode": request.mode, "precision": request.precision,
                  "batch": request.batch, "status": "ok" if ok else "oom", "loss_warmup": 2.3, "loss_final": 2.2,
                  "versions": {"torch": "stand-in"}}
        return TrialOutcome(batch=request.batch, status=Status.OK if ok else Status.OOM, exit_code=0 if ok else 1,
                            result=result, runtime=self.name, peaks=MemoryPeaks(
                                device_delta_mib=800.0 + 1.5 * request.batch, framework_mib=float(request.batch)))

    def close(self):
        pass


def runner(tmp_path: Path, cfg, rts, speculate=True, doc=None, store=None, budgets=None) -> Runner:
    budget = make_budget(16376, 16376, 256)
    if doc is None:
        doc = new_doc("abc123", cfg, None, rts[0], EAGER)
        doc["budget"] = budget.to_json()
    lanes = [Lane(rt, (budgets[i] if budgets else budget), lambda b: NullWatcher(), {"index": i, "uuid": UUIDS3[i]})
             for i, rt in enumerate(rts)]
    plan = RunPlan(engines=EAGER, precisions=list(cfg.run.precisions),
                   base_request=TrialRequest("", "", "maxbatch", 1, "fp32", cfg.run.device),
                   search=cfg.search, strategy=cfg.strategy, timeout_s=120, budget=budget,
                   calibration_batch=cfg.calibration_batch, watcher_factory=lanes[0].watcher_factory)
    store = store or ArtifactStore.create(tmp_path, "maxbatch", "resnet50", "synthetic", stamp="T")
    return Runner(plan, rts[0], store, doc, PlainView(), lanes=lanes if len(lanes) > 1 else None,
                  speculate=speculate)


def config(strategy: str):
    cfg = _setup(None, strategy, engines=EAGER, start=8, maxb=400)
    return replace(cfg, run=replace(cfg.run, precisions=("fp32",)))


PASSES = {
    "monotone": lambda b: b <= 203,
    # Not monotone: a failure below the boundary the search may or may not meet, passes above it.
    "holes": lambda b: b <= 203 and b not in (100, 150, 160) or 300 <= b <= 310,
    "none": lambda b: False,
    "censored": lambda b: True,
}


def on_path_batches(cell, cfg):
    """The batches the answer uses, in the order the sequential search asks for them (lanes record
    them in the order they end)."""
    r = replay(STRATEGIES[cfg.strategy], [trial_entry(t) for t in cell["trials"]], cell_search(cfg.search, cell))
    assert sorted(r.path) == [i for i, t in enumerate(cell["trials"]) if t["on_path"]]
    return [cell["trials"][i]["batch"] for i in r.path]


@pytest.mark.parametrize("strategy", ["protocol", "guided"])
@pytest.mark.parametrize("case", list(PASSES))
@pytest.mark.parametrize("n", [2, 3])
def test_one_cell_on_n_gpus_has_the_one_gpu_answer(tmp_path, strategy, case, n):
    cfg = config(strategy)
    one = runner(tmp_path / "one", cfg, [Scripted(PASSES[case])]).run()
    rts = [Scripted(PASSES[case]) for _ in range(n)]
    r = runner(tmp_path / "n", cfg, rts)
    many = r.run()
    assert answers(many) == answers(one)
    [c1], [cn] = one["results"], many["results"]
    # The answer's candidates are the one-GPU run's, in the order it ran them; the rest are marked.
    assert on_path_batches(cn, cfg) == [t["batch"] for t in c1["trials"]]
    assert all(t["on_path"] for t in c1["trials"])
    assert cfg.cell_problem(cn) is None  # what --resume checks
    # Each candidate names the GPU that ran it; with a search of more than one candidate, every
    # lane ran some (speculation is on by default).
    ran = {UUIDS3[i]: sorted(rt.batches) for i, rt in enumerate(rts)}
    for u in ran:
        assert sorted([cn["calibration"]["batch"]] * (cn["calibration"]["gpu"]["uuid"] == u)
                      + [t["batch"] for t in cn["trials"] if t["gpu"]["uuid"] == u]) == ran[u]
    if len(c1["trials"]) > 2:
        assert len({t["gpu"]["uuid"] for t in cn["trials"]}) >= 2
    assert load(r.store.partial)["results"][0]["trials"] == cn["trials"]


def test_no_speculate_keeps_a_cell_on_its_gpu(tmp_path):
    cfg = config("protocol")
    rts = [Scripted(PASSES["monotone"]), Scripted(PASSES["monotone"])]
    doc = runner(tmp_path, cfg, rts, speculate=False).run()
    [c] = doc["results"]
    assert len({t["gpu"]["uuid"] for t in c["trials"]}) == 1 and all(t["on_path"] for t in c["trials"])
    assert sum(1 for rt in rts if rt.batches) == 1


def test_a_lane_with_another_budget_does_not_join(tmp_path):
    """The cell's calibration (framework budget) holds only on a lane with the same budget."""
    cfg = config("protocol")
    rts = [Scripted(PASSES["monotone"]), Scripted(PASSES["monotone"])]
    budgets = [make_budget(16376, 16376, 256), make_budget(16376, 8000, 256)]
    doc = runner(tmp_path, cfg, rts, budgets=budgets).run()
    [c] = doc["results"]
    assert len({t["gpu"]["uuid"] for t in c["trials"]}) == 1


def test_a_failed_lane_leaves_a_partial_that_resumes_to_the_same_answer(tmp_path):
    cfg = config("protocol")
    one = runner(tmp_path / "one", cfg, [Scripted(PASSES["holes"])]).run()
    r = runner(tmp_path / "two", cfg, [Scripted(PASSES["holes"]), Scripted(PASSES["holes"], die_after=4)])
    with pytest.raises(RuntimeUnavailable):
        r.run()
    partial = r.store.partial
    r.store.release()
    doc = load(partial)
    assert doc["state"] == "interrupted" and doc["results"][0]["state"] != "done"
    assert cfg.cell_problem(doc["results"][0]) is None
    store, doc = open_for_resume(partial)
    rts = [Scripted(PASSES["holes"]) for _ in range(3)]
    done = runner(tmp_path, cfg, rts, doc=doc, store=store).run()
    assert answers(done) == answers(one) and done["state"] == "complete"
    assert on_path_batches(done["results"][0], cfg) == [t["batch"] for t in one["results"][0]["trials"]]


def test_a_tampered_path_flag_is_refused_on_resume(tmp_path):
    cfg = config("protocol")
    doc = runner(tmp_path, cfg, [Scripted(PASSES["holes"]) for _ in range(3)]).run()
    [c] = doc["results"]
    off = [t for t in c["trials"] if not t["on_path"]]
    on = [t for t in c["trials"] if t["on_path"]]
    if off:
        off[0]["on_path"] = True
        assert "where the search asks for" in cfg.cell_problem(c) or "after the search" in cfg.cell_problem(c)
        off[0]["on_path"] = False
    on[-1]["on_path"] = False
    assert "marked speculative" in cfg.cell_problem(c)


# -- the CLI: `kitctl run maxbatch --gpus`, real PyTorch trials on CPU, a fake NVML of 3 GPUs --------

# The named stand-ins of this host's missing GPUs: the fake NVML (as in test_gpus.py), and the local
# runtime told to run each "cuda" candidate on the CPU (the real trial, real PyTorch).
CPU_SHIM = """
import dataclasses
from kitctl.runtimes.local import LocalRuntime
_run = LocalRuntime.run
LocalRuntime.run = lambda self, request, **kw: _run(self, dataclasses.replace(request, device="cpu"), **kw)
"""
THIRD = f', FakeDevice({UUIDS3[2]!r}, pci_bus_id="00000000:1A:00.0")'


def cli(tmp_path: Path, *args: str) -> subprocess.Popen:
    code = FAKE_MAIN.format(tests=str(TESTS), a=UUIDS[0], b=UUIDS[1], third=THIRD)
    code = code.replace("from kitctl.cli import main", CPU_SHIM + "from kitctl.cli import main")
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen([sys.executable, "-c", code, "run", "maxbatch", *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


FLAGS = ["--runtime", "local", "--engines", "pytorch-eager", "--precision", "fp32", "--start-batch", "2",
         "--max-batch", "8", "--calibration-batch", "2"]


def test_cli_one_cell_on_three_gpus_real_cpu_trials_interrupted_and_resumed(tmp_path):
    need_module("torch", "the local runtime runs the PyTorch trial on this interpreter")
    results = tmp_path / "results"
    one = cli(tmp_path, *FLAGS, "--gpu", "0", "--results-dir", str(results / "one"))
    out, errs = one.communicate(timeout=600)
    assert "Traceback" not in errs, errs
    [art1] = (results / "one").glob("maxbatch-*.json")
    ref = json.loads(art1.read_text())
    assert answers(ref) == {("pytorch-eager", "fp32"): ("censored_at_max_batch", 8, None)}

    # Three GPUs: interrupted (SIGINT) once the partial holds a candidate, then resumed.
    p = cli(tmp_path, *FLAGS, "--gpus", "all", "--results-dir", str(results / "three"))
    deadline = time.time() + 400
    partial = None
    while time.time() < deadline and p.poll() is None:
        found = list((results / "three").glob("*.partial.json")) if (results / "three").exists() else []
        if found:
            doc = json.loads(found[0].read_text() or "{}") if found[0].stat().st_size else {}
            if any(c.get("trials") for c in doc.get("results", [])):
                partial = found[0]
                p.send_signal(signal.SIGINT)
                break
        time.sleep(0.2)
    p.communicate(timeout=120)
    assert partial is not None, "no candidate recorded before the run ended"
    doc = json.loads(partial.read_text())
    assert doc["state"] == "interrupted"
    r = cli(tmp_path, "--resume", str(partial))
    out, errs = r.communicate(timeout=600)
    assert "Traceback" not in errs and r.returncode == 0, out[-2000:] + errs[-2000:]
    [art] = (results / "three").glob("maxbatch-*[0-9]Z.json")
    final = json.loads(art.read_text())
    assert answers(final) == answers(ref)
    assert final["configuration"]["speculate"] is True
    [c], [c1] = final["results"], ref["results"]
    assert on_path_batches(c, MaxbatchConfig.from_json(final["configuration"])) == [t["batch"] for t in c1["trials"]]
    assert all(t["gpu"]["uuid"] in UUIDS3 and t["status"] == "ok" for t in c["trials"])
    assert len({t["gpu"]["uuid"] for t in c["trials"]}) >= 2  # the cell's candidates ran on several GPUs
    assert all(t["result"]["versions"] for t in c["trials"])


def test_the_report_counts_speculative_candidates_and_brackets_with_the_path(tmp_path):
    from types import SimpleNamespace

    from kitctl.benchmarks.maxbatch.report import meta_count, progress

    cfg = config("protocol")
    doc = runner(tmp_path, cfg, [Scripted(PASSES["holes"]) for _ in range(3)]).run()
    [c] = doc["results"]
    off = sum(1 for t in c["trials"] if not t["on_path"])
    text = meta_count(SimpleNamespace(doc=doc))
    assert text.startswith(f"{len(c['trials'])} candidates")
    assert (f"({off} speculative, off the search's path)" in text) == (off > 0)
    # A speculative pass above the path's smallest failure is not the search's bracket.
    c["trials"].append({**c["trials"][-1], "batch": 10**6, "status": "ok", "on_path": False})
    assert "1,000,000" not in progress(SimpleNamespace(doc=doc), c)


def test_two_cells_on_three_gpus_the_free_gpu_helps_both_answers_stay(tmp_path):
    """More GPUs than cells: each cell starts on its own GPU and the third one joins a running
    cell; both answers and paths equal the one-GPU run's."""
    cfg = _setup(None, "protocol", engines=EAGER, start=8, maxb=400)  # fp32 and bf16
    one = runner(tmp_path / "one", cfg, [Scripted(PASSES["holes"])]).run()
    rts = [Scripted(PASSES["holes"]) for _ in range(3)]
    many = runner(tmp_path / "three", cfg, rts).run()
    assert answers(many) == answers(one) and len(answers(one)) == 2
    by = {c["precision"]: c for c in one["results"]}
    for c in many["results"]:
        assert on_path_batches(c, cfg) == [t["batch"] for t in by[c["precision"]]["trials"]]
    assert {c["calibration"]["gpu"]["uuid"] for c in many["results"]} != {None}
    assert all(rt.batches for rt in rts)  # the third GPU ran candidates though it had no cell of its own
