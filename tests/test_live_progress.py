"""The live view on a real pseudo-terminal: a small max-batch search on the CPU (the real PyTorch trial,
local runtime) shows its candidates with a progress bar — done of done + left, "≤ N left" (the search's
bound) and an ETA — on stderr, while stdout (redirected to a file, as `kitctl … --json > run.json`)
gets only the artifact's JSON document.

Slow on purpose (two real CPU candidates, about a minute each on a shared 2-core host): the only test
that drives the terminal view end to end; an ETA needs one candidate done and one left.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from conftest import need_module

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


@pytest.mark.slow
def test_live_progress_on_a_terminal(tmp_path):
    pexpect = need_module("pexpect", "the live-progress test drives a pseudo-terminal")
    need_module("torch", "the CPU trial")
    out, table = tmp_path / "run.json", tmp_path / "table.csv"
    argv = [sys.executable, "-c", "from kitctl.cli import main; main()", "run", "maxbatch", "--device", "cpu",
            "--runtime", "local", "--start-batch", "2", "--max-batch", "4", "--results-dir", str(tmp_path / "r"),
            "--json", "--csv", str(table)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), os.environ.get("PYTHONPATH", "")]),
           "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "40"}
    env.pop("CI", None)  # rich would take CI=true for a dumb terminal
    child = pexpect.spawn("bash", ["-c", f"exec {shlex.join(argv)} > {shlex.quote(str(out))}"], env=env,
                          dimensions=(40, 160), encoding="utf-8", timeout=600)
    child.expect(pexpect.EOF)
    child.close()
    screen = ANSI.sub("", child.before or "")
    assert child.exitstatus == 0, screen[-3000:]

    assert "Max batch — candidates" in screen  # the view is titled with the benchmark
    # Before the first candidate ends: nothing done, at most 3 left (start 2, then 4; the bound of the search)
    assert re.search(r"0/3 \(≤ 3 left\).*ETA —", screen), screen[-3000:]
    # After it: one done, an ETA from its time for the ≤ 2 left
    assert re.search(r"1/3 \(≤ 2 left\).*ETA ≤ \d+ (s|min)", screen), screen[-3000:]
    assert re.search(r"2/\d+ \(≤? ?\d+ left\)", screen), screen[-3000:]

    doc = json.loads(out.read_text())  # stdout: the artifact's document and nothing else
    assert doc["kind"] == "kitctl-artifact" and doc["state"] == "complete" and doc["benchmark"] == "maxbatch"
    assert [t["batch"] for t in doc["results"][0]["trials"]] == [2, 4]
    rows = list(csv.reader(table.open()))
    assert rows[0] == ["Engine", "Precision", "Max batch", "Peak host RSS at max", "Next batch", "Result"]
    assert rows[1][:3] == ["PyTorch eager", "fp32", "4"]
