"""--slots and the host's CPUs: each candidate records the cores it kept busy (result.cpu), and the report says what
a cell's slots shared: the host's CPUs (side by side its candidates kept nearly every core busy), the device (they
kept few busy, and a deadline passed beside others was kept alone), or, with no candidate measured side by side,
whether its calibration's cores times the slots could ask for more than the host has."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# jax-xla with 4 slots on an H100 (16 cores), from before result.cpu: the cores are set here, as a trial writes them
JAX_SLOTS = ROOT / "results" / "reference" / "maxbatch-resnet50-synthetic-20261207T173807Z.json"
# the same cell on an H100 with result.cpu recorded (interrupted: 15 candidates, 14,732 timed out beside others and
# ended alone in 64 s)
JAX_CPU = ROOT / "results" / "reference" / "maxbatch-resnet50-synthetic-20261208T001023Z.partial.json"
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]


def render(tmp_path: Path, doc: dict, name: str) -> str:
    art = tmp_path / f"maxbatch-resnet50-synthetic-{name}.json"
    art.write_text(json.dumps(doc))
    out = tmp_path / f"r-{name}.md"
    r = subprocess.run([*ENTRY, "report", str(art), "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out.read_text()


def report(tmp_path: Path, cores: float | None) -> str:
    doc = json.loads(JAX_SLOTS.read_text())
    if cores is not None:
        doc["results"][0]["calibration"]["result"]["cpu"] = {"cpu_s": cores * 40.0, "wall_s": 40.0, "cores": cores}
    return render(tmp_path, doc, f"cores-{cores}")


@pytest.mark.parametrize("cores,said", [(6.2, True), (4.0, False), (None, False)])
def test_without_side_by_side_cores_the_calibrations_say_whether_slots_may_ask_for_too_many(tmp_path, cores, said):
    text = report(tmp_path, cores)
    assert ("**Slots may share the host's CPUs**" in text) is said
    assert "**Slots share" not in text
    if said:  # 4 slots × 6.2 cores = 25 of 16
        assert "kept 6.2 cores busy; 4 slots side by side would ask for 25 of the host's 16" in text


def with_cores(doc: dict, cores: float) -> dict:
    """Every candidate that recorded its CPU kept `cores` busy."""
    for t in doc["results"][0]["trials"] + [doc["results"][0]["calibration"]]:
        if isinstance((t.get("result") or {}).get("cpu"), dict):
            t["result"]["cpu"]["cores"] = cores
    return doc


def test_candidates_measured_side_by_side_say_what_the_slots_shared(tmp_path):
    """The committed cell: side by side 2.3 cores each (about 9 of 16) and 14,732's deadline kept alone: the
    device. The same candidates at 4 cores each (16 of 16): the CPU. At 2.3 cores with every retry removed (no
    proof of a slowdown): nothing is said, whatever the calibration's 4.8 cores times 4 slots."""
    measured = render(tmp_path, json.loads(JAX_CPU.read_text()), "measured")
    assert ("**Slots share the device** — JAX XLA fp32: batch 14,732 passed its deadline beside other candidates "
            "(150 s) and ended alone in 64 s, while side by side its candidates kept 2.3 cores busy each (median of "
            "6), about 9 of the host's 16 with 4 slots") in measured
    assert "4 candidates still ran side by side after it" in measured
    assert "Slots share the host's CPUs" not in measured and "Slots may share" not in measured
    cpu = render(tmp_path, with_cores(json.loads(JAX_CPU.read_text()), 4.0), "cpu")
    assert ("**Slots share the host's CPUs** — JAX XLA fp32: side by side its candidates kept 4.0 cores busy each "
            "(median of 6), about 16 of the host's 16 with 4 slots: they waited for the CPU") in cpu
    doc = json.loads(JAX_CPU.read_text())
    doc["results"][0]["trials"] = [t for t in doc["results"][0]["trials"] if t["attempt"] == 1]
    assert "**Slots" not in render(tmp_path, doc, "no-proof")
