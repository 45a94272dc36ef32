"""dataload's figure and train-e2e's loader-alone figure for the same data, source, workers and batch on the same kind
of machine are paired and compared (benchmarks/data/agreement.py), in `kitctl report` and over the committed results.

The pairing tests start from a committed H200 dataload artifact (window rule) and a train-e2e document made from a
committed one in memory: its loader-alone median is set here to a chosen ratio of dataload's, which is what the
check is about — no figure of these documents is published."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from kitctl.benchmarks.data.agreement import AGREE_WITHIN, pairs, report_lines
from kitctl.reports.report import render
from kitctl.reports.sources import load_source

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "results" / "reference"
DATALOAD = REF / "dataload-rrc224-corpus-20261203T133518Z.partial.json"  # ffcv, pytorch-nvjpeg jpeg90@256, 16 w
E2E = REF / "train-e2e-rrc224-corpus-20261202T023822Z.json"
# Committed pairs that differ by more than AGREE_WITHIN, each with why (none so far).
EXPLAINED: dict[tuple[str, str, str], str] = {}


def docs(ratio: float) -> tuple[dict, dict]:
    load = json.loads(DATALOAD.read_text())
    e2e = json.loads(E2E.read_text())
    e2e["host"] = copy.deepcopy(load["host"])  # the same kind of machine
    e2e["datasets"] = copy.deepcopy(load["datasets"])  # read from the same corpus
    e2e["configuration"].update(window_images=50000, window_seconds=30.0, workers=16, batch=256,
                                encoding="jpeg90", side=256)
    ffcv = next(c for c in load["results"] if c["loader"] == "ffcv")
    cell = next(c for c in e2e["results"] if c["loader"] != "synthetic")
    cell.update(loader="ffcv", status="ok")
    cell["summary"]["loader"] = {**cell["summary"]["loader"], "n": 3, "median": ffcv["summary"]["median"] * ratio}
    return load, e2e


def test_a_loader_alone_figure_within_ten_percent_of_dataload_agrees():
    load, e2e = docs(1.05)
    (p,) = pairs([("load.json", load), ("e2e.json", e2e)])
    assert (p.loader, p.encoding, p.side, p.workers, p.batch) == ("ffcv", "jpeg90", 256, 16, 256)
    assert p.agree and abs(p.difference - 0.05) < 1e-9
    assert p.dataload.name == "load.json" and p.loader_alone.name == "e2e.json"


def test_one_more_than_ten_percent_apart_is_named_in_the_report(tmp_path):
    load, e2e = docs(1.0 + AGREE_WITHIN + 0.03)
    (p,) = pairs([("load.json", load), ("e2e.json", e2e)])
    assert not p.agree
    text = "\n".join(report_lines([("load.json", load), ("e2e.json", e2e)]))
    assert "| ffcv | jpeg90@256 | 16 |" in text and "+13.0%" in text and "DIFFER by more than 10%" in text
    # and through `kitctl report`'s renderer, from files
    for name, d in (("load.json", load), ("e2e.json", e2e)):
        (tmp_path / name).write_text(json.dumps(d))
    out = render([load_source(tmp_path / "load.json"), load_source(tmp_path / "e2e.json")])
    assert "The kit against itself" in out and "DIFFER by more than 10%" in out


def test_no_pair_across_machines_workers_corpora_or_before_the_window_rule():
    load, e2e = docs(1.0)
    other = copy.deepcopy(e2e)
    other["host"]["gpu"]["name"] = "NVIDIA H100 80GB HBM3"
    assert pairs([("a", load), ("b", other)]) == []
    other = copy.deepcopy(e2e)
    other["configuration"]["workers"] = 8
    assert pairs([("a", load), ("b", other)]) == []
    other = copy.deepcopy(e2e)
    for d in other["datasets"]:  # another corpus: twice the images, so other epochs
        d.update(corpus_identity="8d567e46daf4e3f1", corpus_images=40000)
    assert pairs([("a", load), ("b", other)]) == []
    other = copy.deepcopy(e2e)
    other["configuration"]["limit"] = 10000  # half of the same corpus: other epochs too
    assert pairs([("a", load), ("b", other)]) == []
    other = copy.deepcopy(e2e)
    other["configuration"]["window_images"] = None  # start-up inside the figure: not comparable
    assert pairs([("a", load), ("b", other)]) == []
    assert report_lines([("a", load)]) == []


def test_the_committed_results_agree_with_themselves_or_say_why():
    committed = [(f.name, json.loads(f.read_text())) for f in sorted(REF.glob("*.json"))
                 if f.name.startswith(("dataload-", "train-e2e-"))]
    for p in pairs(committed):
        assert p.agree or (p.dataload.name, p.loader_alone.name, p.loader) in EXPLAINED, p
