"""--slots and the host's CPUs: each candidate records the cores it kept busy (result.cpu), and the report says
when a cell's slots side by side ask for more cores than the host has (its calibration candidate ran alone)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# jax-xla with 4 slots on an H100 (16 cores), from before result.cpu: the cores are set here, as a trial writes them
JAX_SLOTS = ROOT / "results" / "reference" / "maxbatch-resnet50-synthetic-20261207T173807Z.json"
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]


def report(tmp_path: Path, cores: float | None) -> str:
    doc = json.loads(JAX_SLOTS.read_text())
    if cores is not None:
        doc["results"][0]["calibration"]["result"]["cpu"] = {"cpu_s": cores * 40.0, "wall_s": 40.0, "cores": cores}
    art = tmp_path / f"maxbatch-resnet50-synthetic-cores-{cores}.json"
    art.write_text(json.dumps(doc))
    out = tmp_path / f"r-{cores}.md"
    r = subprocess.run([*ENTRY, "report", str(art), "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out.read_text()


@pytest.mark.parametrize("cores,said", [(6.2, True), (4.0, False), (None, False)])
def test_the_report_says_when_slots_ask_for_more_cores_than_the_host_has(tmp_path, cores, said):
    text = report(tmp_path, cores)
    assert ("**Slots share the host's CPUs**" in text) is said
    if said:  # 4 slots × 6.2 cores = 25 of 16
        assert "kept 6.2 cores busy; 4 slots side by side ask for 25 of the host's 16" in text
