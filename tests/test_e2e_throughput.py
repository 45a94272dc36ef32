"""`kitctl run throughput` end to end: the real CLI, the real PyTorch trial on the CPU, through the
local runtime (and once through the Docker runtime), ending in a schema-valid artifact."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from kitctl.core.artifact import ArtifactError, load, validate
from conftest import need_module  # noqa: E402

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
TINY = ["--device", "cpu", "--batch", "2", "--warmup-steps", "1", "--steps", "2"]


def kitctl(*args, env=None, timeout=900):
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def only_artifact(results: Path) -> tuple[Path, dict]:
    (f,) = [p for p in results.glob("*.json") if not p.name.endswith(".partial.json")]
    return f, load(f)


def test_local_cpu_run_ends_in_an_artifact_and_a_report(tmp_path):
    p = kitctl("run", "throughput", "--runtime", "local", "--engines", "pytorch-eager", "--runs", "2", *TINY,
               "--results-dir", str(tmp_path))
    assert p.returncode == 0, p.stderr + p.stdout
    f, doc = only_artifact(tmp_path)
    assert f.name.startswith("throughput-resnet50-synthetic-")
    assert doc["benchmark"] == "throughput" and doc["state"] == "complete"
    cfg = doc["configuration"]
    assert (cfg["batch"], cfg["runs"], cfg["warmup_steps"], cfg["steps"]) == (2, 2, 1, 2)
    (cell,) = doc["results"]
    assert (cell["engine"], cell["precision"], cell["status"]) == ("pytorch-eager", "fp32", "ok")
    assert [r["run"] for r in cell["runs"]] == [1, 2]
    for r in cell["runs"]:
        assert r["status"] == "ok" and r["images"] == 4 and r["window_seconds"] > 0
        assert r["images_per_second"] == pytest.approx(r["images"] / r["window_seconds"])
    s = cell["summary"]
    ips = sorted(r["images_per_second"] for r in cell["runs"])
    assert s["n"] == 2 and s["median"] == pytest.approx(sum(ips) / 2)
    assert (s["ci_low"], s["ci_high"], s["ci_level"]) == (ips[0], ips[1], 0.5)
    assert "order-statistic" in s["ci_method"]
    assert cell["warmup_seconds"] > 0 and cell["peak_vram"] is not None
    assert "Training throughput" in p.stdout and "images/s" in p.stdout

    r = kitctl("report", str(f))
    assert r.returncode == 0, r.stderr
    assert "PyTorch eager" in r.stdout and "| 2 |" in r.stdout


def test_cudagraph_on_cpu_is_refused_in_one_line(tmp_path):
    p = kitctl("run", "throughput", "--engines", "pytorch-cudagraph", "--device", "cpu", "--results-dir", str(tmp_path))
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "cannot run on --device cpu" in p.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


@pytest.mark.parametrize("bad", [["--runs", "0"], ["--batch", "0"], ["--steps", "0"], ["--warmup-steps", "0"]])
def test_bad_input_is_one_line_exit_2(tmp_path, bad):
    p = kitctl("run", "throughput", "--device", "cpu", "--runtime", "local", *bad, "--results-dir", str(tmp_path))
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().count("\n") == 0 and bad[0] in p.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_nonfinite_loss_fails_the_cell_loudly(tmp_path):
    p = kitctl("run", "throughput", "--runtime", "local", "--runs", "2", *TINY, "--results-dir", str(tmp_path),
               env={"KIT_TRIAL_FAULT": "nan"})
    assert p.returncode == 1, p.stderr + p.stdout
    _, doc = only_artifact(tmp_path)
    (cell,) = doc["results"]
    assert cell["status"] == "failed" and cell["summary"] is None and cell["warmup_seconds"] is None
    assert "nonfinite" in cell["reason"]
    assert [r["status"] for r in cell["runs"]] == ["nonfinite"]  # the cell stops at its first failed run
    assert cell["runs"][0]["images_per_second"] is None
    assert "FAILED" in p.stdout


def test_a_failed_run_is_never_averaged_in(tmp_path):
    """Schema and report: a failed cell whose earlier runs passed still has no figure."""
    from kitctl.benchmarks.throughput.table import throughput_rows

    doc = json.loads((Path(__file__).parent / "data" / "throughput-sample.json").read_text())
    cell = doc["results"][0]
    cell.update(status="failed", reason="run 5/5 failed — crash", summary=None, warmup_seconds=None)
    validate(doc)
    row = throughput_rows(doc)[0]
    assert row.median is None and row.minimum is None
    cell["summary"] = {"n": 5, "median": 1.0, "min": 1.0, "max": 1.0, "ci_low": 1.0, "ci_high": 1.0, "ci_level": 0.9}
    with pytest.raises(ArtifactError, match="does not match its schema"):
        validate(doc)


def _marked(mark: str) -> list[int]:
    """Live processes whose environment holds `mark` (kitctl and the trials it starts inherit it)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if mark.encode() in (d / "environ").read_bytes() and "Z" not in (d / "stat").read_text().rsplit(")", 1)[1][:3]:
                    found.append(int(d.name))
            except OSError:  # gone meanwhile, or not ours to read
                pass
    return found


def test_an_interrupted_run_keeps_its_partial_and_resumes_to_completion(tmp_path):
    """A real interruption: SIGINT to a running `kitctl run throughput` while a run's trial is going. Exit 130,
    the partial keeps the runs that finished, no trial is left; --resume runs the rest and keeps what was there."""
    results, log_path = tmp_path / "results", tmp_path / "kitctl.log"
    mark = f"kitctl-test-{uuid.uuid4().hex}"
    env = {**os.environ, "KITCTL_TEST_MARK": mark, "KITCTL_RUN_STATE_DIR": str(tmp_path / "state")}
    with open(log_path, "w") as log:
        proc = subprocess.Popen([*ENTRY, "run", "throughput", "--runtime", "local", "--runs", "3", *TINY,
                                 "--results-dir", str(results)], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        partial = None
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:  # run 1 recorded, and a trial of a later run going
            parts = list(results.glob("*.partial.json")) if results.is_dir() else []
            if parts:
                cells = json.loads(parts[0].read_text()).get("results") or [{}]  # replaced whole: never torn
                runs = cells[0].get("runs", [])
                if runs and [p for p in _marked(mark) if p != proc.pid]:
                    partial = parts[0]
                    break
            assert proc.poll() is None, log_path.read_text()[-3000:]
            time.sleep(0.1)
        assert partial is not None, log_path.read_text()[-3000:]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, log_path.read_text()[-3000:]
        out = log_path.read_text()
        assert "kitctl: interrupted" in out and f"--resume {partial}" in out and "Traceback" not in out
        doc = load(partial)
        assert doc["state"] == "interrupted"
        kept = doc["results"][0]["runs"]
        assert 1 <= len(kept) < 3 and all(r["status"] == "ok" for r in kept)
        assert _marked(mark) == []  # the interrupted trial did not outlive the run
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    p = kitctl("run", "throughput", "--resume", str(partial))
    assert p.returncode == 0, p.stderr + p.stdout
    _, done = only_artifact(results)
    runs = done["results"][0]["runs"]
    assert [r["run"] for r in runs] == [1, 2, 3] and runs[:len(kept)] == kept  # what was recorded stays
    assert done["results"][0]["summary"]["n"] == 3 and len(done["resumes"]) == 1 and not partial.exists()


@pytest.mark.docker
def test_docker_cpu_run_ends_in_an_artifact(client, image, tmp_path):
    p = kitctl("run", "throughput", "--runtime", "docker", "--runs", "1", *TINY, "--results-dir", str(tmp_path),
               env={"KITCTL_IMAGE_VARIANT": "cpu-ci"}, timeout=1200)
    assert p.returncode == 0, p.stderr + p.stdout
    _, doc = only_artifact(tmp_path)
    assert doc["runtime"]["name"] == "docker" and doc["engines"]["pytorch-eager"]["provenance"]["image"] == image
    (cell,) = doc["results"]
    assert cell["status"] == "ok" and cell["runs"][0]["container_id"] and cell["summary"]["n"] == 1
    assert not client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"})


@pytest.mark.parametrize("engine", ["pytorch-compile", "tensorflow-xla"])
def test_every_cpu_capable_path_runs_through_the_local_runtime(tmp_path, engine):
    """torch.compile and TensorFlow XLA, one run each at a tiny batch (compilation is the cost)."""
    need_module("tensorflow" if engine == "tensorflow-xla" else "torch")
    p = kitctl("run", "throughput", "--runtime", "local", "--engines", engine, "--runs", "1", *TINY,
               "--results-dir", str(tmp_path), env={"XLA_FLAGS": "--xla_llvm_disable_expensive_passes=true"})
    assert p.returncode == 0, p.stderr + p.stdout
    _, doc = only_artifact(tmp_path)
    (cell,) = doc["results"]
    assert cell["engine"] == engine and cell["status"] == "ok"
    (run,) = cell["runs"]
    assert run["images"] == 4 and run["images_per_second"] > 0
    assert cell["summary"]["n"] == 1 and cell["warmup_seconds"] > 0
