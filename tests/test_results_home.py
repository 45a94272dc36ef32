"""The user's results apart from the project's: results/ is the user's own folder (where runs write,
what `results list` and `report` read by default); the committed reference results live in
results/reference/ and are named apart, never mixed into the user's listing."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "results" / "reference"
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
OLD = "maxbatch-resnet50-synthetic-20261129T195932Z.json"  # the oldest H200 max-batch run
NEW = "throughput-resnet50-synthetic-20261201T041210Z.json"


def kitctl(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([*ENTRY, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)


def _clone_layout(tmp_path: Path) -> Path:
    """A fresh clone's results/: the references apart, nothing of the user's yet."""
    (tmp_path / "results" / "reference").mkdir(parents=True)
    for name in (OLD, NEW):
        shutil.copy(REFERENCE / name, tmp_path / "results" / "reference" / name)
    return tmp_path


def test_the_committed_results_are_in_reference_and_results_holds_none():
    tracked = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    top = [t for t in tracked if t.count("/") == 1]
    assert top == ["results/README.md"], top
    assert (REFERENCE / OLD).is_file() and (REFERENCE / "logs").is_dir() and (REFERENCE / "reports").is_dir()


def test_results_list_on_a_fresh_clone_names_the_references_apart(tmp_path):
    cwd = _clone_layout(tmp_path)
    p = kitctl(cwd, "results", "list")
    assert p.returncode == 0, p.stderr
    assert "no result files in results yet" in p.stdout
    assert OLD not in p.stdout  # not mixed in
    assert "reference results are apart: 2 files in results/reference" in p.stdout


def test_results_list_after_a_run_shows_it_first_and_the_references_apart(tmp_path):
    cwd = _clone_layout(tmp_path)
    # The user's own runs (two real artifacts, copied under the user's folder); the newer is listed first.
    for name in (OLD, NEW):
        shutil.copy(REFERENCE / name, cwd / "results" / name)
    p = kitctl(cwd, "results", "list")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    # (the file column may fold a long name: look for its stamp)
    assert 0 < out.index("20261201T041") < out.index("20261129T19593"), out
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("the project's reference results are apart: 2 files in results/reference")


def test_report_without_files_reports_the_newest_of_the_users_results(tmp_path):
    cwd = _clone_layout(tmp_path)
    p = kitctl(cwd, "report")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("kitctl: no result in results/ yet") and "results/reference" in line
    for name in (OLD, NEW):
        shutil.copy(REFERENCE / name, cwd / "results" / name)
    p = kitctl(cwd, "report")
    assert p.returncode == 0, p.stderr
    run_id = json.loads((REFERENCE / NEW).read_text())["run_id"]
    assert run_id in p.stdout and "throughput" in p.stdout.lower()
