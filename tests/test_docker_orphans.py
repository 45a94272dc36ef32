"""No orphans from the Docker runtime: `kill -9` of kitctl while its candidate's container runs.

A container is not a child of kitctl: nothing kills it when kitctl dies. It carries kitctl's PID
and start time (kit.owner-pid, kit.owner-start), so once kitctl is gone it is an orphan, and the
next run's start-of-run sweep or `kitctl clean` removes it. The run's partial artifact (saved after
every candidate) then resumes to a complete artifact. Real containers of the CI pytorch image on
the CPU, the real CLI as a subprocess; only this run's containers are asserted on.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import VARIANT, remove_containers

pytestmark = pytest.mark.docker

ENTRY = [sys.executable, "-c", "from kitctl.entry import main; main()"]


def kitctl(*args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    p = subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=timeout, env=env)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def wait_for_container(client, owner_pid: int, batch: int, proc: subprocess.Popen, log: Path, timeout_s: float = 600):
    """The running container of kitctl `owner_pid`'s candidate at `batch`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = client.containers.list(filters={"label": [f"kit.owner-pid={owner_pid}", f"kit.batch={batch}"],
                                                "status": "running"})
        if found:
            return found[0]
        assert proc.poll() is None, f"kitctl ended before batch {batch} started:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)
    pytest.fail(f"no running container for batch {batch} within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.mark.parametrize("removed_by", ["the resumed run's sweep", "kitctl clean"])
def test_kill_9_mid_candidate_leaves_an_orphan_that_is_removed_and_the_partial_resumes(client, image, tmp_path,
                                                                                     removed_by):
    results = tmp_path / "results"
    env = {**os.environ, "COLUMNS": "200", "KITCTL_IMAGE_VARIANT": VARIANT,
           "KITCTL_RUN_STATE_DIR": str(tmp_path / "state")}
    log_path = tmp_path / "kitctl.log"
    # Two candidates (batch 2, then 4 = --max-batch): killed during the second, the partial holds the first.
    with open(log_path, "w") as log:
        proc = subprocess.Popen([*ENTRY, "run", "maxbatch", "--runtime", "docker", "--device", "cpu",
                                 "--engines", "pytorch-eager", "--precision", "fp32", "--start-batch", "2",
                                 "--max-batch", "4", "--results-dir", str(results)],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
    mine = {"label": f"kit.owner-pid={proc.pid}"}
    try:
        c = wait_for_container(client, proc.pid, 4, proc, log_path)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        (partial,) = results.glob("*.partial.json")
        doc = json.loads(partial.read_text())
        assert [(t["batch"], t["status"]) for t in doc["results"][0]["trials"]] == [(2, "ok")]
        # kitctl is gone and its container is not: an orphan (still running, or exited on its own).
        c.reload()
        assert c.status in ("running", "exited"), c.status
        assert c.labels["kit.owner-pid"] == str(proc.pid) and c.labels["kit.run-id"] == doc["run_id"]

        if removed_by == "kitctl clean":
            p = kitctl("clean", "--json", env=env)
            assert p.returncode == 0, p.stderr
            assert any(c.short_id in r for r in json.loads(p.stdout)["containers"]), p.stdout
            assert client.containers.list(all=True, filters=mine) == []

        p = kitctl("run", "maxbatch", "--resume", str(partial), env=env)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        swept = "orphaned kit container(s): " in p.stderr and c.short_id in p.stderr  # a note: stderr
        assert swept == (removed_by == "the resumed run's sweep"), p.stderr[-3000:]
        assert client.containers.list(all=True, filters=mine) == []
        assert client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"}) == []

        final = json.loads(partial.with_name(partial.name.replace(".partial.json", ".json")).read_text())
        assert final["state"] == "complete" and len(final["resumes"]) == 1 and not partial.exists()
        (cell,) = final["results"]
        assert [(t["batch"], t["status"]) for t in cell["trials"]] == [(2, "ok"), (4, "ok")]
        assert (cell["search_status"], cell["max_batch"]) == ("censored_at_max_batch", 4)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        remove_containers(client.containers.list(all=True, filters=mine))
