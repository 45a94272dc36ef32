"""Two report lines a throughput artifact used to get wrong (issue 16's report named them as defects):
an interrupted throughput run was described as a max-batch search ("0 candidates so far", `kitctl run
maxbatch --resume`), and the cuDNN autotuning row showed only the run's flag although the
whole-step-graph engine turns autotuning on in its trial for throughput."""
from pathlib import Path

from kitctl.reports.report import render
from kitctl.reports.sources import load_source

RESULTS = Path(__file__).resolve().parents[1] / "results" / "reference"
# The H200 throughput run as it stood interrupted (bf16 3 of 6 runs), before its resume completed it in
# results/ under the same stamp (…054638Z.json): kept here as it was committed then.
DATA = Path(__file__).resolve().parent / "data"


def _report(name: str) -> str:
    path = RESULTS / name if (RESULTS / name).exists() else DATA / name
    return render([load_source(path)], [], RESULTS)


def test_an_interrupted_throughput_run_says_its_runs_and_its_own_resume_command():
    text = _report("throughput-resnet50-synthetic-20261201T054638Z.partial.json")
    line = next(ln for ln in text.splitlines() if "**Partial result**" in ln)
    assert "OpenNN (GPU-resident, no graph) bf16 (3 of 6 runs so far)" in line
    assert "`kitctl run throughput --resume throughput-resnet50-synthetic-20261201T054638Z.partial.json`" in line
    assert "candidates" not in line and "maxbatch" not in line


def test_an_interrupted_search_keeps_its_wording():
    text = _report("maxbatch-resnet50-synthetic-20261129T235439Z.partial.json")
    line = next(ln for ln in text.splitlines() if "**Partial result**" in ln)
    assert "candidates so far" in line and "`kitctl run maxbatch --resume " in line
    assert "is a capacity" in line


def test_the_cudnn_row_names_the_engines_whose_trial_turned_it_on():
    graph = _report("throughput-resnet50-synthetic-20261201T055552Z.json")
    assert "| cuDNN autotuning | off (--cudnn-benchmark not given); on in `pytorch-cudagraph`" in graph
    eager = _report("throughput-resnet50-synthetic-20261201T060130Z.json")
    assert "| cuDNN autotuning | off |" in eager
