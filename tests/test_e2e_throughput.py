"""`kitctl run throughput` end to end: the real CLI, the real PyTorch trial on the CPU, through the
local runtime (and once through the Docker runtime), ending in a schema-valid artifact."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kitctl.core.artifact import load, validate

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
    with pytest.raises(Exception):
        validate(doc)


def test_resume_skips_finished_runs(tmp_path):
    p = kitctl("run", "throughput", "--runtime", "local", "--runs", "1", *TINY, "--results-dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    f, doc = only_artifact(tmp_path)
    # Turn the finished artifact into a partial that wants one more run of the same cell.
    doc.update(state="interrupted", finished_utc=None)
    doc["configuration"]["runs"] = 2
    doc["results"][0].update(state="running", status=None, summary=None)
    partial = tmp_path / "again" / (f.stem + ".partial.json")
    partial.parent.mkdir()
    partial.write_text(json.dumps(doc))
    p = kitctl("run", "throughput", "--resume", str(partial))
    assert p.returncode == 0, p.stderr + p.stdout
    _, doc2 = only_artifact(partial.parent)
    runs = doc2["results"][0]["runs"]
    assert [r["run"] for r in runs] == [1, 2] and runs[0] == doc["results"][0]["runs"][0]
    assert doc2["results"][0]["summary"]["n"] == 2 and doc2["resumes"]


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
    pytest.importorskip("tensorflow" if engine == "tensorflow-xla" else "torch")
    p = kitctl("run", "throughput", "--runtime", "local", "--engines", engine, "--runs", "1", *TINY,
               "--results-dir", str(tmp_path), env={"XLA_FLAGS": "--xla_llvm_disable_expensive_passes=true"})
    assert p.returncode == 0, p.stderr + p.stdout
    _, doc = only_artifact(tmp_path)
    (cell,) = doc["results"]
    assert cell["engine"] == engine and cell["status"] == "ok"
    (run,) = cell["runs"]
    assert run["images"] == 4 and run["images_per_second"] > 0
    assert cell["summary"]["n"] == 1 and cell["warmup_seconds"] > 0
