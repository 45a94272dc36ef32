"""compare says how two artifacts differ besides the numbers (strategy, kit commit, seed, corpus),
never calls an interrupted partial's unfinished cell against a finished one an improvement, and calls
two results with no cell in common "not comparable" (exit 3). Real artifacts from tests/data, edited
as a later run would differ; through the real CLI."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
EAGER = DATA / "maxbatch-resnet50-synthetic-20261129T195932Z.json"  # real H200 run
PARTIAL = DATA / "maxbatch-resnet50-synthetic-20261129T200957Z.interrupted.json"  # real, interrupted


def compare(old: Path, new: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*ENTRY, "compare", str(old), str(new)], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": "250", **__import__("os").environ})


def write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_strategy_kit_commit_and_seed_are_stated(tmp_path):
    doc = json.loads(EAGER.read_text())
    doc["kit"].update(git_commit="fedcba9876543210", git_dirty=False)
    old = write(tmp_path / "old.json", doc)
    other = copy.deepcopy(doc)
    other["configuration"]["strategy"] = "guided"
    other["configuration"]["seed"] = 1
    other["kit"].update(git_commit="0123456789abcdef", git_dirty=True)
    p = compare(old, write(tmp_path / "new.json", other))
    assert p.returncode == 0, p.stdout + p.stderr
    text = " ".join(p.stdout.split())
    assert f"strategy ({doc['configuration']['strategy']} vs guided)" in text
    assert "seed (0 vs 1)" in text
    assert "kit commit (fedcba9876 vs 0123456789 (edited))" in text


def test_an_unfinished_cell_against_a_finished_one_is_no_improvement(tmp_path):
    part = json.loads(PARTIAL.read_text())
    assert part["state"] == "interrupted" and part["results"][0]["search_status"] is None
    done = copy.deepcopy(part)
    cell = copy.deepcopy(json.loads(EAGER.read_text())["results"][0])  # a finished cell, as a complete run has it
    cell["engine"] = part["results"][0]["engine"]
    done["results"] = [cell]
    done["state"] = "complete"
    done["finished_utc"] = done["updated_utc"]
    p = compare(PARTIAL, write(tmp_path / "done.json", done))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "improvement" not in p.stdout and "OLD is unfinished (partial artifact)" in " ".join(p.stdout.split())


def test_no_cell_in_common_is_not_comparable(tmp_path):
    p = compare(PARTIAL, EAGER)  # torch.compile fp32 (unfinished) vs eager fp32
    assert p.returncode == 3, p.stdout + p.stderr
    assert "no engine × precision cell in common" in " ".join(p.stdout.split())
