"""Cancelling speculative candidates the search can no longer use (benchmarks/maxbatch/search/speculate.py `useless`,
the max-batch runner): the cancelled candidate's processes are gone, its lane moves on, the
answer and its path equal the one-lane run's, the cancellation is recorded beside the trials
(never as a capacity), the report counts it and `--resume` of a partial holding one replays to
the same answer.

Real parts: the local runtime (process group, its interrupt: the Ctrl-C path) and real
processes. The one stand-in is the trial program (`SLOW_TRIAL`, named): a few lines of Python
that answer by a capacity rule after a batch-dependent sleep, and leave a child process behind
in their group, so that a candidate on the path ends quickly while a speculative one above it
would run for a minute.
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from test_gpus import _setup, answers
from test_speculate_lanes import EAGER, UUIDS3, on_path_batches

from kitctl.benchmarks.maxbatch.report import meta_count
from kitctl.benchmarks.maxbatch.run import Lane, Runner, RunPlan
from kitctl.core.artifact import ArtifactStore, load, open_for_resume
from kitctl.core.protocol import TrialRequest
from kitctl.run.document import new_doc
from kitctl.runtimes.local import LocalRuntime
from kitctl.cli.view import PlainView

CAP = 203  # passes at or below
SLOW_ABOVE = 300  # a candidate above runs 60 s: only a cancellation ends it early

# Stand-in trial program: argv = batch, folder for pid files. Records its pid and its child's.
SLOW_TRIAL = f"""
import json, os, subprocess, sys, time
b, d = int(sys.argv[1]), sys.argv[2]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(90)"])
open(os.path.join(d, f"{{b}}-{{os.getpid()}}-{{child.pid}}"), "w").close()
time.sleep(60 if b > {SLOW_ABOVE} else 2.0 if b > 200 else 0.05)
ok = b <= {CAP}
child.kill()
print("KIT-RESULT " + json.dumps({{"protocol": 1, "engine": "pytorch-eager", "mode": "eager", "precision": "fp32",
      "batch": b, "status": "ok" if ok else "oom", "loss_warmup": 2.3, "loss_final": 2.2,
      "versions": {{"torch": "stand-in"}}, "error": None if ok else "out of memory (stand-in)"}}))
sys.exit(0 if ok else 1)
"""


class SlowTrialRuntime(LocalRuntime):
    """The local runtime, unchanged, running the stand-in trial program instead of PyTorch."""

    def __init__(self, pids: Path, run_id: str) -> None:
        super().__init__(run_id=run_id)
        self.pids = pids

    def command(self, request):
        return [sys.executable, "-c", SLOW_TRIAL, str(request.batch), str(self.pids)]


def config(maxb: int = 4096):
    cfg = _setup(None, "protocol", device="cpu", engines=EAGER, start=8, maxb=maxb)
    return replace(cfg, run=replace(cfg.run, precisions=("fp32",)))


def runner(tmp_path: Path, cfg, rts, doc=None, store=None) -> Runner:
    if doc is None:
        doc = new_doc("abc123", cfg, None, rts[0], EAGER)
    lanes = [Lane(rt, None, None, {"index": i, "uuid": UUIDS3[i]}) for i, rt in enumerate(rts)]
    plan = RunPlan(engines=EAGER, precisions=["fp32"],
                   base_request=TrialRequest("", "", "maxbatch", 1, "fp32", "cpu"),
                   search=cfg.search, strategy=cfg.strategy, timeout_s=120, budget=None,
                   calibration_batch=cfg.calibration_batch, watcher_factory=None)
    store = store or ArtifactStore.create(tmp_path, "maxbatch", "resnet50", "synthetic", stamp="T")
    return Runner(plan, rts[0], store, doc, PlainView(), lanes=lanes if len(lanes) > 1 else None)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone too (nothing left to kill)
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_useless_speculation_is_killed_recorded_apart_and_resumes_to_the_same_answer(tmp_path):
    cfg = config()
    pids = tmp_path / "pids"
    pids.mkdir()
    one = runner(tmp_path / "one", cfg, [SlowTrialRuntime(pids, "c1")]).run()
    assert answers(one) == {("pytorch-eager", "fp32"): ("bounded_by_memory_failure", CAP, CAP + 1)}
    assert not one["results"][0].get("cancelled")
    for f in pids.iterdir():
        f.unlink()

    # Two lanes: 128 and 256 run side by side; 128 passes first, its lane speculates on 512 (256 passing: while
    # the search doubles towards --max-batch 4,096, the likelier outcome); 256 fails two seconds later and 512 is
    # cancelled.
    r = runner(tmp_path / "two", cfg, [SlowTrialRuntime(pids, "c2a"), SlowTrialRuntime(pids, "c2b")])
    two = r.run()
    [c], [c1] = two["results"], one["results"]
    assert answers(two) == answers(one)
    assert on_path_batches(c, cfg) == [t["batch"] for t in c1["trials"]]
    assert cfg.cell_problem(c) is None
    gone = c["cancelled"]  # 512, and speculations of the bisection below that a result made moot
    [top] = [g for g in gone if g["batch"] == 512]
    assert top["elapsed_s"] < 60  # killed, not ended: the stand-in sleeps 60 s above 300
    for g in gone:
        assert g["killed_by"] == "kit_interrupt" and g["on_path"] is False and g["gpu"]["uuid"] in UUIDS3
        assert "no longer use" in g["cancelled_because"]
    assert all(t["batch"] <= SLOW_ABOVE for t in c["trials"])  # never among the trials
    # Its processes and the child in their group are gone (the local runtime's group kill).
    started = [f.name.split("-") for f in pids.iterdir()]
    [(_, pid, child)] = [p for p in started if p[0] == "512"]
    assert not alive(int(pid)) and not alive(int(child))
    assert not any(alive(int(p[1])) or alive(int(p[2])) for p in started)
    # The artifact on disk carries them; the report counts them apart from the measured candidates.
    assert load(r.store.partial)["results"][0]["cancelled"] == gone
    text = meta_count(SimpleNamespace(doc=two))
    assert text.startswith(f"{len(c['trials'])} candidates")
    assert f"+ {len(gone)} speculative cancelled unfinished" in text

    # A partial holding the cancellation (the search cut after its 6th candidate) resumes, on
    # one lane, to the one-lane answer and path; the cancellation stays recorded, unread.
    doc = {**two, "state": "interrupted"}
    cut = {**c, "state": "running", "trials": c["trials"][:6], "search_status": None, "max_batch": None,
           "next_batch": None}
    doc["results"] = [cut]
    assert cfg.cell_problem(cut) is None
    partial = ArtifactStore.create(tmp_path / "resume", "maxbatch", "resnet50", "synthetic", stamp="R")
    partial.save_partial(doc)
    partial.release()
    store, doc = open_for_resume(partial.partial)
    done = runner(tmp_path, cfg, [SlowTrialRuntime(pids, "c3")], doc=doc, store=store).run()
    assert answers(done) == answers(one) and done["state"] == "complete"
    [c3] = done["results"]
    assert on_path_batches(c3, cfg) == [t["batch"] for t in c1["trials"]]
    assert c3["cancelled"] == gone


# -- the Docker runtime: the same cancel (its interrupt, from another lane's thread) -----------

@pytest.mark.docker
def test_docker_interrupt_from_another_thread_ends_the_run_and_removes_the_container(request):
    """What the runner relies on: `interrupt()` called by another lane's thread ends the lane's
    `run` normally (no exception in the lane), killed_by kit_interrupt (no memory failure, no
    pass), and the container is gone. A real container of the CI pytorch image, hanging."""
    client, image = request.getfixturevalue("client"), request.getfixturevalue("image")
    from kitctl.core.outcome import KilledBy, MemoryPeaks
    from kitctl.runtimes.docker import LABEL_RUN_ID, DockerRuntime, remove_run_containers

    run_id = f"test-speccancel-{os.getpid()}"
    rt = DockerRuntime(image, run_id=run_id, device="cpu", client=client, env={"KIT_TRIAL_FAULT": "hang"})
    seen: list[str] = []

    class CancelOnStart:  # a watcher that, like the runner's cancel, interrupts from another thread
        over_budget = False

        def prepare(self) -> None: ...

        def start(self, handle) -> None:
            seen.append(handle.container.id)
            threading.Timer(1.0, rt.interrupt).start()

        def stop(self) -> MemoryPeaks:
            return MemoryPeaks()

    try:
        out = rt.run(TrialRequest("pytorch-eager", "eager", "maxbatch", 400, "fp32", "cpu", model="resnet50",
                                  dataset="synthetic"), timeout_s=120, watcher=CancelOnStart())
        assert seen and out.killed_by is KilledBy.KIT_INTERRUPT and out.elapsed_s < 60
        assert not out.passed and not out.status.is_memory_failure
        assert client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}={run_id}"}) == []
    finally:
        remove_run_containers(client, run_id)
        rt.close()
