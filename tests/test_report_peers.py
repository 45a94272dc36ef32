"""`kitctl report --peers`: the batch finders' JSON (tools/peer_batch_finders.py) beside the kit's max-batch cell,
read from committed files of one H100 call (the kit's artifact and the finders run under its cap)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "results" / "reference"
ART = REF / "maxbatch-resnet50-synthetic-20261207T145349Z.json"
PEERS = REF / "peers" / "peers-h100-fp32-max65536-margin0-20261207-b.json"
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]


def kit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_the_finders_stand_beside_the_kit_cell_whose_cap_they_ran_under(tmp_path):
    r = kit("report", str(ART), "--peers", str(PEERS), "--out", str(tmp_path / "r.md"))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "r.md").read_text()
    section = md[md.index("## Beside the batch finders people use"):]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in section.splitlines() if line.startswith("| ") and not line.startswith("| tool")}
    doc, peers = json.loads(ART.read_text()), json.loads(PEERS.read_text())
    cell = doc["results"][0]
    assert rows["kitctl"][0] == f"**{cell['max_batch']:,}** ({cell['next_batch']:,} fails)"
    assert rows["kitctl"][2].startswith("60.0 s (search 48.0 s)")  # created → finished, and the search alone
    for name in ("lightning", "accelerate"):
        f = peers["finders"][name]
        assert rows[name][0] == f"{f['answer']:,}" and rows[name][2] == f"{f['wall_s']} s"
        assert rows[name][1] == f"{(cell['max_batch'] - f['answer']) / cell['max_batch']:.1%} below"


def test_without_the_kit_artifact_the_finders_are_shown_alone(tmp_path):
    other = REF / "maxbatch-resnet50-synthetic-20261207T150236Z.json"  # bf16, another run
    r = kit("report", str(other), "--peers", str(PEERS), "--out", str(tmp_path / "r.md"))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "r.md").read_text()
    assert "not among this report's results: no kit row" in md and "| kitctl |" not in md
    assert "| lightning | 8,564 | — | 59.4 s |" in md


def test_a_file_that_is_not_the_finders_json_is_one_line(tmp_path):
    for bad, says in ((ART, "not a file of tools/peer_batch_finders.py"), (ROOT / "README.md", "not JSON"),
                      (tmp_path / "none.json", "--peers")):
        r = kit("report", str(ART), "--peers", str(bad), "--out", str(tmp_path / "r.md"))
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.md").exists()


def test_a_fifo_given_as_peers_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "peers.json"
    os.mkfifo(fifo)
    r = kit("report", str(ART), "--peers", str(fifo), "--out", str(tmp_path / "r.md"))
    assert r.returncode == 2 and "a FIFO, not a regular file" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "r.md").exists()
