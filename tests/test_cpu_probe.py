"""tools/cpu_probe.py: the machine's CPU steadiness yardstick for data loaders (real processes, real decode)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "cpu_probe.py"
ARTIFACT = ROOT / "results" / "reference" / "dataload-rrc224-corpus-20261207T172915Z.json"

spec = importlib.util.spec_from_file_location("cpu_probe", TOOL)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def test_blocks_count_items_per_block_and_drop_the_partial_last_block():
    stamps = [0.1, 0.5, 1.2, 1.3, 1.9, 2.5, 3.7]  # 2 items in [0, 1), 3 in [1, 2), 1 in [2, 3), 1 in [3, 3.9)
    assert probe.blocks(stamps, 0.0, 3.9, 1.0) == [2.0, 3.0, 1.0]
    assert probe.blocks([9.0], 0.0, 4.0, 2.0) == [0.0, 0.0]  # outside the window: not counted


def test_scatter_of_a_steady_and_of_a_declining_sequence():
    flat = probe.scatter([100.0, 101.0, 99.0, 100.0, 101.0, 99.0])
    assert flat["steady"] and abs(flat["halves_change"]) < 0.01 and flat["cv"] < 0.01
    falling = probe.scatter([110.0, 108.0, 106.0, 94.0, 92.0, 90.0])
    assert not falling["steady"] and falling["halves_change"] == pytest.approx(92 / 108 - 1)
    assert falling["lag1"] > 0.3  # a trend reads as slow spells that last
    assert probe.scatter([1.0, 2.0]) == {"blocks": 2}


def test_loader_epochs_weighted_by_time_reproduce_the_kits_rate():
    runs = probe.loader_runs(ARTIFACT)
    assert [r["run"] for r in runs] == [1, 2, 3]
    for r in runs:  # epochs weighted by their seconds: the window's images ÷ its seconds
        assert r["blocks"] >= 45 and r["mean"] > 9000
        first, second = r["first_half"], r["second_half"]
        assert min(first, second) <= r["images_per_second"] <= max(first, second)


def test_a_short_probe_on_two_processes(tmp_path):
    out = tmp_path / "probe.json"
    p = subprocess.run([sys.executable, str(TOOL), "--processes", "2", "--seconds", "4", "--block-seconds", "1",
                        "--dataload", str(ARTIFACT), "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["probe"]["blocks"] == 4 and doc["window"]["items"] > 0
    assert len(doc["probe"]["block_rates"]) == 4 and len(doc["loaders"]) == 3


def test_bad_flags_are_one_line_and_exit_2(tmp_path):
    for args in (["--seconds", "1", "--block-seconds", "1"], ["--dataload", str(tmp_path / "none.json")]):
        p = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
