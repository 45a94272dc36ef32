"""A data benchmark's local trial is recorded like an engine trial's, so `kitctl clean` and the next run's sweep
find what of it outlives a `kill -9` of kitctl (real processes on the CPU).

The trial process itself dies with kitctl (parent-death signal); a process it started does not inherit that
signal. Here the "interpreter" handed to the data runner is a small shell script standing in for a trial that
leaves such a child (a `sleep`), so the leftover is certain and nothing heavy runs. Each test keeps its
run-state files in its own folder (KITCTL_RUN_STATE_DIR) and points `kitctl clean` at a Docker address that
does not answer, so the shared daemon's containers are never touched.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kitctl.runtimes.processes import stat
from kitctl.runtimes.runstate import STATE_DIR_ENV, RunRecord

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
NO_DAEMON = "unix:///nonexistent/kitctl-test-docker.sock"
RUN_ID = "datarun0test1"

CONTROLLER = """
import sys
from kitctl.benchmarks.data.trial import Where, run_on_dataset
run_on_dataset(Where("local", sys.argv[1], "ci", sys.argv[2]), "dataload", None,
               ["dataload", "--loader", "pytorch-dataloader"], None, 300.0)
"""


def group_of(pgid: int) -> dict[int, str]:
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = stat(int(d.name))
            if st is not None and st.pgrp == pgid and st.state != "Z":
                out[st.pid] = st.start
    return out


def wait_for(cond, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_a_data_trial_left_by_a_killed_kitctl_is_found_and_killed_by_clean(tmp_path):
    state = tmp_path / "state"
    env = dict(os.environ, **{STATE_DIR_ENV: str(state), "DOCKER_HOST": NO_DAEMON})
    fake = tmp_path / "python"  # named as what it stands in for: a trial that starts a child and waits
    fake.write_text("#!/bin/sh\nsleep 300 &\nwait\n")
    fake.chmod(0o755)
    ctl = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(fake), RUN_ID], env=env)
    members: dict[int, str] = {}
    try:
        rec = None

        def recorded() -> bool:
            nonlocal rec
            for f in state.glob("*.json") if state.is_dir() else ():
                rec = RunRecord.from_json(json.loads(f.read_text()))
            return rec is not None

        assert wait_for(recorded, 60), "the data trial was not recorded"
        assert rec.run_id == RUN_ID and rec.owner_pid == ctl.pid
        (trial,) = rec.trials
        assert trial.pgid == trial.pid and trial.what == "dataload: dataload --loader pytorch-dataloader"
        assert wait_for(lambda: len(group_of(trial.pgid)) == 2, 30), group_of(trial.pgid)
        members = group_of(trial.pgid)

        ctl.send_signal(signal.SIGKILL)
        ctl.wait()
        # the trial (the script) dies with its controller; its child does not
        assert wait_for(lambda: trial.pid not in group_of(trial.pgid), 2.0)
        (child,) = [p for p in group_of(trial.pgid) if p != trial.pid]

        p = subprocess.run([*ENTRY, "clean", "--dry-run", "--json"], capture_output=True, text=True, env=env,
                           timeout=300)
        assert p.returncode == 0, p.stderr
        (line,) = json.loads(p.stdout)["processes"]
        assert line.startswith(f"pid {trial.pid} (dataload: dataload --loader pytorch-dataloader, 1 process(es)")
        assert f"run {RUN_ID}" in line and child in group_of(trial.pgid)  # a dry run kills nothing

        p = subprocess.run([*ENTRY, "clean"], capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert group_of(trial.pgid) == {}
        assert list(state.glob("*.json")) == []
    finally:
        if ctl.poll() is None:
            ctl.kill()
            ctl.wait()
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_data_trial_that_ends_leaves_no_record(tmp_path, monkeypatch):
    """In-process: the record exists while the trial runs and is gone when it ends (even a failed one)."""
    from kitctl.benchmarks.data.trial import Where, close_runtimes, run_on_dataset

    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    seen = tmp_path / "seen"
    fake = tmp_path / "python"  # copies the run-state folder's names while it runs, then fails
    fake.write_text(f"#!/bin/sh\nls {tmp_path / 'state'} > {seen}\nexit 3\n")
    fake.chmod(0o755)
    try:
        tr = run_on_dataset(Where("local", str(fake), "ci", "datarun0test2"), "dataload", None, ["dataload"], None,
                            60.0)
    finally:
        close_runtimes("datarun0test2")
    assert tr.status == "crash" and tr.exit_code == 3
    assert seen.read_text().strip().startswith("datarun0test2-")
    assert list((tmp_path / "state").glob("*.json")) == []
