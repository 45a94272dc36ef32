"""No orphans from the local runtime (issue 14, item 3), with real processes on the CPU.

* `kill -9` of kitctl mid-candidate: the trial dies with it (PR_SET_PDEATHSIG), and the partial
  resumes to a complete artifact.
* A recorded trial group whose controller is gone is killed, children included, by `kitctl clean`
  and by the start-of-run sweep; a live controller's trial and a process that reuses a recorded
  PID are left alone.

Every test keeps its run-state files in its own folder (KITCTL_RUN_STATE_DIR), and `kitctl clean`
runs against a Docker address that does not answer, so the shared daemon's containers are never
touched (and clean's no-daemon path is exercised).
"""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from kitctl.core.artifact import load
from kitctl.runtimes.processes import process_start, stat
from kitctl.runtimes.runstate import STATE_DIR_ENV, RunRecord, TrialRecord

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
CPU = ["run", "maxbatch", "--device", "cpu", "--runtime", "local"]
NO_DAEMON = "unix:///nonexistent/kitctl-test-docker.sock"


def alive(pid: int, start: str) -> bool:
    """Is that very process (same start time) still running? A zombie is dead."""
    st = stat(pid)
    return st is not None and st.start == start and st.state != "Z"


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


class Group:
    """A real process group like a trial's: a leader in its own session and one child of it."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"],
            start_new_session=True)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(self.members()) < 2:
            time.sleep(0.05)
        self.procs = self.members()
        assert len(self.procs) == 2, self.procs

    def members(self) -> dict[int, str]:
        out = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                st = stat(int(d.name))
                if st is not None and st.pgrp == self.pid and st.state != "Z":
                    out[st.pid] = st.start
        return out

    def all_alive(self) -> bool:
        return all(alive(p, s) for p, s in self.procs.items())

    def none_alive(self) -> bool:
        self.proc.poll()  # reap the leader (this test is its parent)
        return not any(alive(p, s) for p, s in self.procs.items())

    def trial(self, start: str | None = None) -> TrialRecord:
        return TrialRecord(pid=self.pid, start=start or self.procs[self.pid], pgid=self.pid,
                           engine="pytorch-eager", precision="fp32", batch=8)

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def record(state: Path, name: str, trial: TrialRecord, owner_pid: int, owner_start: str | None) -> Path:
    import socket

    from kitctl.runtimes.processes import boot_id

    state.mkdir(mode=0o700, exist_ok=True)
    rec = RunRecord(run_id=name, host=socket.gethostname(), boot_id=boot_id(), owner_pid=owner_pid,
                    owner_start=owner_start, trials=(trial,))
    path = state / f"{name}.json"
    path.write_text(json.dumps(rec.to_json()))
    return path


def kitctl(*args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **env))


def test_kill_9_of_kitctl_kills_its_trial_and_the_partial_resumes(tmp_path):
    state, results = tmp_path / "state", tmp_path / "results"
    env = {STATE_DIR_ENV: str(state)}
    log = open(tmp_path / "kitctl.log", "w")
    # The trial hangs once set up (the kit's own test hook), so it is mid-candidate for sure.
    proc = subprocess.Popen([*ENTRY, *CPU, "--start-batch", "2", "--max-batch", "2", "--results-dir", str(results)],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, KIT_TRIAL_FAULT="hang", **env))
    leftovers: list[Group] = []
    try:
        rec = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and rec is None:
            for f in state.glob("*.json") if state.is_dir() else ():
                rec = RunRecord.from_json(json.loads(f.read_text()))
            time.sleep(0.2)
        assert rec is not None, "no trial was recorded: " + (tmp_path / "kitctl.log").read_text()[-2000:]
        assert (rec.owner_pid, rec.owner_start) == (proc.pid, process_start(proc.pid))
        (trial,) = rec.trials
        assert trial.pgid == trial.pid and alive(trial.pid, trial.start)
        time.sleep(2.0)  # well inside the candidate (the trial imports torch, builds ResNet-50, hangs)
        assert alive(trial.pid, trial.start)

        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and alive(trial.pid, trial.start):
            time.sleep(0.05)
        assert not alive(trial.pid, trial.start), "the trial outlived its controller"

        # A child the trial had left (PDEATHSIG is not inherited) would be killed by the next run's
        # sweep; stand one in with a group recorded under a dead controller.
        orphan = Group()
        leftovers.append(orphan)
        record(state, "earlier", orphan.trial(), dead_pid(), "1")

        (partial,) = results.glob("*.partial.json")
        p = kitctl("run", "maxbatch", "--resume", str(partial), env=env)
        assert p.returncode == 0, p.stderr
        assert f"killed an orphaned local trial: pid {orphan.pid}" in p.stderr  # a note: stderr
        assert orphan.none_alive()
        final = load(partial.with_name(partial.name.replace(".partial.json", ".json")))
        assert final["state"] == "complete" and len(final["resumes"]) == 1
        assert [(t["batch"], t["status"]) for t in final["results"][0]["trials"]] == [(2, "ok")]
        assert list(state.glob("*.json")) == []  # records go when their candidates end
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for g in leftovers:
            g.kill()
        log.close()


def test_clean_kills_recorded_orphans_only(tmp_path):
    state = tmp_path / "state"
    env = {STATE_DIR_ENV: str(state), "DOCKER_HOST": NO_DAEMON}
    me, my_start = os.getpid(), process_start(os.getpid())
    orphan, owner_reused, live, reused = Group(), Group(), Group(), Group()
    try:
        f_orphan = record(state, "orphan", orphan.trial(), dead_pid(), "1")
        # The controller's PID is alive but started at another time: another process, owner gone.
        f_owner_reused = record(state, "owner-reused", owner_reused.trial(), me, str(int(my_start) + 1))
        f_live = record(state, "live", live.trial(), me, my_start)
        # The trial's PID now belongs to a process that started at another time: never killed.
        f_reused = record(state, "reused", reused.trial(start="1"), dead_pid(), "1")

        p = kitctl("clean", "--dry-run", "--json", env=env)
        assert p.returncode == 0, p.stderr
        res = json.loads(p.stdout)
        assert res["dry_run"] and res["containers_not_checked"]
        assert sorted(int(s.split()[1]) for s in res["processes"]) == sorted([orphan.pid, owner_reused.pid])
        assert all(g.all_alive() for g in (orphan, owner_reused, live, reused))  # a dry run kills nothing
        assert all(f.exists() for f in (f_orphan, f_owner_reused, f_live, f_reused))

        p = kitctl("clean", "--json", env=env)
        assert p.returncode == 0, p.stderr
        res = json.loads(p.stdout)
        assert sorted(int(s.split()[1]) for s in res["processes"]) == sorted([orphan.pid, owner_reused.pid])
        assert "2 process(es) in its group" in res["processes"][0]
        assert orphan.none_alive() and owner_reused.none_alive()  # the leader and its child
        assert live.all_alive() and reused.all_alive()
        assert not f_orphan.exists() and not f_owner_reused.exists() and not f_reused.exists()
        assert f_live.exists()  # a live controller's record stays

        p = kitctl("clean", env=env)
        assert p.returncode == 0 and "nothing to remove" in p.stdout, p.stderr
        assert "containers not checked" in p.stderr and "Traceback" not in p.stderr
        assert live.all_alive() and reused.all_alive()
    finally:
        for g in (orphan, owner_reused, live, reused):
            g.kill()


def test_a_run_records_its_trial_and_removes_the_record(tmp_path, monkeypatch):
    """In-process: the record exists exactly while the candidate runs, and names this process."""
    from kitctl.core.protocol import TrialRequest
    from kitctl.runtimes.local import LocalRuntime

    state = tmp_path / "state"
    monkeypatch.setenv(STATE_DIR_ENV, str(state))
    seen: list[RunRecord] = []

    class Peek:  # a watcher that reads the run-state file while the trial runs
        over_budget = False

        def prepare(self):
            pass

        def start(self, handle):
            (f,) = state.glob("*.json")
            seen.append(RunRecord.from_json(json.loads(f.read_text())))

        def stop(self):
            from kitctl.core.outcome import MemoryPeaks
            return MemoryPeaks()

    rt = LocalRuntime(run_id="rec-test", env={"KIT_TRIAL_FAULT": "crash"})
    req = TrialRequest(engine="pytorch-eager", mode="eager", benchmark="maxbatch", precision="fp32", device="cpu",
                       model="resnet50", dataset="synthetic", data_dir=None, cudnn_benchmark=False, seed=0, batch=2)
    out = rt.run(req, timeout_s=300, watcher=Peek())
    assert out.status.value == "crash"
    (rec,) = seen
    assert (rec.run_id, rec.owner_pid, rec.owner_start) == ("rec-test", os.getpid(), process_start(os.getpid()))
    assert [(t.engine, t.batch, t.pgid == t.pid) for t in rec.trials] == [("pytorch-eager", 2, True)]
    assert list(state.glob("*.json")) == []
    rt.close()


def test_the_trial_child_gets_the_death_signal_and_the_data_limit():
    """What the preexec hook sets, read back inside a real child after exec."""
    from kitctl.runtimes.local import _preexec

    probe = ("import ctypes, resource; v = ctypes.c_int(); "
             "ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0); "  # PR_GET_PDEATHSIG
             "print(v.value, resource.getrlimit(resource.RLIMIT_DATA)[0])")
    for limit, want in ((None, resource.getrlimit(resource.RLIMIT_DATA)[0]), (1000, 1000 * 2**20)):
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                             start_new_session=True, preexec_fn=_preexec(limit)).stdout.split()
        assert out == [str(int(signal.SIGKILL)), str(want)]



def test_two_runtimes_of_one_run_keep_their_own_records(tmp_path, monkeypatch):
    """--gpus with the local runtime: one runtime per GPU in one process, one run id. Each keeps its
    live trials in its own record, so one's update never erases the other's (clean would miss it)."""
    from kitctl.runtimes.runstate import RunState

    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    a, b = RunState("one-run"), RunState("one-run")
    me = os.getpid()  # a live process stands in for each trial (only the records are read here)
    a.add(me, me, engine="pytorch-eager", precision="fp32", batch=2)
    b.add(me, me, engine="pytorch-eager", precision="fp32", batch=4)
    records = sorted((RunRecord.from_json(json.loads(f.read_text())) for f in (tmp_path / "state").glob("*.json")),
                     key=lambda r: r.trials[0].batch)
    assert [[t.batch for t in r.trials] for r in records] == [[2], [4]]
    b.remove(me)
    (left,) = (tmp_path / "state").glob("*.json")
    assert [t.batch for t in RunRecord.from_json(json.loads(left.read_text())).trials] == [2]
    a.close()
    assert list((tmp_path / "state").glob("*.json")) == []
