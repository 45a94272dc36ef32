"""--prestart: the local runtime starts the next PyTorch candidate's process before its batch is known.

Real processes on the CPU: the trial imports torch, waits for its arguments on stdin, then runs as a fresh
process would. Checked: the same search and answers as without it, where the time is recorded, a spare never
serves another environment or another thread, no process left behind, and the flag's refusals.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

from kitctl.core.protocol import TrialRequest
from kitctl.runtimes.local import PRESTART_DEPTH, PRESTART_ENV, WARM_DEPTH, LocalRuntime

ROOT = Path(__file__).resolve().parents[1]
TRIAL = ROOT / "trials" / "pytorch" / "trial.py"
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
CPU = ["run", "maxbatch", "--device", "cpu", "--runtime", "local", "--engines", "pytorch-eager",
       "--precision", "fp32", "--image-size", "32", "--start-batch", "4", "--max-batch", "8",
       "--memory-limit", "6000"]


def prestarted_pids(value: str = "1") -> set[int]:
    """Processes of this user started with the prestart variable set to `value` ("1": a spare, waiting or not;
    "fork": a fork server and what it forked)."""
    out = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if f"{PRESTART_ENV}={value}".encode() in (d / "environ").read_bytes().split(b"\0"):
                out.add(int(d.name))
        except OSError:
            continue
    return out


def run_kit(tmp_path: Path, *extra: str) -> dict:
    before = prestarted_pids()
    r = subprocess.run([*ENTRY, *CPU, "--results-dir", str(tmp_path), *extra], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode in (0, 3), r.stdout + r.stderr
    assert prestarted_pids() - before == set(), "a prestarted process outlived the run"
    (art,) = [p for p in tmp_path.glob("maxbatch-*.json") if not p.name.endswith(".partial.json")]
    tmp_path.joinpath("done").mkdir(exist_ok=True)
    art.rename(tmp_path / "done" / art.name)
    return json.loads((tmp_path / "done" / art.name).read_text())


def test_prestart_gives_the_same_search_and_records_where_its_time_went(tmp_path):
    plain = run_kit(tmp_path)
    pre = run_kit(tmp_path, "--prestart")
    assert pre["configuration"]["prestart"] is True
    assert "prestart" not in plain["configuration"]  # off: recorded exactly as before the flag
    (a,), (b,) = plain["results"], pre["results"]
    assert [(t["batch"], t["status"]) for t in a["trials"]] == [(t["batch"], t["status"]) for t in b["trials"]]
    assert (a["max_batch"], a["next_batch"]) == (b["max_batch"], b["next_batch"])
    for t in b["trials"]:
        res = t["result"]
        assert res["status"] == "ok" and res["batch"] == t["batch"]
        # the process start and torch's import happened before the candidate: under prestart, not in phases
        assert set(res["prestart"]) == {"startup_s", "import_s", "waited_s"}
        assert res["prestart"]["import_s"] > 0.05
        assert "startup_s" not in res["phases"] and res["phases"]["import_s"] < 0.05
        assert res["phases"]["build_optimizer_s"] < 0.05  # torch._dynamo came with the preload
    for t in a["trials"]:
        assert "prestart" not in t["result"] and t["result"]["phases"]["startup_s"] >= 0
    # the CPU each candidate used, over a wall time inside the host's (a prestarted one's from its arguments)
    for t in a["trials"] + b["trials"]:
        cpu = t["result"]["cpu"]
        assert cpu["cpu_s"] > 0 and 0 < cpu["wall_s"] <= t["elapsed_s"] + 0.5
        assert cpu["cores"] == round(cpu["cpu_s"] / cpu["wall_s"], 2)
    # the report says where the prestarted candidates' start-up went
    (art,) = [p for p in (tmp_path / "done").glob("*.json") if json.loads(p.read_text()) == pre]
    r = subprocess.run([*ENTRY, "report", str(art), "--out", str(tmp_path / "r.md")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "r.md").read_text()
    assert f"{len(b['trials'])} prestarted, ahead of the candidate" in text
    assert "cores busy (median)" in text


def _request(batch: int) -> TrialRequest:
    return TrialRequest(engine="pytorch-eager", mode="eager", benchmark="maxbatch", batch=batch, precision="fp32",
                        device="cpu", image_size=32)


def test_a_spare_serves_only_its_environment_and_its_thread(tmp_path, monkeypatch):
    monkeypatch.setenv("KITCTL_RUN_STATE_DIR", str(tmp_path))
    rt = LocalRuntime(run_id="prestart-test", prestart=True, memory_limit_mib=6000)
    try:
        first = rt.run(_request(2), timeout_s=120)
        assert first.status.value == "ok", first
        spares = list(rt._spares)
        assert len(spares) == PRESTART_DEPTH and all(x.proc.poll() is None for x in spares)  # the next ones wait
        second = rt.run(_request(2), timeout_s=120)  # takes the oldest spare, starts one more
        assert second.status.value == "ok"
        assert spares[0].proc.returncode is not None and rt._spares[:-1] == spares[1:]
        # another environment: the waiting spares are not used (their variables were fixed at their start)
        spares = list(rt._spares)
        rt.extra_env["KIT_TEST_MARK"] = "1"
        third = rt.run(_request(2), timeout_s=120)
        assert third.status.value == "ok"
        assert all(x.proc.returncode is not None for x in spares)
        assert not {x.proc.pid for x in rt._spares} & {x.proc.pid for x in spares}
        # another thread: a spare's parent-death signal belongs to the thread that started it
        spares = list(rt._spares)
        out = []
        t = threading.Thread(target=lambda: out.append(rt.run(_request(2), timeout_s=120)))
        t.start()
        t.join()
        assert out[0].status.value == "ok"
        assert all(x.proc.returncode is not None for x in spares)
    finally:
        rt.close()
    assert rt._spares == []


def test_warm_starts_a_spare_the_next_candidate_on_that_thread_takes(tmp_path, monkeypatch):
    monkeypatch.setenv("KITCTL_RUN_STATE_DIR", str(tmp_path))
    rt = LocalRuntime(run_id="prestart-warm", prestart=True, memory_limit_mib=6000)
    try:
        rt.warm(_request(2))
        (spare,) = rt._spares  # WARM_DEPTH: one, so a calibration running meanwhile is not slowed by many imports
        assert WARM_DEPTH == 1 and spare.proc.poll() is None
        rt.warm(_request(2))  # again: already warm, nothing more started
        assert rt._spares == [spare]
        out = rt.run(_request(2), timeout_s=120)
        assert out.status.value == "ok" and out.result["prestart"]["import_s"] > 0.05
        assert spare.proc.returncode == 0  # the warmed process ran the candidate
        assert len(rt._spares) == PRESTART_DEPTH and spare not in rt._spares
    finally:
        rt.close()


def test_cancel_kills_the_candidate_and_keeps_the_spares(tmp_path, monkeypatch):
    """A speculation the search no longer needs is cancelled; the slot's spares, still importing or waiting for
    its next candidate, stay (interrupt, the run's end, kills them too)."""
    monkeypatch.setenv("KITCTL_RUN_STATE_DIR", str(tmp_path))
    rt = LocalRuntime(run_id="prestart-cancel", prestart=True, memory_limit_mib=6000)
    try:
        out, spares = [], []

        def slot():  # one slot's thread: a candidate, then a long one that gets cancelled
            out.append(rt.run(_request(2), timeout_s=120))
            spares.extend(rt._spares)
            out.append(rt.run(replace(_request(2), steps=10_000), timeout_s=300))
        t = threading.Thread(target=slot)
        t.start()
        deadline = time.monotonic() + 120
        while not (spares and rt.current is not None) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        rt.cancel()
        t.join(120)
        assert out[0].status.value == "ok" and out[1].killed_by.value == "kit_interrupt"
        assert spares[0].proc.returncode is not None  # it was the cancelled candidate
        assert all(x.proc.poll() is None for x in spares[1:])  # the others still wait
        waiting = [x for x in rt._spares]
        rt.interrupt()
        for x in waiting:
            x.proc.wait(10)
    finally:
        rt.close()


def test_a_prestarted_trial_whose_stdin_ends_exits_quietly():
    r = subprocess.run([sys.executable, str(TRIAL)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       env={**os.environ, PRESTART_ENV: "1", "CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert r.returncode == 0 and r.stdout == ""


def test_prestart_is_refused_where_it_cannot_apply(tmp_path):
    r = subprocess.run([*ENTRY, *CPU, "--runtime", "docker", "--prestart", "--results-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--prestart" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.json"))


def test_an_interrupted_prestart_run_keeps_its_partial_and_leaves_no_process(tmp_path):
    before = prestarted_pids()
    proc = subprocess.Popen([*ENTRY, *CPU[:-6], "--start-batch", "4", "--max-batch", "4096", "--memory-limit", "6000",
                             "--slots", "2", "--prestart", "--results-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        # a candidate running and the spares started: then Ctrl-C
        while time.monotonic() < deadline and not (prestarted_pids() - before):
            time.sleep(0.2)
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and "Traceback" not in err
    assert "partial artifact kept" in err
    assert list(tmp_path.glob("*.partial.json"))
    time.sleep(0.5)
    assert prestarted_pids() - before == set()
