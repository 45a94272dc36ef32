"""Reports, plots, compare, reference artifacts and `results list` (issue 9).

Golden Markdown: tests/data/*.golden.md are the renderer's output for the committed sample
artifacts, reviewed by eye. After an intended change to the report, regenerate them with
`KITCTL_UPDATE_GOLDEN=1 python3 -m pytest tests/test_report.py` and review the diff.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kitctl.core.artifact import ArtifactError
from kitctl.reports.compare import compare
from kitctl.reports.measured import cudnn_text
from kitctl.reports.report import caveats, render
from kitctl.reports.sources import load_source
from kitctl.benchmarks.maxbatch.table import peak_inversions, ratio_pairs, ratios
from kitctl.benchmarks.throughput.table import throughput_ratio_pairs
from conftest import host_lacks, unavailable  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
UPDATE = os.environ.get("KITCTL_UPDATE_GOLDEN") == "1"

EAGER = DATA / "maxbatch-resnet50-synthetic-20261129T195932Z.json"  # real H200 run (copy of results/)
PARTIAL = DATA / "maxbatch-resnet50-synthetic-20261129T200957Z.interrupted.json"  # real, interrupted
SAMPLE = DATA / "maxbatch-sample.json"  # hand-written, several engines
TPUT = DATA / "throughput-sample.json"  # hand-written throughput cells
REF = DATA / "reference-maxbatch.json"  # the reference runner's format, hand-written
# The reference runner's V1 shape (flat results, `exit_<code>` its only failure word, no search_status,
# flat metrics), constructed with its search and the reference report's RTX 4080 figures.
REF_V1 = DATA / "reference-v1-rtx4080.json"


def kitctl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def one_line_refusal(p: subprocess.CompletedProcess, match: str | None = None) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kitctl: "), p.stderr
    if match:
        assert match in lines[0], lines[0]
    return lines[0]


def check_golden(name: str, text: str) -> None:
    path = DATA / f"{name}.golden.md"
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} missing: run with KITCTL_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), f"report differs from {path.name}"


# ---- golden Markdown ----------------------------------------------------------------------------

@pytest.mark.parametrize("name, files", [
    ("maxbatch-h200-eager", [EAGER]),
    ("maxbatch-sample", [SAMPLE]),
    ("throughput-sample", [TPUT]),
    ("reference-maxbatch", [REF]),
    ("reference-v1-rtx4080", [REF_V1]),
])
def test_golden_markdown(name, files):
    text = render([load_source(f) for f in files])
    check_golden(name, text)
    assert text == render([load_source(f) for f in files])  # deterministic


def test_golden_combined_with_plots(tmp_path):
    """kitctl's run beside the reference runner's numbers, plots linked relative to the report."""
    from kitctl.reports.plots import make_plots

    sources = [load_source(EAGER), load_source(REF)]
    out = tmp_path / "report"
    files = make_plots(sources, out / "plots")
    text = render(sources, files, out)
    check_golden("combined", text)
    for f in files:
        link = f"(plots/{f.path.name})"
        assert link in text, link
        assert f.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_cli_prints_markdown_and_writes_out(tmp_path):
    golden = (DATA / "maxbatch-h200-eager.golden.md").read_text(encoding="utf-8")
    p = kitctl("report", str(EAGER))
    assert p.returncode == 0, p.stderr
    assert p.stdout == golden  # not a terminal: raw Markdown
    p = kitctl("report", str(EAGER), "--out", str(tmp_path / "r.md"))
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""  # --out writes the file instead of printing the report
    assert (tmp_path / "r.md").read_text(encoding="utf-8") == golden
    assert p.stderr.strip() == f"report: {tmp_path / 'r.md'}"


def test_report_cli_plots_are_linked(tmp_path):
    p = kitctl("report", str(SAMPLE), "--out", "out/report.md", "--plots", "out/img", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    md = (tmp_path / "out/report.md").read_text(encoding="utf-8")
    pngs = sorted(x.name for x in (tmp_path / "out/img").iterdir())
    assert pngs == ["maxbatch-sample-maxbatch.png", "maxbatch-sample-vram-pytorch-compile-fp32.png",
                    "maxbatch-sample-vram-pytorch-eager-bf16.png", "maxbatch-sample-vram-pytorch-eager-fp32.png",
                    "maxbatch-sample-vram-tensorflow-xla-fp32.png"]
    for name in pngs:
        assert f"](img/{name})" in md


# ---- what the report says -----------------------------------------------------------------------

def test_real_h200_rows_and_caveats():
    src = load_source(EAGER)
    (row,) = src.rows
    assert (row.engine, row.max_batch, row.next_batch, row.next_status) == ("pytorch-eager", 8832, 8833, "oom")
    text = " ".join(caveats(src))
    assert "Emulated smaller card" in text and "16,376" in text
    assert "TF32 in fp32" in text
    assert "batch 2,048 peaked at 12,665 MiB, batch 4,096 at 8,673 MiB" in text  # non-monotone peak
    assert "Partial" not in text and "Censored" not in text


def test_partial_artifact_caveat():
    src = load_source(PARTIAL)
    md = render([src])
    assert "**Partial result** — the artifact is `interrupted` by SIGINT: 0 of 1" in md
    assert "largest pass 8,928, smallest memory failure 8,964" in md
    assert "| PyTorch torch.compile | fp32 | — | — | — | running |" in md
    assert "--resume results/maxbatch-resnet50-synthetic-20261129T200957Z.partial.json" in md  # the resume


def test_sample_caveats_and_ratios():
    src = load_source(SAMPLE)
    cav = caveats(src)
    assert any(c.startswith("**Censored search** — PyTorch torch.compile fp32") for c in cav)
    assert any(c.startswith("**Non-memory failure** — PyTorch eager bf16") for c in cav)
    tf32 = next(c for c in cav if c.startswith("**TF32"))
    assert "PyTorch eager and PyTorch torch.compile" in tf32 and "TensorFlow" not in tf32
    assert [r.text() for r in ratio_pairs(src.rows)] == [
        "PyTorch torch.compile vs PyTorch eager (fp32): ≥ 2.20× larger batch",
        "TensorFlow XLA vs PyTorch eager (fp32): 1.47× larger batch",
        "PyTorch best vs TensorFlow XLA (fp32): ≥ 1.50× larger batch",
    ]
    assert ratios(src.rows) == [r.text() for r in ratio_pairs(src.rows)]


def test_throughput_rows_and_caveat():
    src = load_source(TPUT)
    rows = {(r.engine, r.precision): r for r in src.tput}
    eager = rows[("pytorch-eager", "fp32")]
    assert (eager.median, eager.ci_low, eager.ci_high, eager.runs, eager.warmup_s) == (10200.0, 10110.0, 10290.0, 5, 4.1)
    assert rows[("pytorch-eager", "bf16")].runs == 1
    assert any("**One run only** — PyTorch eager bf16" in c for c in caveats(src))
    assert [r.text() for r in throughput_ratio_pairs(src.tput)] == [
        "TensorFlow XLA vs PyTorch eager (fp32): 1.26× faster", "TensorFlow XLA vs PyTorch eager (bf16): 1.10× faster"]


def test_cudnn_version_text():
    assert (cudnn_text(91900), cudnn_text(8907), cudnn_text("9")) == ("9.19.0", "8.9.7", "9")


# ---- plots: the data series, read back from the axes --------------------------------------------

def test_vram_plot_has_one_point_per_trial_and_the_budget_line(tmp_path):
    from kitctl.reports.plots import make_plots

    doc = json.loads(EAGER.read_text())
    trials = doc["results"][0]["trials"]
    files = make_plots([load_source(EAGER)], tmp_path)
    vram = next(f for f in files if f.kind == "vram")
    pts = vram.data["points"]
    assert sum(len(v) for v in pts.values()) == len(trials) == 21
    assert sorted(pts["pass"]) == sorted((t["batch"], t["peaks"]["device_delta_mib"]) for t in trials
                                         if t["status"] == "ok")
    assert sorted(pts["memory failure"]) == sorted((t["batch"], t["peaks"]["device_delta_mib"]) for t in trials
                                                   if t["status"] == "oom")
    assert pts["other failure"] == []
    assert vram.data["budget_y"] == doc["budget"]["budget_mib"] == 16120
    bars = next(f for f in files if f.kind == "maxbatch")
    assert bars.data["values"] == [8832.0]
    for f in files:
        assert f.path.stat().st_size > 10_000 and f.path.read_bytes()[:4] == b"\x89PNG"


def test_plots_of_every_kind(tmp_path):
    from kitctl.reports.plots import make_plots

    files = make_plots([load_source(SAMPLE), load_source(TPUT), load_source(REF)], tmp_path)
    by = {f.path.name: f for f in files}
    gate = by["maxbatch-sample-vram-tensorflow-xla-fp32.png"].data
    assert (4096, 16121.0) in gate["points"]["memory failure"]  # vram_cap_exceeded is a memory failure
    bf16 = by["maxbatch-sample-vram-pytorch-eager-bf16.png"].data
    assert [b for b, _ in bf16["points"]["other failure"]] == [256, 256]  # the timeout and its retry
    mb = by["maxbatch-sample-maxbatch.png"].data
    assert mb["values"] == [1860.0, 4096.0, 2730.0, 0.0] and mb["notes"] == ["", "≥", "", "invalid"]
    tp = by["throughput-sample-throughput.png"].data
    assert tp["values"] == [10200.0, 12880.0, 17400.0, 19200.0]
    assert tp["err_low"] == [90.0, 150.0, 0.0, 200.0] and tp["err_high"] == [90.0, 60.0, 0.0, 130.0]
    ref = by["reference-maxbatch-vram-pytorch-eager-fp32.png"].data
    assert ref["budget_y"] == 16120.0 and sum(len(v) for v in ref["points"].values()) == 12
    (overview_name,) = [n for n in by if n.startswith("overview-maxbatch-")]
    overview = by[overview_name].data
    assert len(overview["values"]) == 8 and overview["labels"][-1].endswith("[2] SAMPLE GPU 16 GiB")


def test_plots_without_matplotlib_is_one_line(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None; from kitctl.cli import main; "
            f"sys.argv = ['kitctl', 'report', {str(EAGER)!r}, '--plots', {str(tmp_path / 'p')!r}]; main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    one_line_refusal(p, "--plots needs matplotlib")


# ---- the reference runner's format --------------------------------------------------------------

def test_reference_is_normalised():
    src = load_source(REF)
    assert src.kind == "reference" and src.gpu_name == "SAMPLE GPU 16 GiB" and src.budget_mib == 16120.0
    rows = {r.engine: r for r in src.rows}
    assert set(rows) == {"opennn-pool1", "pytorch-compile", "pytorch-eager", "tensorflow-xla"}
    assert all(r.precision == "fp32" for r in src.rows)
    e = rows["pytorch-eager"]
    assert (e.max_batch, e.next_batch, e.next_status, e.peak_mib, e.search_status) == (
        1800, 1801, "oom", 15800.0, "bounded_by_memory_failure")
    tf = rows["tensorflow-xla"]  # exit_1 at max + 1: the reference's claim, not a capacity
    assert (tf.search_status, tf.max_batch, tf.reference_claim, tf.has_capacity, tf.has_figure) == (
        "unclassified_next_failure", 3000, True, False, True)
    assert tf.result == "next failure unclassified (exit_1 at 3,001)" and tf.figure_text == "3,000 (reference claim)"
    assert not e.reference_claim and e.figure_text == "1,800"
    assert len(src.points[("pytorch-eager", "fp32")]) == 12


def test_reference_v1_keeps_its_headline_figures():
    """issue 14: V1's `exit_1` at max + 1 made every engine "none"; its figures are its claim."""
    src = load_source(REF_V1)
    rows = {r.engine: r for r in src.rows}
    assert {e: r.max_batch for e, r in rows.items()} == {
        "opennn-pool1": 4752, "pytorch-compile": 9216, "pytorch-eager": 8704, "tensorflow-xla": 11760}
    assert all(r.reference_claim and r.search_status == "unclassified_next_failure" for r in src.rows)
    md = render([src])
    assert "| OpenNN (batch pool 1) | fp32 | 4,752 (reference claim) | 15,962 MiB | 4,753 (exit_1) | " \
           "next failure unclassified (exit_1 at 4,753) |" in md
    assert "none" not in md.split("## Headline ratios")[0] and "invalid" not in md
    # every figure its metrics state, as written
    for metric, value in (("max_train_batch.opennn_batch_pool_1", "4,752"), ("max_train_batch.pytorch_best", "9,216"),
                          ("max_train_batch.tensorflow_xla", "11,760"), ("ratio.opennn_vs_pytorch_best", "0.516"),
                          ("ratio.opennn_vs_tensorflow_xla", "0.404")):
        assert f"| fp32 | `{metric}` | {value} |" in md
    assert "| fp32 | PyTorch best vs OpenNN (batch pool 1) | 1.94× larger batch (reference claim) |" in md
    claim = next(c for c in caveats(src) if c.startswith("**Reference's own claim**"))
    assert "OpenNN (batch pool 1) fp32 4,752 (next: exit_1 at 4,753)" in claim and "does not classify" in claim
    assert "| Memory | 16,376 MiB total |" in md and "cap = card total 16,376 − reserve 256 = 16,120 MiB" in md
    from kitctl.reports.results_list import headline

    assert "opennn-pool1 fp32: 4,752 (reference claim)" in headline(src)  # `results list` too


def test_kitctl_keeps_its_stricter_rule():
    """The same next failure in a kitctl artifact (a crash, not a memory failure) is no capacity."""
    src = load_source(SAMPLE)
    bad = next(r for r in src.rows if r.search_status == "invalid_non_memory_failure")
    assert (bad.engine, bad.precision) == ("pytorch-eager", "bf16")
    assert bad.max_batch and not bad.reference_claim and not bad.has_figure
    assert "| PyTorch eager | bf16 | none | — |" in render([src])


def test_reference_newer_layout_invalid_is_its_own_word(tmp_path):
    """A newer reference file that says `invalid_non_memory_failure` itself: its max batch is shown as its
    claim, and the caveat quotes its own status; its per-precision metrics are listed."""
    doc = json.loads(REF_V1.read_text())
    nested = copy.deepcopy(doc)
    nested["results"] = {"fp32": doc["results"], "bf16": copy.deepcopy(doc["results"])}
    for p in ("fp32", "bf16"):
        for e in nested["results"][p].values():
            e["search_status"] = "invalid_non_memory_failure"
    nested["results"]["bf16"]["pytorch_eager"]["next_batch_trial"]["reason"] = "oom"
    nested["results"]["bf16"]["pytorch_eager"]["search_status"] = "bounded_by_memory_failure"
    nested["metrics"] = {"max_train_batch": {"fp32": doc["metrics"]["max_train_batch"], "bf16": {"pytorch_best": "n/a"}},
                         "ratio": {"fp32": doc["metrics"]["ratio"]}}
    f = tmp_path / "nested.json"
    f.write_text(json.dumps(nested))
    src = load_source(f)
    rows = {(r.engine, r.precision): r for r in src.rows}
    assert rows[("opennn-pool1", "bf16")].figure_text == "4,752 (reference claim)"
    assert rows[("pytorch-eager", "bf16")].has_capacity and not rows[("pytorch-eager", "bf16")].reference_claim
    md = render([src])
    assert "itself marks such a search `invalid_non_memory_failure`" in md
    assert "| fp32 | `ratio.opennn_vs_pytorch_best` | 0.516 |" in md and "n/a" not in md


def test_reference_nested_layout_and_statuses(tmp_path):
    doc = json.loads(REF.read_text())
    nested = copy.deepcopy(doc)
    nested["results"] = {"bf16": copy.deepcopy(doc["results"])}
    eager = nested["results"]["bf16"]["pytorch_eager"]
    eager["search_status"] = "censored_at_max_batch_limit"
    eager["next_batch_trial"] = None
    eager["all_trials"] = [t for t in eager["all_trials"] if t["batch"] <= 1800]
    for t in eager["all_trials"]:
        t["peak_delta_mib"] = t["peak_vram_mib"] - 300
    f = tmp_path / "nested.json"
    f.write_text(json.dumps(nested))
    src = load_source(f)
    rows = {r.engine: r for r in src.rows}
    assert {r.precision for r in src.rows} == {"bf16"}
    assert rows["pytorch-eager"].search_status == "censored_at_max_batch"
    assert rows["pytorch-eager"].peak_mib == 15500.0  # the delta, when every trial has one
    assert rows["pytorch-eager"].peak_source == "device delta (reference runner)"
    assert "**Censored search** — PyTorch eager bf16" in render([src])


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["results"]["pytorch_eager"].pop("all_trials"), "results.pytorch_eager.all_trials is missing"),
    (lambda d: d.update(benchmark_id="gpu-resnet50-throughput"), "benchmark_id 'gpu-resnet50-throughput' is not supported"),
    (lambda d: d.update(schema_version=2), "schema_version 2 is not supported"),
    (lambda d: d.update(results={}), "results is missing or empty"),
    (lambda d: d["results"]["tensorflow"]["all_trials"][0].pop("ok"), "all_trials[0] lacks batch/ok"),
])
def test_bad_reference_is_one_error(tmp_path, edit, message):
    doc = json.loads(REF.read_text())
    edit(doc)
    f = tmp_path / "ref.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(ArtifactError) as exc:
        load_source(f)
    assert message in str(exc.value) and "\n" not in str(exc.value)


# ---- compare ------------------------------------------------------------------------------------

def _shift(path: Path, tmp: Path, name: str, engine: str, precision: str, factor: float) -> Path:
    doc = json.loads(path.read_text())
    for c in doc["results"]:
        if c["engine"] == engine and c["precision"] == precision:
            if doc["benchmark"] == "maxbatch":
                c["max_batch"] = int(c["max_batch"] * factor)
                c["next_batch"] = c["max_batch"] + 1
            else:
                for k in ("median", "min", "max", "ci_low", "ci_high"):
                    c["summary"][k] = c["summary"][k] * factor if c["summary"][k] is not None else None
    out = tmp / name
    out.write_text(json.dumps(doc))
    return out


def test_compare_exit_codes(tmp_path):
    worse = _shift(EAGER, tmp_path, "worse.json", "pytorch-eager", "fp32", 0.97)  # −3%
    p = kitctl("compare", str(EAGER), str(worse))
    assert p.returncode == 0, p.stdout + p.stderr  # a real change, but under the 5% threshold
    assert "changed" in p.stdout and "No regression beyond 5%." in p.stdout
    p = kitctl("compare", str(EAGER), str(worse), "--threshold", "2")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "1 regression beyond 2%: PyTorch eager fp32 8,832 → 8,567 (−3.0%)" in p.stdout
    p = kitctl("compare", str(worse), str(EAGER), "--threshold", "2")
    assert p.returncode == 0 and "improvement" in p.stdout
    p = kitctl("compare", str(EAGER), str(EAGER))
    assert p.returncode == 0 and "same" in p.stdout


def test_compare_reads_reference_and_writes_markdown(tmp_path):
    # another GPU model: not comparable (exit 3) unless --force
    p = kitctl("compare", str(REF), str(SAMPLE), "--out", str(tmp_path / "c.md"))
    assert p.returncode == 3, p.stdout + p.stderr
    assert "Not comparable (exit 3): GPU model (SAMPLE GPU 16 GiB vs NVIDIA H200)." in p.stdout
    assert "regression" not in p.stdout.replace("is a regression", "")
    p = kitctl("compare", str(REF), str(SAMPLE), "--out", str(tmp_path / "c.md"), "--force")
    assert p.returncode == 1, p.stdout + p.stderr  # forced: the reference's TF claim 3,000 → 2,730
    md = (tmp_path / "c.md").read_text(encoding="utf-8")
    assert "| PyTorch eager | fp32 | 1,800 | 1,860 | +3.3% | changed | below the 5% threshold |" in md
    assert "| OpenNN (batch pool 1) | fp32 | 1,000 | not run | — | only in OLD | not measured in NEW |" in md
    assert "Compared with --force although the results measure different things: GPU model" in md
    assert ("| TensorFlow XLA | fp32 | 3,000 (reference claim) | 2,730 | −9.0% | **regression** | "
            "OLD: the reference runner's claim (next failure unclassified) |") in md
    assert "OLD `reference-maxbatch.json` (reference runner) states: max_train_batch.opennn_batch_pool_1 1,000" in md


def test_compare_shows_every_figure_of_a_v1_reference(tmp_path):
    """The V1 reference against itself on its own card: its claims compare, its metrics are listed."""
    again = tmp_path / "again.json"
    shutil.copy(REF_V1, again)
    p = kitctl("compare", str(REF_V1), str(again), "--out", str(tmp_path / "c.md"))
    assert p.returncode == 0, p.stdout + p.stderr
    md = (tmp_path / "c.md").read_text(encoding="utf-8")
    for engine, mb in (("OpenNN (batch pool 1)", "4,752"), ("PyTorch torch.compile", "9,216"),
                       ("PyTorch eager", "8,704"), ("TensorFlow XLA", "11,760")):
        assert f"| {engine} | fp32 | {mb} (reference claim) | {mb} (reference claim) | 0% | same |" in md
    for stated in ("max_train_batch.opennn_batch_pool_1 4,752", "max_train_batch.pytorch_best 9,216",
                   "max_train_batch.tensorflow_xla 11,760", "ratio.opennn_vs_pytorch_best 0.516",
                   "ratio.opennn_vs_tensorflow_xla 0.404"):
        assert stated in md and stated in p.stdout.replace("\n", " ")


def test_compare_maxbatch_rules():
    ref, sample = load_source(REF), load_source(SAMPLE)
    assert compare(ref, sample, 5.0).not_comparable  # another GPU model
    c = {(x.engine, x.precision): x for x in compare(ref, sample, 5.0, force=True).changes}
    assert c[("pytorch-compile", "fp32")].flag == "improvement"  # ≥ 4,096 vs 2,000: certain
    assert c[("tensorflow-xla", "fp32")].regression  # the reference's claim 3,000 → 2,730 (−9%)
    back = {(x.engine, x.precision): x for x in compare(sample, ref, 5.0, force=True).changes}
    assert back[("tensorflow-xla", "fp32")].flag == "improvement"  # 2,730 → 3,000 (claim)
    assert back[("pytorch-compile", "fp32")].flag == "regression"  # 2,000 < ≥ 4,096: certain
    assert compare(load_source(EAGER), load_source(PARTIAL), 5.0).regressions == []  # not run ≠ regression


def _edited(path: Path, tmp: Path, name: str, edit) -> Path:
    doc = json.loads(path.read_text())
    edit(doc)
    out = tmp / name
    out.write_text(json.dumps(doc))
    return out


def _whole_card(d):
    d["budget"].update(limit_mib=143771, budget_mib=143515, emulated_smaller_card=False, limit_source="card total (NVML)")
    d["configuration"]["vram_limit_mib"] = None
    for c in d["results"]:
        c["max_batch"], c["next_batch"] = 2000, 2001  # far below the 16 GiB run's 8,832: a "−77%"


@pytest.mark.parametrize("edit, why", [
    (_whole_card, "VRAM limit L (16,376 MiB vs 143,771 MiB)"),
    (lambda d: d["budget"].update(reserve_mib=4096, budget_mib=12280) or d["results"][0].update(max_batch=6000),
     "VRAM budget B = L − R (16,120 MiB vs 12,280 MiB)"),
    (lambda d: d["host"]["gpu"].update(name="NVIDIA A100-SXM4-80GB") or d["results"][0].update(max_batch=6000),
     "GPU model (NVIDIA H200 vs NVIDIA A100-SXM4-80GB)"),
    (lambda d: d["configuration"].update(device="cpu") or d["results"][0].update(max_batch=6000), "device (cuda vs cpu)"),
    (lambda d: d["configuration"].update(input="64x64x3, 10 classes") or d["results"][0].update(max_batch=6000),
     "input geometry (32x32x3 vs 64x64x3)"),
])
def test_compare_different_setups_is_not_comparable(tmp_path, edit, why):
    """issue 14: another VRAM limit/budget, GPU model, device or input was read as a "regression" (exit 1)."""
    other = _edited(EAGER, tmp_path, "other.json", edit)
    p = kitctl("compare", str(EAGER), str(other))
    assert p.returncode == 3, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and f"Not comparable (exit 3): {why}." in p.stdout, p.stdout
    assert "**regression**" not in p.stdout and "regression beyond" not in p.stdout
    p = kitctl("compare", str(EAGER), str(other), "--force")
    assert p.returncode == 1 and "1 regression beyond 5%" in p.stdout, p.stdout
    assert f"Compared with --force although the results measure different things: {why}" in p.stdout


def test_compare_throughput_at_another_batch_or_dataset_is_not_comparable(tmp_path):
    for key, value in (("batch", 256), ("dataset", "cifar10")):
        other = _edited(TPUT, tmp_path, f"{key}.json", lambda d: d["configuration"].update({key: value}))
        cmp = compare(load_source(TPUT), load_source(other), 5.0)
        assert cmp.not_comparable and cmp.incomparable[0].startswith(f"{key} (")
        assert all(c.flag == "not comparable" and not c.regression for c in cmp.changes)


def test_compare_zero_median_is_no_traceback(tmp_path):
    zero = _edited(TPUT, tmp_path, "zero.json", lambda d: d["results"][0]["summary"].update(median=0))
    for a, b in ((zero, TPUT), (TPUT, zero)):
        p = kitctl("compare", str(a), str(b))
        assert p.returncode in (0, 1) and "Traceback" not in p.stderr, p.stderr
    row = compare(load_source(zero), load_source(TPUT), 5.0).changes[0]
    assert (row.flag, row.pct, row.note) == ("not comparable", None, "OLD median is 0 images/s")


def test_report_renders_odd_but_schema_valid_artifacts(tmp_path):
    """issue 14: `host.gpu: null` with a budget (TypeError) and a non-numeric overhead (ValueError)."""
    def no_gpu(d):
        d["host"]["gpu"] = None

    def odd_overhead(d):
        next(c for c in d["results"] if c.get("overhead"))["overhead"]["overhead_mib"] = "lots"

    for name, edit, expect in (("nogpu.json", no_gpu, "below the card's memory (the artifact records no GPU)"),
                               ("overhead.json", odd_overhead, "| Calibrated overhead, PyTorch eager fp32 | 'lots' MiB")):
        f = _edited(SAMPLE, tmp_path, name, edit)
        p = kitctl("report", str(f))
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert expect in p.stdout


def test_compare_throughput_uses_the_intervals(tmp_path):
    slower = _shift(TPUT, tmp_path, "slower.json", "pytorch-eager", "fp32", 0.9)  # −10%, CIs apart
    p = kitctl("compare", str(TPUT), str(slower))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "intervals do not overlap" in p.stdout
    close = _shift(TPUT, tmp_path, "close.json", "pytorch-eager", "fp32", 0.995)  # CIs overlap
    cmp = compare(load_source(TPUT), load_source(close), 0.1)
    row = next(x for x in cmp.changes if (x.engine, x.precision) == ("pytorch-eager", "fp32"))
    assert row.flag == "within noise" and not row.regression  # −0.5% ≥ 0.1%, but inside the noise
    one = _shift(TPUT, tmp_path, "one.json", "pytorch-eager", "bf16", 0.8)  # one run: no CI
    row = next(x for x in compare(load_source(TPUT), load_source(one), 5.0).changes if x.precision == "bf16"
               and x.engine == "pytorch-eager")
    assert row.regression and "threshold only" in row.note


def test_compare_refuses_mixed_benchmarks_and_bad_threshold():
    one_line_refusal(kitctl("compare", str(TPUT), str(EAGER)), "cannot compare a throughput result")
    one_line_refusal(kitctl("compare", str(EAGER), str(EAGER), "--threshold", "-1"), "--threshold")


# ---- bad files: one line, exit 2 ----------------------------------------------------------------

@pytest.fixture()
def bad_files(tmp_path) -> dict[str, Path]:
    text = EAGER.read_text()
    wrong = json.loads(text)
    del wrong["results"][0]["trials"][3]["status"]
    files = {
        "not-json": ("notes.json", "this is not JSON\n"),
        "truncated": ("truncated.json", text[: len(text) // 2]),
        "wrong-schema": ("wrong.json", json.dumps(wrong)),
        "unknown-kind": ("other.json", json.dumps({"hello": "world"})),
        "empty": ("empty.json", ""),
    }
    out = {}
    for key, (name, content) in files.items():
        (tmp_path / name).write_text(content)
        out[key] = tmp_path / name
    out["missing"] = tmp_path / "missing.json"
    return out


@pytest.mark.parametrize("kind, message", [
    ("not-json", "is not valid JSON (line 1"),
    ("truncated", "truncated?"),
    ("wrong-schema", "does not match its schema at results/0/trials/3: 'status' is a required property"),
    ("unknown-kind", "neither a kitctl artifact nor a reference max-batch JSON"),
    ("empty", "is empty"),
    ("missing", "cannot read"),
])
def test_bad_file_report_and_compare(bad_files, kind, message):
    bad = str(bad_files[kind])
    line = one_line_refusal(kitctl("report", bad), message)
    assert bad in line
    one_line_refusal(kitctl("compare", str(EAGER), bad), message)


def test_bad_file_among_good_ones_writes_nothing(bad_files, tmp_path):
    out = tmp_path / "r.md"
    one_line_refusal(kitctl("report", str(EAGER), str(bad_files["truncated"]), "--out", str(out)))
    assert not out.exists()


# ---- results list -------------------------------------------------------------------------------

def test_results_list(tmp_path):
    for f in (EAGER, SAMPLE, TPUT, REF):
        shutil.copy(f, tmp_path / f.name)
    shutil.copy(PARTIAL, tmp_path / "maxbatch-resnet50-synthetic-20261129T200957Z.partial.json")
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "notes.txt").write_text("not a result")
    (tmp_path / "other.json").write_text('{"tool": "something else"}')
    p = kitctl("results", "list", str(tmp_path))
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "pytorch-eager fp32: 8,832" in out and "NVIDIA H200 @ 16,376 MiB" in out
    assert "interrupted (partial)" in out and "pytorch-compile fp32: unfinished" in out
    assert "pytorch-compile fp32: ≥ 4,096" in out and "pytorch-eager bf16: invalid" in out
    assert "tensorflow-xla fp32: 12,880 img/s" in out and "throughput" in out
    assert "reference" in out and "SAMPLE GPU 16 GiB" in out and "opennn-pool1 fp32: 1,000" in out
    assert "broken.json" in out and "unreadable" in out and "notes.txt" not in out
    table, _, apart = out.partition("not results (1):")  # listed apart, after the results
    assert "other.json" not in table and "other.json: other JSON, not a benchmark result" in apart
    assert "2026-11-29 19:59 UTC" in out


def test_results_list_default_dir_and_missing(tmp_path):
    (tmp_path / "results").mkdir()
    shutil.copy(EAGER, tmp_path / "results" / EAGER.name)
    p = kitctl("results", "list", cwd=tmp_path)
    assert p.returncode == 0 and "pytorch-eager fp32: 8,832" in p.stdout
    one_line_refusal(kitctl("results", "list", str(tmp_path / "nope")), "no such directory")


def test_peak_inversions_on_the_full_card_run():
    """The committed full-card H200 run: batch 16,384 peaked above batch 32,768."""
    full = Path(__file__).resolve().parents[1] / "results/reference/maxbatch-resnet50-synthetic-20261129T200326Z.json"
    if not full.exists():
        unavailable(f"committed artifact {full.name} is not in results/reference/")
    src = load_source(full)
    inv = peak_inversions(src.points[("pytorch-eager", "fp32")])
    assert [(a.batch, b.batch) for a, b in inv] == [(16384, 32768)]
    md = render([src])
    assert "continued 1× with" in md  # the resume is part of "Reproduce"
    assert "**Resumed** — the run was interrupted (SIGINT) and resumed 1×" in md


def test_resumes_on_one_other_gpu_are_named_once():
    """The committed jax-xla bf16 search: resumed 3×, the last two on one warm machine's GPU."""
    art = Path(__file__).resolve().parents[1] / "results/reference/maxbatch-resnet50-synthetic-20261201T215512Z.json"
    if not art.exists():
        unavailable(f"committed artifact {art.name} is not in results/reference/")
    md = render([load_source(art)])
    assert "continued 3× with" in md
    assert md.count("Continued on another NVIDIA H200 (GPU-0096ffb8-fd47-7998-1fbc-a375e6223632") == 1
    assert "2 h 29 min from the first start to the end, across 4 invocations" in md


def test_cpu_and_empty_artifacts_render(tmp_path):
    """--device cpu: no GPU, no budget, no device delta; a run that has not started a cell yet."""
    from kitctl.reports.plots import make_plots

    doc = json.loads(SAMPLE.read_text())
    doc["host"]["gpu"], doc["budget"] = None, None
    doc["configuration"].update(device="cpu", memory_limit_mib=1500)
    for c in doc["results"]:
        c.update(overhead=None, calibration=None, framework_budget_mib=None)
        for p in [t["peaks"] for t in c["trials"]] + ([c["peaks_at_max"]] if c["peaks_at_max"] else []):
            p.update(device_delta_mib=None, framework_mib=None, sample_rate_hz=None)
    f = tmp_path / "cpu.json"
    f.write_text(json.dumps(doc))
    src = load_source(f)
    md = render([src])
    # Host memory, never "VRAM", in the table and in the plots' names
    assert "| Peak host RSS at max |" in md and "Peak host RSS at max: host RSS." in md
    assert "VRAM at max" not in md
    assert "**CPU run**" in md and "| Memory rule | --memory-limit 1,500 MiB" in md and "| GPU | none (CPU run) |" in md
    vram = [p for p in make_plots([src], tmp_path / "p") if p.kind == "vram"]
    assert all(p.data["budget_y"] is None and p.data["missing_peak"] == [] for p in vram)
    assert vram and all("-memory-" in p.path.name and "-vram-" not in p.path.name for p in vram)
    doc.update(state="running", results=[])
    f.write_text(json.dumps(doc))
    md = render([load_source(f)])
    assert "_No engine × precision has started yet._" in md and "0 of 6 engine × precision searches" in md


def _engine_copy(path: Path, tmp: Path, name: str, engine: str, max_batch: int) -> Path:
    """The H200 eager run as if it had measured another engine (one run per engine)."""
    doc = json.loads(path.read_text())
    for c in doc["results"]:
        c["engine"], c["max_batch"], c["next_batch"] = engine, max_batch, max_batch + 1
    out = tmp / name
    out.write_text(json.dumps(doc))
    return out


def test_engines_from_separate_runs_on_one_card_get_the_end_tables_ratios(tmp_path):
    opennn = _engine_copy(EAGER, tmp_path, "opennn.json", "opennn-pool1", 7285)
    text = render([load_source(EAGER), load_source(opennn)])
    assert "Across [1], [2] (same GPU, VRAM limit and data" in text
    assert "| fp32 | PyTorch eager vs OpenNN (batch pool 1) | 1.21× larger batch |" in text
    # the same engine in both: which one to compare is ambiguous, so no cross ratios
    again = _engine_copy(EAGER, tmp_path, "again.json", "pytorch-eager", 8000)
    assert "Across" not in render([load_source(EAGER), load_source(again)])
    # the same engine on the whole card (another VRAM limit): not comparable
    doc = json.loads(opennn.read_text())
    doc["budget"].update(limit_mib=doc["budget"]["card_total_mib"], emulated_smaller_card=False)
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps(doc))
    assert load_source(whole).machine_short != load_source(EAGER).machine_short
    assert "Across" not in render([load_source(EAGER), load_source(whole)])


def test_native_trial_provenance_names_the_program():
    from kitctl.reports.measured import _provenance_text

    assert _provenance_text({"trial": "/w/build/opennn/bin/kit-opennn-trial"}) == \
        "local trial program `/w/build/opennn/bin/kit-opennn-trial`"
    assert _provenance_text({"interpreter": "/usr/bin/python3", "trial": "t.py"}) == \
        "local interpreter `/usr/bin/python3`, trial `t.py`"


# ---- plots on awkward folders -------------------------------------------------------------------

def test_plot_links_are_url_encoded(tmp_path):
    """issue 14: a folder name with spaces (or parentheses) broke the Markdown image links."""
    p = kitctl("report", str(SAMPLE), "--out", "my report/r.md", "--plots", "my report/plots (v2)", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    md = (tmp_path / "my report/r.md").read_text(encoding="utf-8")
    pngs = sorted(x.name for x in (tmp_path / "my report/plots (v2)").iterdir())
    assert pngs
    for name in pngs:
        assert f"](plots%20%28v2%29/{name})" in md
    assert "](plots (v2)/" not in md


def _mount_tmpfs(d: Path, size: str) -> None:
    d.mkdir()
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True,
                           timeout=30)
    except OSError as exc:
        unavailable(f"cannot mount a tmpfs: {exc}")
    if r.returncode != 0:
        if os.geteuid() != 0:
            host_lacks("root", f"mounting a tmpfs needs root: {r.stderr.decode(errors='replace').strip()}")
        unavailable(f"cannot mount a tmpfs: {r.stderr.decode(errors='replace').strip()}")


@pytest.fixture()
def tiny_fs(tmp_path):
    """A 128 KiB tmpfs: a few plots fit, the rest hit a full disk."""
    d = tmp_path / "tiny"
    _mount_tmpfs(d, "128k")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], capture_output=True, timeout=30)


def test_report_plots_on_a_full_disk_leave_no_truncated_png(tiny_fs):
    """issue 14: a full disk left a truncated PNG. Pillow removes its file when a write inside its
    encoder fails, but not when the last buffered flush at close does; which one happens depends on
    how much room is left, so every fill level is tried."""
    from kitctl.reports.plots import PlotError, make_plots

    src = load_source(SAMPLE)
    failed = 0
    for fill_kib in range(0, 128, 8):
        for f in tiny_fs.iterdir():
            shutil.rmtree(f) if f.is_dir() else f.unlink()
        (tiny_fs / "fill").write_bytes(b"\0" * fill_kib * 1024)
        out = tiny_fs / "plots"
        try:
            make_plots([src], out)
        except PlotError as exc:
            failed += 1
            assert "No space left on device" in str(exc) and "\n" not in str(exc)
        for png in out.iterdir() if out.exists() else []:
            data = png.read_bytes()
            assert png.suffix == ".png" and data[:8] == b"\x89PNG\r\n\x1a\n" and data[-8:] == b"IEND\xaeB`\x82", \
                f"fill {fill_kib} KiB left {png.name} ({len(data)} bytes)"
    assert failed >= 8  # most fill levels cannot hold the plots
    p = kitctl("report", str(SAMPLE), "--plots", str(tiny_fs / "plots"))
    assert str(tiny_fs / "plots") in one_line_refusal(p, "No space left on device")


def test_report_out_on_a_full_disk_leaves_no_truncated_file(tiny_fs):
    (tiny_fs / "fill").write_bytes(b"\0" * 126 * 1024)
    p = kitctl("report", str(EAGER), "--out", str(tiny_fs / "r.md"))
    one_line_refusal(p, "No space left on device")
    assert sorted(f.name for f in tiny_fs.iterdir()) == ["fill"]


def test_a_rematerialised_xla_max_batch_says_so(tmp_path):
    """The real H200 jax-xla search (--vram-limit 16376): its trial at max batch 13,568 carries what
    the jax trial now records, parsed by the trial's own parser from that trial's real stderr_tail."""
    real = Path(__file__).resolve().parents[1] / "results" / "reference" / "maxbatch-resnet50-synthetic-20261201T163217Z.json"
    import importlib.util

    spec = importlib.util.spec_from_file_location("kit_xla_log", real.parents[2] / "trials/jax/xla_log.py")
    xla_log = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(xla_log)

    assert not any("rematerialised" in c for c in caveats(load_source(real)))  # older trials: no field

    def edit(doc):
        (cell,) = doc["results"]
        for t in cell["trials"]:
            if t["result"] is not None:
                t["result"]["xla_rematerialization"] = xla_log.parse_rematerialization(t["stderr_tail"])

    src = load_source(_edited(real, tmp_path, "maxbatch-remat.json", edit))
    cav = caveats(src)
    notes = [c for c in cav if c.startswith("**XLA rematerialised**")]
    assert len(notes) == 1, cav
    note = notes[0]
    assert note.startswith("**XLA rematerialised** — JAX XLA fp32 at max batch 13,568:")
    assert "22.35 → 14.60 GiB; its limit 14.16 GiB was not reached" in note
    assert "**XLA rematerialised**" in render([src])


def test_candidate_time_row_from_the_trials_phases(tmp_path):
    """A max-batch artifact whose trials timed their phases (trials/common/kittrial.py) says, per cell, where a
    candidate's time went; an artifact without phases has no such row (every committed one renders as before)."""
    from kitctl.benchmarks.maxbatch.report import candidate_time

    path = DATA.parent.parent / "results" / "reference" / "first-run" / "maxbatch-resnet50-synthetic-20261203T112759Z.json"
    doc = json.loads(path.read_text())
    cell = doc["results"][0]
    assert candidate_time(cell) is None and "Candidate time" not in render([load_source(path)])
    for i, t in enumerate(cell["trials"]):
        t["elapsed_s"] = 10.0 + i
        t["result"]["phases"] = {"startup_s": 0.5, "import_s": 2.0, "device_s": 0.0, "build_s": 1.5, "steps_s": 5.0 + i}
    line = candidate_time(cell)
    n = len(cell["trials"])
    mid = (n - 1) / 2
    assert line.startswith(f"PyTorch eager {cell['precision']}: {10 + mid:,.1f} s per candidate ({n} candidates; ")
    assert f"steps {5 + mid:,.1f}, outside them 1.0)" in line  # 10 + i - (0.5 + 2 + 0 + 1.5 + 5 + i)
    p = tmp_path / path.name
    p.write_text(json.dumps(doc))
    assert f"| Candidate time | {line} |" in render([load_source(p)])
