"""--prestart by a fork server: one process per slot imports torch once and forks each candidate.

Real processes on the CPU (no memory cap: a capped candidate is started by spares, see runtimes/forkserver.py):
the trial's own server loop (trials/common/kittrial.py `_serve`), real PyTorch candidates. Checked: the same
outcomes as fresh processes, one import per slot, a fresh process per candidate, cancel and the deadline kill
only the candidate, a dead server is replaced and takes its candidate with it, no process left behind.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from kitctl.core.protocol import TrialRequest
from kitctl.runtimes import forkserver
from kitctl.runtimes.local import PRESTART_ENV, LocalRuntime
from test_prestart import prestarted_pids

ROOT = Path(__file__).resolve().parents[1]
TRIAL = ROOT / "trials" / "pytorch" / "trial.py"

pytestmark = pytest.mark.skipif(not forkserver.available(), reason="fork and SCM_RIGHTS: Linux")


def _request(batch: int, **kw) -> TrialRequest:
    return TrialRequest(engine="pytorch-eager", mode="eager", benchmark="maxbatch", batch=batch, precision="fp32",
                        device="cpu", image_size=32, **kw)


def forking_pids() -> set[int]:
    """Processes of this user started as a fork server, and what they forked (the same environment)."""
    return prestarted_pids("fork")


@pytest.fixture
def rt(tmp_path, monkeypatch):
    monkeypatch.setenv("KITCTL_RUN_STATE_DIR", str(tmp_path))
    before = forking_pids()
    runtime = LocalRuntime(run_id="forkserver-test", prestart=True)
    yield runtime
    runtime.close()
    deadline = time.monotonic() + 10
    while forking_pids() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert forking_pids() - before == set(), "a fork server or a forked candidate outlived close()"


def test_forked_candidates_match_fresh_ones_and_import_once(rt, tmp_path):
    fresh = LocalRuntime(run_id="forkserver-fresh")
    try:
        plain = [fresh.run(_request(b), timeout_s=180) for b in (2, 3)]
    finally:
        fresh.close()
    forked = [rt.run(_request(b), timeout_s=180) for b in (2, 3)]
    for a, b in zip(plain, forked):
        assert a.status.value == b.status.value == "ok", (a, b)
        assert a.result["batch"] == b.result["batch"] and a.result["parameters"] == b.result["parameters"]
        assert "prestart" not in a.result
    server = rt._server
    assert server is not None and server.alive()
    pre = [r.result["prestart"] for r in forked]
    assert all(p["forked"] is True for p in pre)
    assert pre[0]["import_s"] == pre[1]["import_s"] > 0.05  # one import, by the server, for both
    for r in forked:  # torch and torch._dynamo came with the server: nothing left to import in the candidate
        assert r.result["phases"]["import_s"] < 0.05 and r.result["phases"]["build_optimizer_s"] < 0.05
    # a forked candidate's CPU is its own, from its arguments: not the server's import (which a fresh process's has)
    for a, b in zip(plain, forked):
        assert 0 < b.result["cpu"]["cpu_s"] and 0 < b.result["cpu"]["wall_s"] <= b.elapsed_s
        assert b.result["cpu"]["wall_s"] < a.result["cpu"]["wall_s"]


def long_then_short(rt) -> tuple[threading.Thread, list, list]:
    """One slot's thread (a server belongs to the thread that started it): a long candidate, then a short one;
    returned once the long one runs. Their outcomes and the slot's server after each are collected."""
    out, servers = [], []

    def slot():
        out.append(rt.run(replace(_request(2), steps=100_000), timeout_s=300))
        servers.append(rt._server)
        out.append(rt.run(_request(2), timeout_s=180))
        servers.append(rt._server)
    t = threading.Thread(target=slot)
    t.start()
    deadline = time.monotonic() + 120
    while rt.current is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    return t, out, servers


def test_cancel_kills_the_candidate_and_the_server_serves_the_next(rt):
    t, out, servers = long_then_short(rt)
    server = rt._server
    victim = rt.current.proc.pid
    assert victim != server.proc.pid
    rt.cancel()
    t.join(180)
    assert out[0].killed_by.value == "kit_interrupt" and out[0].exit_code is None
    assert out[1].status.value == "ok" and servers == [server, server] and server.alive()
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)


def test_the_deadline_kills_a_hung_forked_candidate(rt):
    rt.extra_env["KIT_TRIAL_FAULT"] = "hang"
    out = rt.run(_request(2), timeout_s=15)  # the first waits for the import too: inside its time
    assert out.killed_by.value == "kit_deadline" and out.status.value == "timeout", out
    assert 15 <= out.elapsed_s < 40
    assert rt._server is not None and rt._server.alive()


def test_a_killed_server_takes_its_candidate_and_is_replaced(rt):
    t, out, servers = long_then_short(rt)
    first, victim = rt._server, rt.current.proc.pid
    os.kill(first.proc.pid, signal.SIGKILL)  # the server dies: its candidate's parent-death signal fires
    t.join(180)
    assert not t.is_alive() and out[0].status.value != "ok" and out[0].signal == signal.SIGKILL, out
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)
    assert out[1].status.value == "ok" and servers[1] is not first and servers[1].alive()


def test_another_environment_or_a_memory_cap_is_not_served_by_the_same_server(rt):
    rt.run(_request(2), timeout_s=180)
    first = rt._server
    rt.extra_env["KIT_TEST_MARK"] = "1"  # its variables were fixed when it started
    assert rt.run(_request(2), timeout_s=180).status.value == "ok"
    assert rt._server is not first and first.proc.returncode is not None
    # a memory cap: spares (a forked process's data segment would start with the server's heap)
    rt.memory_limit_mib = 6000
    capped = rt.run(_request(2), timeout_s=180)
    assert capped.status.value == "ok" and "forked" not in capped.result["prestart"]
    assert rt._server is None and rt._spares


def test_warm_starts_the_server_and_interrupt_kills_it(rt):
    rt.warm(_request(2))
    server = rt._server
    assert server is not None and server.alive() and not rt._spares
    rt.warm(_request(2))
    assert rt._server is server  # already warm
    rt.interrupt()
    server.proc.wait(10)
    assert server.proc.returncode == -signal.SIGKILL


def test_a_fork_server_whose_socket_closes_exits_quietly():
    """Started, then the host goes away before any candidate: it returns 0 with nothing on stdout."""
    host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen([sys.executable, str(TRIAL)], stdin=child.fileno(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, PRESTART_ENV: "fork", "CUDA_VISIBLE_DEVICES": ""})
    child.close()
    host.close()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and out == "", err


def test_an_unknown_prestart_by_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-c", "from kitctl.cli import main; main()", "run", "maxbatch", "--device",
                        "cpu", "--runtime", "local", "--engines", "pytorch-eager", "--prestart", "--prestart-by",
                        "threads", "--results-dir", str(tmp_path)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--prestart-by" in r.stderr
    assert not list(tmp_path.glob("*.json"))


def test_an_interrupt_while_the_server_still_imports_ends_the_candidate_at_once(rt):
    """Ctrl-C reaches a slot's lane while its first candidate waits for the server's import: the server is
    killed and nothing is started in its place (the run's threads are joined right after)."""
    out = []
    t = threading.Thread(target=lambda: out.append(rt.run(_request(2), timeout_s=300)))
    t.start()
    deadline = time.monotonic() + 30
    while rt._server is None and time.monotonic() < deadline:
        time.sleep(0.01)
    rt.interrupt()  # the server is importing torch: no candidate yet
    t0 = time.monotonic()
    t.join(60)
    assert not t.is_alive() and time.monotonic() - t0 < 30
    assert out[0].killed_by.value == "kit_interrupt" and out[0].status.value != "ok", out
