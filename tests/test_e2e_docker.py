"""`kitctl run maxbatch --runtime docker` end to end: the real CLI, a real daemon, fresh
containers of the image built from images/pytorch/Dockerfile (compose.yaml's cpu-ci variant)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kitctl.core.artifact import load
from kitctl.core.provenance import trial_code

pytestmark = pytest.mark.docker

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
DOCKER_CPU = ["run", "maxbatch", "--runtime", "docker", "--device", "cpu"]
ENV = {"KITCTL_IMAGE_VARIANT": "cpu-ci"}


def kitctl(*args, env=None, timeout=1200):
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **ENV, **(env or {})})


def run_containers(client, run_id: str) -> list:
    return client.containers.list(all=True, filters={"label": f"kit.run-id={run_id}"})


def test_docker_search_bounded_by_host_oom_kill(client, image, tmp_path):
    p = kitctl(*DOCKER_CPU, "--memory-limit", "1200", "--start-batch", "8", "--max-batch", "1024",
               "--results-dir", str(tmp_path))
    assert p.returncode == 0, p.stderr + p.stdout
    (final,) = [f for f in tmp_path.glob("*.json") if not f.name.endswith(".partial.json")]
    doc = load(final)
    assert doc["runtime"]["name"] == "docker" and doc["host"]["docker_version"]
    prov = doc["engines"]["pytorch-eager"]["provenance"]
    assert prov["image"] == image and prov["id"].startswith("sha256:")
    assert prov["code"] == trial_code("pytorch-eager").to_json()  # read from the image, built from here
    cell = doc["results"][0]
    assert cell["search_status"] == "bounded_by_memory_failure"
    assert cell["next_batch"] == cell["max_batch"] + 1
    nxt = [t for t in cell["trials"] if t["batch"] == cell["next_batch"]][-1]
    assert (nxt["status"], nxt["killed_by"]) == ("host_oom_killed", "kernel_oom")
    ids = {t["container_id"] for t in cell["trials"]}
    assert len(ids) == len(cell["trials"]), "every candidate is a fresh container"
    assert not run_containers(client, doc["run_id"])


def test_sigint_mid_search_keeps_partial_and_leaves_no_container(client, image, tmp_path):
    proc = subprocess.Popen([*ENTRY, *DOCKER_CPU, "--start-batch", "2", "--max-batch", "8",
                             "--results-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV})
    partial, run_id = None, None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and partial is None:
        for f in tmp_path.glob("*.partial.json"):
            try:
                doc = json.loads(f.read_text())
            except (json.JSONDecodeError, OSError):
                continue
            run_id = doc["run_id"]
            if doc["results"] and len(doc["results"][0]["trials"]) == 1 and run_containers(client, run_id):
                partial = f  # first candidate recorded, second container exists
        time.sleep(0.2)
    assert partial is not None, "no candidate finished in time"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "--resume" in err
    assert load(partial)["state"] == "interrupted"
    assert not run_containers(client, run_id)

    p = kitctl("run", "maxbatch", "--resume", str(partial))
    assert p.returncode == 0, p.stderr
    final = load(partial.with_name(partial.name.replace(".partial.json", ".json")))
    assert [t["batch"] for t in final["results"][0]["trials"]] == [2, 4, 8]
    assert not run_containers(client, run_id)


def test_a_stopped_daemon_is_one_line(tmp_path):
    p = kitctl(*DOCKER_CPU, "--start-batch", "2", "--max-batch", "2", "--results-dir", str(tmp_path / "r"),
               env={"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"})
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kitctl: ") and "Traceback" not in p.stderr, p.stderr
    assert "docker" in lines[0].lower()
    assert not (tmp_path / "r").exists()


def test_auto_falls_back_to_local_and_says_why(tmp_path):
    p = kitctl("run", "maxbatch", "--device", "cpu", "--start-batch", "2", "--max-batch", "2",
               "--results-dir", str(tmp_path), env={"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"})
    assert p.returncode == 0, p.stderr
    assert "--runtime auto: using local" in p.stderr  # a note, with the progress
    (final,) = [f for f in tmp_path.glob("*.json")]
    assert load(final)["runtime"]["name"] == "local"
