"""The command-line habits people expect: --version, shell completion, flags shown as flags, --json
(one document on stdout) and --csv on report/compare/results list, piped tables not wrapped, report
--out without the report on stdout, help text true for each command, the progress figures.

The real console entry point runs in a subprocess, stdout a pipe (not a terminal), as in a script.
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
RESULTS = ROOT / "results" / "reference"
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
TPUT = DATA / "throughput-sample.json"
TPUT_A = RESULTS / "throughput-resnet50-synthetic-20261201T041210Z.json"
TPUT_B = RESULTS / "throughput-resnet50-synthetic-20261201T041403Z.json"
# Eleven max-batch runs on one card, mostly one engine each: the overview that was mostly dashes.
SPARSE = [RESULTS / f"maxbatch-resnet50-synthetic-{n}.json" for n in (
    "20261129T195932Z", "20261201T035836Z", "20261129T200957Z", "20261129T224050Z", "20261130T000329Z",
    "20261201T164402Z", "20261201T163217Z", "20261201T190808Z", "20261201T191219Z", "20261201T213626Z",
    "20261201T215512Z")]


def kitctl(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("COLUMNS", None)  # as a script sees it: no terminal width
    e.update(env or {})
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=e)


# -- --version, completion, flags -------------------------------------------------------------------

def test_version_names_the_kit_and_its_commit():
    from kitctl import __version__

    p = kitctl("--version")
    assert p.returncode == 0, p.stderr
    assert re.fullmatch(rf"kitctl {re.escape(__version__)} \(commit ([0-9a-f]{{12}}(, dirty)?|unknown)\)\n", p.stdout), p.stdout


def test_shell_completion_is_on():
    # the shell named, not detected: typer would look for a shell among the test's parent processes, and a test
    # run started in the background (its parent gone) has none ("Shell  not supported.")
    named = {"SHELL": "/bin/bash", "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    p = kitctl("--show-completion", "bash", env=named)
    assert p.returncode == 0, p.stderr
    assert "_kitctl_completion" in p.stdout and "complete" in p.stdout
    # and it completes: the words bash would get for `kitctl ru<TAB>`, `kitctl run maxbatch --cud<TAB>`
    words = kitctl(env={"_KITCTL_COMPLETE": "complete_bash", "COMP_WORDS": "kitctl ru", "COMP_CWORD": "1"})
    assert words.stdout.split() == ["run"], (words.stdout, words.stderr)
    words = kitctl(env={"_KITCTL_COMPLETE": "complete_bash", "COMP_WORDS": "kitctl run maxbatch --cud",
                        "COMP_CWORD": "3"})
    assert "--cudnn-benchmark" in words.stdout.split(), words.stdout


@pytest.mark.parametrize("command", [["--help"], ["run", "maxbatch", "--help"], ["run", "throughput", "--help"],
                                     ["report", "--help"], ["run", "dataload", "--help"]])
def test_help_shows_flags_as_flags(command):
    """A flag takes no value: help does not print `<bool>` beside it (`--cudnn-benchmark true` then
    looked right and failed)."""
    p = kitctl(*command, env={"COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    assert "<bool>" not in p.stdout, p.stdout


def test_boolean_run_flags_have_a_negative_form():
    p = kitctl("run", "maxbatch", "--help", env={"COLUMNS": "200"})
    for flag in ("--no-cudnn-benchmark", "--no-require-gpu-idle", "--no-speculate"):
        assert flag in p.stdout, flag


@pytest.mark.parametrize("bench", ["dataload", "datasize", "train-e2e"])
def test_data_benchmarks_resume_help_is_their_own(bench):
    """Their --resume takes nothing beside it: its help must not offer --gpu, --timeout or --idle-threshold."""
    p = kitctl("run", bench, "--help", env={"COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    resume = p.stdout[p.stdout.index("--resume"):]
    resume = resume[:resume.index("--json")]  # its help text, up to the next option
    for other in ("--gpu", "--timeout", "--idle-threshold", "--require-gpu-idle"):
        assert other not in resume, (other, resume)


def test_run_refuses_a_csv_in_a_missing_folder_before_running(tmp_path):
    p = kitctl("run", "maxbatch", "--device", "cpu", "--runtime", "local", "--results-dir", str(tmp_path / "r"),
               "--csv", str(tmp_path / "no" / "such" / "t.csv"))
    assert p.returncode == 2 and p.stderr.startswith("kitctl: --csv"), p.stderr
    assert len(p.stderr.splitlines()) == 1 and not (tmp_path / "r").exists()


# -- report, compare, results list: --json, --csv, --out, piped -----------------------------------

def test_report_out_writes_the_file_and_prints_no_report(tmp_path):
    out = tmp_path / "r.md"
    p = kitctl("report", str(TPUT), "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert out.read_text().startswith("# ") and p.stdout == ""
    assert p.stderr.strip() == f"report: {out}"


def test_report_json_is_one_document(tmp_path):
    p = kitctl("report", str(TPUT), str(TPUT_A), "--json", "--csv", str(tmp_path / "r.csv"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # the whole of stdout: nothing else on it
    assert [r["file"] for r in doc["results"]] == [TPUT.name, TPUT_A.name]
    cells = doc["results"][1]["cells"]
    assert cells and all(isinstance(c["value"], float) and c["engine"] and c["precision"] for c in cells)
    rows = list(csv.reader((tmp_path / "r.csv").open()))
    assert rows[0][:2] == ["file", "benchmark"] and len(rows) == 1 + sum(len(r["cells"]) for r in doc["results"])


def test_compare_json_carries_the_verdict_and_exit_code(tmp_path):
    p = kitctl("compare", str(TPUT_A), str(TPUT_B), "--json", "--csv", str(tmp_path / "c.csv"))
    doc = json.loads(p.stdout)
    assert doc["exit_code"] == p.returncode and doc["benchmark"] == "throughput"
    assert [c["engine"] for c in doc["changes"]] == ["pytorch-eager", "pytorch-cudagraph"]
    assert doc["verdict"] and "changes" in doc
    rows = list(csv.reader((tmp_path / "c.csv").open()))
    assert rows[0][:2] == ["Engine", "Precision"] and len(rows) == 3


def test_results_list_json_and_csv(tmp_path):
    p = kitctl("results", "list", str(RESULTS), "--json", "--csv", str(tmp_path / "l.csv"))
    assert p.returncode == 0, p.stderr
    entries = json.loads(p.stdout)
    names = {e["name"] for e in entries}
    assert TPUT_A.name in names and all(set(e) >= {"name", "benchmark", "state", "headline"} for e in entries)
    rows = list(csv.reader((tmp_path / "l.csv").open()))
    assert rows[0] == ["File", "Benchmark", "Date", "GPU", "Engines", "Headline", "State"]
    assert len(rows) == 1 + len(entries)


def test_piped_tables_are_not_wrapped():
    """Off a terminal every row of the table is one line: a script can grep a file's row."""
    p = kitctl("results", "list", str(RESULTS))
    assert p.returncode == 0, p.stderr
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith("│")]
    names = [ln for ln in rows if ".json" in ln]
    assert len(names) == len(rows) and len(rows) >= 10  # no continuation lines
    p = kitctl("compare", str(TPUT_A), str(TPUT_B))
    body = [ln for ln in p.stdout.splitlines() if ln.startswith("│")]
    assert len(body) == 2, p.stdout  # one line per engine × precision


# -- what the reports say --------------------------------------------------------------------------

def test_throughput_interval_has_no_plus_minus():
    """The interval around a median is not symmetric: it is shown as its two ends, never "±half"."""
    from kitctl.reports.report import render
    from kitctl.reports.sources import load_source

    md = render([load_source(TPUT_A)])
    assert "±" not in md
    assert re.search(r"\| \d+% [\d,]+–[\d,]+ \|", md), md


def test_sparse_overview_has_no_column_of_dashes():
    from kitctl.reports.report import render
    from kitctl.reports.sources import load_source

    md = render([load_source(p) for p in SPARSE])
    overview = md[md.index("## Overview"):md.index("## [1]")]
    tables: list[list[list[str]]] = []
    for block in overview.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.startswith("|")]
        if len(lines) > 2:
            tables.append([[c.strip() for c in ln.strip("|").split("|")] for ln in lines[:1] + lines[2:]])
    assert tables
    for t in tables:
        assert len(t[0]) <= 8, t[0]  # not a column per result
        for j in range(len(t[0])):
            assert any(row[j] not in ("—", "") for row in t[1:]), (t[0][j], t)
    assert "8,832 [1]; 8,832 [8]" in overview  # a cell two results measured shows both


# -- plots -------------------------------------------------------------------------------------------

def test_throughput_plot_keeps_whiskers_and_labels_inside(tmp_path):
    from kitctl.reports.plots import make_plots
    from kitctl.reports.sources import load_source

    src = load_source(RESULTS / "throughput-resnet50-synthetic-20261201T101744Z.json")
    (plot,) = make_plots([src], tmp_path)
    d = plot.data
    reach = max(v + e for v, e in zip(d["values"], d["err_high"]))
    assert d["xlim"][1] >= reach * 1.2  # whisker and its value label fit
    ticks = [t for t in d["xticks"] if t]
    assert 3 <= len(ticks) <= 7 and all(len(t) <= 5 for t in ticks), ticks  # "15k", never "15,00020,000"
    assert any("whiskers" in lab for lab in d["legend"]) and "PyTorch" in d["legend"]


def test_overview_plot_has_a_legend_for_colours_and_hatching(tmp_path):
    from kitctl.reports.plots import make_plots
    from kitctl.reports.sources import load_source

    files = make_plots([load_source(p) for p in SPARSE], tmp_path)
    (overview,) = [f for f in files if f.source is None]
    legend = overview.data["legend"]
    assert {"PyTorch", "OpenNN", "JAX"} <= set(legend)
    assert any(lab.startswith("≥") for lab in legend)  # [10] is censored: hatched


def test_data_plots_share_the_bar_style(tmp_path):
    from kitctl.reports.plots import make_plots
    from kitctl.reports.sources import load_source

    for name in ("dataload-rrc224-corpus-20261202T025548Z.json", "train-e2e-rrc224-corpus-20261202T023822Z.json"):
        (plot,) = make_plots([load_source(RESULTS / name)], tmp_path)
        assert {"labels", "values", "xlim", "legend"} <= set(plot.data), name  # drawn by the shared plot_bars
        assert plot.data["legend"]


# -- progress figures --------------------------------------------------------------------------------

def test_candidates_left_bounds_every_protocol_search():
    from kitctl.core.outcome import Status
    from kitctl.benchmarks.maxbatch.search.protocol import SearchConfig, candidates_left
    from kitctl.benchmarks.maxbatch.search.strategies import run_search

    for start, top in ((128, 1 << 20), (2, 4), (16, 64), (3, 3)):
        cfg = SearchConfig(start_batch=start, max_batch=top, min_batch=2)
        for cap in (1, 2, 3, 5, 64, 100, 1000, 5000, 1 << 21):
            _, hist = run_search(lambda b: Status.OK if b <= cap else Status.OOM, cfg)
            for i in range(len(hist) + 1):
                assert candidates_left(hist[:i], cfg) >= len(hist) - i, (start, top, cap, i)
            assert candidates_left(hist, cfg) == 0


def test_plain_progress_lines_say_done_left_and_eta():
    import io

    from kitctl.core.outcome import Status, TrialOutcome
    from kitctl.cli.view import PlainView

    out = io.StringIO()
    v = PlainView(out)
    left = iter([(3, True), (2, True)])
    v.attach(lambda: next(left))
    for batch in (2, 4):
        v.candidate_started("pytorch-eager", "fp32", batch, "search")
        o = TrialOutcome(batch=batch, status=Status.OK)
        o.elapsed_s = 1.0
        v.candidate_done("pytorch-eager", "fp32", o, "search")
    lines = out.getvalue().splitlines()
    assert re.search(r"\[1 done, ≤ 2 left, ETA ≤ \d+ s\]$", lines[1]), lines[1]
    assert re.search(r"\[2 done, ≤ 1 left, ETA ≤ \d+ s\]$", lines[3]), lines[3]
