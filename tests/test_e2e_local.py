"""End to end through the real CLI, the local runtime and the real PyTorch trial on the CPU.

Every test starts `kitctl run maxbatch` as a user would and reads the artifact it writes.
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

from cifar_files import write_cifar10
from kitctl.core.artifact import load

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
CPU = ["run", "maxbatch", "--device", "cpu", "--runtime", "local"]


def kitctl(*args, env=None, timeout=900):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=timeout, env=e)


def only_artifact(results: Path, suffix=".json") -> dict:
    files = [p for p in results.iterdir() if p.name.endswith(suffix) and not p.name.endswith(".partial.json")]
    assert len(files) == 1, files
    return load(files[0])


def trial_processes_left(marker: str) -> list[str]:
    """Trial processes of this test still alive (their argv holds the results dir)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "trial.py" in cmd and marker in cmd:
                out.append(cmd)
    return out


def test_synthetic_search_ends_in_a_valid_artifact(tmp_path):
    p = kitctl(*CPU, "--start-batch", "2", "--max-batch", "4", "--precision", "both", "--results-dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    doc = only_artifact(tmp_path)
    assert doc["state"] == "complete" and doc["runtime"]["name"] == "local"
    assert doc["engines"]["pytorch-eager"]["versions"]["torch"].startswith("2.")
    assert [c["precision"] for c in doc["results"]] == ["fp32", "bf16"]
    for cell in doc["results"]:
        assert cell["search_status"] == "censored_at_max_batch"
        assert (cell["max_batch"], cell["next_batch"]) == (4, None)
        assert [t["batch"] for t in cell["trials"]] == [2, 4]
        for t in cell["trials"]:
            assert t["status"] == "ok" and t["exit_code"] == 0
            assert t["result"]["parameters"] == 23_528_522
            assert t["result"]["precision"] == cell["precision"]
    assert "Max batch" in p.stdout and "censored" in p.stdout


@pytest.mark.parametrize("layout", ["bin", "py"])
def test_cifar10_from_the_official_layout(tmp_path, layout):
    data = tmp_path / "data"
    write_cifar10(data, layout, sizes=(3,))  # 3 records: batch 4 wraps modulo the dataset
    results = tmp_path / "results"
    p = kitctl(*CPU, "--dataset", "cifar10", "--data-dir", str(data), "--start-batch", "4", "--max-batch", "4",
               "--results-dir", str(results))
    assert p.returncode == 0, p.stderr
    doc = only_artifact(results)
    assert doc["configuration"]["data_dir"].endswith(f"cifar-10-batches-{layout}")
    (t,) = doc["results"][0]["trials"]
    assert t["status"] == "ok"
    assert t["result"]["settings"]["data"]["name"] == "cifar10"


def test_memory_limit_bounds_the_search(tmp_path):
    """A host memory cap makes the search end on a real allocation failure (`oom`)."""
    p = kitctl(*CPU, "--memory-limit", "1000", "--start-batch", "32", "--max-batch", "1024",
               "--results-dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    cell = only_artifact(tmp_path)["results"][0]
    assert cell["search_status"] == "bounded_by_memory_failure"
    assert cell["next_batch"] == cell["max_batch"] + 1
    by_batch = {t["batch"]: t["status"] for t in cell["trials"]}
    assert by_batch[cell["max_batch"]] == "ok" and by_batch[cell["next_batch"]] == "oom"


def test_hanging_trial_is_killed_at_the_deadline_and_retried_once(tmp_path):
    p = kitctl(*CPU, "--start-batch", "2", "--max-batch", "2", "--timeout", "8", "--results-dir", str(tmp_path),
               env={"KIT_TRIAL_FAULT": "hang"})
    assert p.returncode == 1, p.stderr
    cell = only_artifact(tmp_path)["results"][0]
    assert cell["search_status"] == "invalid_non_memory_failure"
    assert [(t["status"], t["killed_by"], t["attempt"]) for t in cell["trials"]] == [
        ("timeout", "kit_deadline", 1), ("timeout", "kit_deadline", 2)]
    assert not trial_processes_left(str(tmp_path))


def test_crashing_trial_is_a_crash_never_a_capacity(tmp_path):
    p = kitctl(*CPU, "--start-batch", "2", "--max-batch", "2", "--results-dir", str(tmp_path),
               env={"KIT_TRIAL_FAULT": "crash"})
    assert p.returncode == 1, p.stderr
    cell = only_artifact(tmp_path)["results"][0]
    assert [t["status"] for t in cell["trials"]] == ["crash", "crash"]
    assert cell["max_batch"] is None and cell["search_status"] == "invalid_non_memory_failure"
    assert "invalid" in p.stdout


def test_sigint_keeps_a_resumable_partial(tmp_path):
    """Ctrl-C mid-candidate: exit 130, the partial says interrupted, no trial process is left;
    --resume finishes the run without repeating the finished candidate."""
    e = dict(os.environ, KIT_TRIAL_FAULT="")
    proc = subprocess.Popen([*ENTRY, *CPU, "--start-batch", "2", "--max-batch", "8", "--results-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
    partial = None
    deadline = time.monotonic() + 300
    # Wait until one candidate is recorded and the next one is running.
    while time.monotonic() < deadline:
        parts = list(tmp_path.glob("*.partial.json"))
        if parts:
            try:
                doc = json.loads(parts[0].read_text())
            except (json.JSONDecodeError, OSError):
                doc = None
            if doc and doc["results"] and len(doc["results"][0]["trials"]) == 1:
                partial = parts[0]
                break
        time.sleep(0.2)
    assert partial is not None, "no candidate finished in time"
    time.sleep(1.0)  # the second candidate is under way
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err and "Traceback" not in err
    doc = load(partial)
    assert doc["state"] == "interrupted"
    assert [t["batch"] for t in doc["results"][0]["trials"]] == [2]
    assert not trial_processes_left(str(tmp_path))

    p = kitctl("run", "maxbatch", "--resume", str(partial))
    assert p.returncode == 0, p.stderr
    assert not partial.exists()
    final = load(partial.with_name(partial.name.replace(".partial.json", ".json")))
    assert final["state"] == "complete" and len(final["resumes"]) == 1
    assert [t["batch"] for t in final["results"][0]["trials"]] == [2, 4, 8]
