"""A resume checks the code it resumes with: a partial resumed after its trial's code changed is
refused in one line naming what changed, unless --allow-code-change, which records the change
(old and new hashes) in the resume entry. Real CLI, local runtime, the real PyTorch trial (made to
crash at once by its test hook, so each candidate costs one interpreter start), in a copy of the
kit (KITCTL_HOME) that the test may edit."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kitctl.core.artifact import load

ROOT = Path(__file__).resolve().parents[1]
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]


def _git(kit: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(kit), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


@pytest.fixture
def kit(tmp_path) -> Path:
    """A git checkout of the kit's host package and trials, apart from this one."""
    kit = tmp_path / "kit"
    kit.mkdir()
    shutil.copy(ROOT / "compose.yaml", kit)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "wheels", "build")
    shutil.copytree(ROOT / "trials", kit / "trials", ignore=ignore)
    shutil.copytree(ROOT / "host" / "kitctl", kit / "host" / "kitctl", ignore=ignore)
    _git(kit, "init", "-q")
    _git(kit, "add", "-A")
    _git(kit, "commit", "-q", "-m", "kit")
    return kit


def kitctl(kit: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KITCTL_GIT")}
    env.update(KITCTL_HOME=str(kit), KIT_TRIAL_FAULT="crash")
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=600, env=env)


def a_partial(kit: Path, results: Path) -> Path:
    """A real run's artifact, cut back to what an interruption after its first candidate leaves."""
    p = kitctl(kit, "run", "maxbatch", "--device", "cpu", "--runtime", "local", "--start-batch", "2",
               "--max-batch", "2", "--results-dir", str(results))
    assert p.returncode == 1, p.stderr  # the candidate crashed twice: an invalid cell, a complete artifact
    (final,) = results.glob("*.json")
    doc = json.loads(final.read_text())
    doc["results"][0]["trials"] = doc["results"][0]["trials"][:1]
    doc.update(state="interrupted", finished_utc=None)
    partial = final.with_name(final.name.replace(".json", ".partial.json"))
    partial.write_text(json.dumps(doc))
    final.unlink()
    return partial


def test_changed_code_is_refused_naming_the_file_unless_allowed_and_then_recorded(kit, tmp_path):
    partial = a_partial(kit, tmp_path / "results")
    before = partial.read_bytes()
    recorded = load(partial)["engines"]["pytorch-eager"]["provenance"]["code"]["sha256"]

    extra = kit / "host" / "kitctl" / "extra.py"  # the host package counts too
    extra.write_text("X = 1\n")
    p = kitctl(kit, "run", "maxbatch", "--resume", str(partial))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "kitctl (host/kitctl) changed" in p.stderr and "host/kitctl/extra.py" in p.stderr
    extra.unlink()

    with (kit / "trials" / "pytorch" / "trial.py").open("a") as f:
        f.write("# one line more\n")
    p = kitctl(kit, "run", "maxbatch", "--resume", str(partial))
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "trials/pytorch/trial.py" in p.stderr and "--allow-code-change" in p.stderr
    assert "kitctl (host/kitctl)" not in p.stderr and recorded[:12] in p.stderr
    assert partial.read_bytes() == before  # refused: nothing written

    p = kitctl(kit, "run", "maxbatch", "--resume", str(partial), "--allow-code-change")
    assert p.returncode == 1, p.stderr
    final = load(partial.with_name(partial.name.replace(".partial.json", ".json")))
    assert final["state"] == "complete" and len(final["results"][0]["trials"]) == 2
    (entry,) = final["resumes"]
    (change,) = entry["code_changed"]
    assert change["old_sha256"] == recorded and change["new_sha256"] != recorded
    assert change["files"] == ["trials/pytorch/trial.py"]
    assert entry["kit"]["git_dirty"] is True  # the resume ran on an edited checkout, and says so
    assert "--allow-code-change" in p.stderr + p.stdout


def test_allow_code_change_without_resume_is_refused(tmp_path):
    p = subprocess.run([*ENTRY, "run", "maxbatch", "--device", "cpu", "--runtime", "local", "--allow-code-change",
                        "--results-dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "only with --resume" in p.stderr, p.stderr
    assert not list(tmp_path.iterdir())
