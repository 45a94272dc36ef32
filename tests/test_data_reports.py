"""The data benchmarks' artifacts and reports say what ran (found on the first H200 data runs, results/*-20261201T19*).

The fixtures are those committed H200 artifacts (read, never written), changed in memory where a case needs it
and written to tmp_path. NVML cannot exist here: `tests/fake_nvml.FakeNvmlLib` stands in for pynvml and the real
`kitctl.core.gpu.Nvml` adapter describes the GPU, as for the engine benchmarks.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_nvml import FakeDevice, FakeNvmlLib, NVMLError

from kitctl.benchmarks.data import session, trial
from kitctl.core.gpu import detect_gpu
from kitctl.reports.report import caveats, render
from kitctl.reports.sources import load_source

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "reference"
SIZE = RESULTS / "datasize-rrc224-corpus-20261201T192422Z.json"  # ffcv, 2,000 images, 16 writers
LOAD_JPEG = RESULTS / "dataload-rrc224-corpus-20261201T192753Z.json"  # 2 runs/cell; ffcv ram FAILED (SIGABRT)
LOAD_RAW = RESULTS / "dataload-rrc224-corpus-20261201T193303Z.json"  # 1 run/cell; ffcv cold FAILED
E2E_R18 = RESULTS / "train-e2e-rrc224-corpus-20261202T003016Z.json"  # H200, resnet18, 1 run/cell
SWEEP = RESULTS / "dataload-rrc224-corpus-20261202T023959Z.json"  # H200, jpeg90@256 ram, workers 1..16, 1 run
H200_UUID = "GPU-5c8a2f10-8d2e-4b7a-9d1e-0a1b2c3d4e5f"


def doc_of(path: Path) -> dict:
    return json.loads(path.read_text())


def written(tmp_path: Path, doc: dict, name: str) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def h200() -> FakeNvmlLib:
    return FakeNvmlLib([FakeDevice(H200_UUID, name="NVIDIA H200", total_mib=143771.0)], driver="580.95.05")


# ---- 1. the GPU a data run may use is recorded, and the report says what used it ---------------------------

def test_detect_gpu_describes_the_gpu_through_nvml_and_none_without_one():
    g = detect_gpu(h200())
    assert g is not None and g["name"] == "NVIDIA H200" and g["uuid"] == H200_UUID
    assert g["index"] == 0 and g["driver"] == "580.95.05" and g["total_mib"] == 143771.0
    assert detect_gpu(FakeNvmlLib([])) is None  # NVML, no device
    assert detect_gpu(FakeNvmlLib(init_error=NVMLError("Driver Not Loaded"))) is None


def test_a_new_data_doc_records_the_gpu_and_its_trials_see_only_that_one(tmp_path):
    g = detect_gpu(h200())
    doc = session.new_doc("dataload", {"x": 1}, g)
    assert doc["host"]["gpu"]["uuid"] == H200_UUID
    assert session.new_doc("datasize", {"x": 1})["host"]["gpu"] is None  # CPU-only by nature
    # a real local trial process (a stand-in "interpreter" that reports the CUDA devices it was given)
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho "KIT-RESULT {\\"status\\": \\"ok\\", \\"cuda\\": \\"$CUDA_VISIBLE_DEVICES\\"}"\n')
    fake.chmod(0o755)
    where = trial.Where.of(type("Cfg", (), {"runtime": "local", "python": str(fake), "image_tag": "ci"})(), doc)
    assert where.gpu_uuid == H200_UUID
    try:
        tr = trial.run_on_dataset(where, "dataload", None, ["dataload"], None, 60.0)
    finally:
        trial.close_runtimes(where.run_id)
    assert tr.status == "ok" and tr.result["cuda"] == H200_UUID


def test_report_names_the_recorded_gpu_and_only_the_gpu_loader_as_its_user(tmp_path):
    doc = doc_of(LOAD_JPEG)
    doc["host"]["gpu"] = detect_gpu(h200())
    src = load_source(written(tmp_path, doc, LOAD_JPEG.name))
    text = render([src])
    assert "none (CPU run)" not in text
    assert "| GPU | NVIDIA H200 · UUID `" + H200_UUID in text
    assert "| GPU use | pytorch-nvjpeg (decode) ran on it; nothing else did |" in text
    assert src.machine_short == "NVIDIA H200"


def test_a_gpu_present_but_used_by_no_loader_is_reported_unused(tmp_path):
    doc = doc_of(LOAD_JPEG)
    doc["host"]["gpu"] = detect_gpu(h200())
    doc["results"] = [c for c in doc["results"] if c["loader"] != "pytorch-nvjpeg"]
    doc["configuration"]["loaders"] = [x for x in doc["configuration"]["loaders"] if x != "pytorch-nvjpeg"]
    src = load_source(written(tmp_path, doc, LOAD_JPEG.name))
    text = render([src])
    assert src.machine_short == "NVIDIA H200 (unused)"
    assert "| GPU use | unused: nothing in this run ran on a GPU" in text
    assert "ran on it" not in text


def test_an_older_artifact_whose_gpu_loader_ran_is_not_called_a_cpu_run():
    src = load_source(LOAD_JPEG)  # host.gpu null: written before the fix, yet pytorch-nvjpeg ran on the H200
    text = render([src])
    assert "none (CPU run)" not in text and src.machine_short == "GPU (not recorded)"
    assert "pytorch-nvjpeg (decode) ran on a GPU" in text
    assert load_source(SIZE).machine_short == "CPU"  # datasize is CPU work: unchanged


# ---- 2. the overview and the headline ratios speak of loaders, not engines × precisions ----------------------

def test_overview_sets_loaders_side_by_side_and_leaves_out_what_has_no_cells():
    size, jpeg, raw = load_source(SIZE), load_source(LOAD_JPEG), load_source(LOAD_RAW)
    text = render([size, jpeg, raw])
    overview = text.split("## [1]")[0]
    assert "| Engine | Precision |" not in text
    assert "| Loader | Data · source · workers | [2] " in overview
    # jpeg90 and raw share no cell: no ratio column of dashes
    assert "Side by side, images/s (median):" in overview and "÷" not in overview
    assert "| webdataset | jpeg90@256 · ram · 16 workers | 6,184 | — |" in overview
    assert "| ffcv | raw@256 · cold · 16 workers | — | FAILED |" in overview
    assert "Side by side, ImageNet-equivalent GB" not in overview  # datasize has no such cells: no empty table
    two_sizes = render([size, size]).split("## [1]")[0]
    assert "Side by side" not in two_sizes


def test_dataload_headline_ratios_are_each_loader_against_pytorch_dataloader_on_the_same_data_and_source():
    text = render([load_source(LOAD_JPEG)])
    assert "Fewer than two engines" not in text
    assert "| Data · source · workers | Comparison | Ratio |" in text
    # 6,184 / 5,193 and 5,914 / 4,137: the artifact's own medians
    assert "| jpeg90@256 · ram · 16 workers | webdataset vs pytorch-dataloader | 1.19× as fast |" in text
    assert "| jpeg90@256 · cold · 16 workers | ffcv vs pytorch-dataloader | 1.43× as fast |" in text
    assert "ffcv vs pytorch-dataloader | " not in text.split("jpeg90@256 · cold")[0]  # the FAILED ram cell: none


def test_datasize_has_no_engine_headline_ratios_section():
    text = render([load_source(SIZE)])
    assert "Headline ratios" not in text and "Fewer than two engines" not in text


# ---- 3. a failed cell, a cell with fewer runs than asked and an interrupted run are caveats ------------------

def test_a_failed_cell_is_a_caveat_with_its_reason():
    cav = caveats(load_source(LOAD_JPEG))
    failed = [c for c in cav if c.startswith("**Failed cell**")]
    assert len(failed) == 1 and "ffcv jpeg90@256 ram, 16 workers" in failed[0]
    assert "exited -6 (SIGABRT)" in failed[0]
    assert "None detected" not in render([load_source(LOAD_RAW)])
    assert any("ffcv raw@256 cold, 16 workers" in c for c in caveats(load_source(LOAD_RAW)))


def test_a_cell_with_fewer_passing_runs_than_asked_is_a_caveat(tmp_path):
    doc = doc_of(LOAD_JPEG)
    cell = next(c for c in doc["results"] if c["loader"] == "webdataset" and c["source"] == "cold")
    cell["runs"] = cell["runs"][:1]  # 1 of the 2 asked
    cav = caveats(load_source(written(tmp_path, doc, LOAD_JPEG.name)))
    assert any(c.startswith("**Fewer runs than asked** — webdataset jpeg90@256 cold, 16 workers: its figure is "
                            "the median of 1 of the 2 runs") for c in cav)


def test_an_interrupted_data_run_reports_its_unfinished_cells_without_a_traceback(tmp_path):
    doc = doc_of(LOAD_JPEG)
    doc.update(state="interrupted", interrupted_by="SIGTERM", finished_utc=None)
    last = doc["results"][-1]
    last.update(status="pending", summary=None, runs=last["runs"][:1])
    name = LOAD_JPEG.name.replace(".json", ".partial.json")
    text = render([load_source(written(tmp_path, doc, name))])
    assert ("**Partial result** — the artifact is `interrupted` by SIGTERM: 7 of 8 loader × data × source × "
            "workers cells finished; unfinished: pytorch-nvjpeg jpeg90@256 cold, 16 workers (1 of 2 runs)") in text
    assert f"`kitctl run dataload --resume {name}`" in text
    # its row says pending with the runs it has, not FAILED with an empty reason
    row = next(line for line in text.splitlines() if line.startswith("| pytorch-nvjpeg | jpeg90@256 | cold"))
    assert "pending (1 of 2 runs done)" in row and "FAILED" not in row


def test_a_failed_datasize_unit_is_a_caveat(tmp_path):
    doc = doc_of(SIZE)
    doc["results"][0].update(status="crash", error="no result line (exit -9 (SIGKILL))", size=None)
    cav = caveats(load_source(written(tmp_path, doc, SIZE.name)))
    assert any(c.startswith("**Failed cell** — ffcv jpeg50@256: no result line (exit -9 (SIGKILL))") for c in cav)


def test_train_e2e_names_its_failed_cells_and_what_ran_on_the_gpu():
    from types import SimpleNamespace

    from kitctl.benchmarks.train_e2e import report as e2e

    runs_ok = [{"status": "ok", "device": "NVIDIA H200"}, {"status": "ok", "device": "NVIDIA H200"}]
    doc = {"configuration": {"runs": 2, "models": ["resnet50"], "loaders": ["synthetic", "ffcv", "pytorch-nvjpeg"]},
           "results": [{"model": "resnet50", "loader": "synthetic", "status": "ok", "runs": runs_ok},
                       {"model": "resnet50", "loader": "pytorch-nvjpeg", "status": "ok", "runs": runs_ok},
                       {"model": "resnet50", "loader": "ffcv", "status": "failed",
                        "reason": "run 1/2 failed — timeout: killed by the kit after 600 s", "runs": []}]}
    src = SimpleNamespace(doc=doc)
    assert e2e.caveats(src) == ["**Failed cell** — resnet50 fed by ffcv: run 1/2 failed — timeout: killed by the kit "
                                "after 600 s. No figure in its row; a run that did not end cleanly is never counted, "
                                "even one that printed a result first."]
    assert e2e.gpu_users(src) == ["training", "pytorch-nvjpeg (decode)"]
    for r in doc["results"]:
        for run in r["runs"]:
            run["device"] = "cpu"
    assert e2e.gpu_users(src) == []


def test_train_e2e_reads_out_where_the_loss_went_nonfinite_and_the_decode_check():
    from types import SimpleNamespace

    from kitctl.benchmarks.train_e2e import report as e2e

    # Inputs to the rendering, not measurements: a run that failed at timed step 7, one whose check ran.
    nan_run = {"run": 1, "status": "error", "first_nonfinite_loss": {"phase": "timed", "step": 7, "of": 30,
                                                                     "value": "nan"},
               "decode_check": {"images": 16, "max_abs_diff": 40, "mean_abs_diff": 0.51234,
                                "probe": {"iterations": 20, "caller_stream": {"corrupted": 13},
                                          "loader": {"corrupted": 0}}, "error": None}}
    broken = {"run": 2, "status": "ok", "decode_check": {"images": 0, "error": "RuntimeError: no nvjpeg"}}
    doc = {"configuration": {"runs": 2, "models": ["resnet50"], "loaders": ["synthetic", "pytorch-nvjpeg"]},
           "results": [{"model": "resnet50", "loader": "synthetic", "status": "ok", "runs": [{"run": 1}]},
                       {"model": "resnet50", "loader": "pytorch-nvjpeg", "status": "ok", "runs": [nan_run, broken]}]}
    assert e2e.diagnoses(doc) == [
        "**Loss went non-finite** — resnet50 pytorch-nvjpeg run 1: first at timed step 7 of 30 (nan)",
        "**GPU decode check** — resnet50 pytorch-nvjpeg run 1: GPU vs CPU decode of 16 images, max |Δ| 40, mean "
        "0.512; freed memory overwritten (pytorch/vision#9606 probe) in 13/20 iterations with decode_jpeg on the "
        "caller's stream, 0/20 with the loader's",
        "**GPU decode check** — resnet50 pytorch-nvjpeg run 2: did not run to the end: RuntimeError: no nvjpeg"]
    assert all(line in e2e.caveats(SimpleNamespace(doc=doc)) for line in e2e.diagnoses(doc))


# ---- 4. "ImageNet GB (file)" does not multiply a small sample's ffcv page padding by 1.28 M -----------------

def test_ffcv_file_extrapolation_adds_the_writers_padding_once_not_per_image():
    from kitctl.benchmarks.datasize.table import FFCV_PAGE_BYTES, imagenet_file_gb, rows

    doc = doc_of(SIZE)
    r = next(x for x in rows(doc) if (x["encoding"], x["side"]) == ("jpeg50", 256))
    assert round(r["file_b"]) == 71_327 and round(r["gb_payload"], 2) == 7.63  # the measured fields, as recorded
    # 11,908,064 B payload + 48,000 B allocation table (2,000 × 24) per image, + 16 pages of padding
    # (130,698,272 B, under 17 pages) once: 7.6281 + 0.0307 + 0.1307 GB; the naive figure was 91.38
    assert r["gb_file"] == pytest.approx(7.7895, abs=1e-3)
    size = {"images": 2000, "payload_bytes": 11_908_064, "file_bytes": 142_654_336, "write_workers": 16}
    assert imagenet_file_gb("ffcv", size, imagenet=2000) == pytest.approx(142_654_336 / 1e9)  # n = N: the file
    # padding beyond (W + 1) pages grows with the images (raw@1600's page tails): that part is scaled
    big = {"images": 2000, "payload_bytes": 1_639_395_054, "file_bytes": 1_954_593_664, "write_workers": 16}
    padding = 1_954_593_664 - 48_000 - 1_639_395_054
    expect = ((1_639_395_054 + 48_000 + padding - 17 * FFCV_PAGE_BYTES) / 2000 * 1_281_167 + 17 * FFCV_PAGE_BYTES) / 1e9
    assert imagenet_file_gb("ffcv", big) == pytest.approx(expect)
    assert imagenet_file_gb("ffcv", {**size, "write_workers": None}) is None  # the rule cannot apply: "—"
    # tar's headers and padding come per image: file bytes per image × ImageNet
    assert imagenet_file_gb("webdataset", {"images": 10, "payload_bytes": 9_000, "file_bytes": 20_480}) == \
        pytest.approx(2048 * 1_281_167 / 1e9)


def test_datasize_report_labels_the_extrapolated_file_figure_and_states_its_rule():
    text = render([load_source(SIZE)])
    assert "| ImageNet GB (file, extrapolated) |" in text and "| ImageNet GB (file) |" not in text
    assert "| ffcv | jpeg50 | 256 | 2,000 | 5,954 | 71,327 | 7.63 | 7.79 | — |" in text
    assert "91.38" not in text.split("**ffcv**")[0].split("| ffcv | jpeg90 | 1600")[0]
    assert "_ImageNet GB (file, extrapolated): ffcv: payload and allocation table" in text
    assert "(W = 16 here)" in text and "| ImageNet file, ffcv |" in text


def test_a_single_run_cell_has_no_interval_rather_than_dashes():
    text = render([load_source(LOAD_RAW)])
    assert "—–—" not in text
    assert "| pytorch-dataloader | raw@256 | ram | 16 | 5,097 | — | 319 | 1 |" in text
    assert "1 run per cell" in text
    e2e = render([load_source(E2E_R18)])
    assert "—–—" not in e2e and "1 run per cell" in e2e and "1 runs" not in e2e
    assert "| resnet18 | ffcv | 8,455.8 | — | 66% | 73% | 8,353.8 | 1 |" in e2e


def test_results_list_headline_names_the_fastest_loader_per_data_and_source():
    from kitctl.reports.results_list import headline

    assert headline(load_source(LOAD_JPEG)) == ("jpeg90@256 · ram · 16 workers: webdataset 6,184 img/s; "
                                                "jpeg90@256 · cold · 16 workers: webdataset 6,356 img/s")


def test_plots_leave_no_figure_open(tmp_path):
    """pyplot keeps every figure until it is closed: a report of many results must not pile them up."""
    import matplotlib.pyplot as plt
    from kitctl.reports.plots import make_plots

    plt.close("all")
    files = make_plots([load_source(p) for p in (LOAD_JPEG, LOAD_RAW, E2E_R18)], tmp_path)
    assert len(files) >= 3 and plt.get_fignums() == []


def test_side_by_side_keeps_a_ratio_column_only_where_the_results_share_a_cell():
    """The sweep shares jpeg90@256 · ram · 16 workers with the first jpeg90 run, raw shares nothing with it."""
    overview = render([load_source(LOAD_JPEG), load_source(LOAD_RAW), load_source(SWEEP)]).split("## [1]")[0]
    assert "(ratios against [1])" in overview
    assert "| [3] ÷ [1] |" in overview and "[2] ÷ [1]" not in overview
    # 5,403 / 5,193 and 5,794 / 6,184: the artifacts' own medians; one worker is "1 worker"
    assert "| pytorch-dataloader | jpeg90@256 · ram · 16 workers | 5,193 | — | 5,403 | 1.04× |" in overview
    assert "| webdataset | jpeg90@256 · ram · 16 workers | 6,184 | — | 5,794 | 0.94× |" in overview
    assert "| ffcv | jpeg90@256 · ram · 1 worker | — | — | 1,118 | — |" in overview


def test_a_sweep_plots_images_per_second_against_workers_and_one_worker_count_plots_bars(tmp_path):
    from kitctl.reports.plots import make_plots

    files = make_plots([load_source(SWEEP), load_source(LOAD_JPEG)], tmp_path)
    by_source = {f.source: f for f in files if f.kind == "dataload"}
    sweep, jpeg = by_source[SWEEP.name], by_source[LOAD_JPEG.name]
    assert sweep.path.name.endswith("-workers.png") and sweep.path.is_file()
    assert [w for w, _ in sweep.data["series"]["webdataset jpeg90@256 ram"]] == [1, 2, 4, 8, 16]
    assert jpeg.path.name.endswith("-loaders.png") and jpeg.path.is_file()
    # one bar per finished cell (ffcv ram FAILED: none), median inside its interval
    labels = [b[0] for b in jpeg.data["bars"]]
    assert "ffcv jpeg90@256 ram" not in labels and "ffcv jpeg90@256 cold" in labels and len(labels) == 7
    assert all(lo <= m <= hi for _, m, lo, hi in jpeg.data["bars"])


# ---- kitctl compare of two dataload runs -----------------------------------------------------------------------

def _compare(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=str(ROOT / "host"))
    return subprocess.run([sys.executable, "-c", "from kitctl.cli import main; main()", "compare", *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=env)


def test_compare_of_two_dataload_runs_flags_a_loader_cell_that_dropped(tmp_path):
    """The first H200 jpeg90 run (2 runs a cell, 5,000-image epochs) against the sweep (1 run a point, the same
    epochs, cores, batch): three 16-worker cells shared, judged by the threshold alone (one run, no interval)."""
    p = _compare(LOAD_JPEG, SWEEP, "--out", tmp_path / "c.md")
    assert p.returncode == 1, p.stdout + p.stderr  # webdataset 6,184 → 5,794: −6.3%, beyond the 5% threshold
    assert "1 regression beyond 5%: webdataset jpeg90@256 · ram · 16 workers 6,184 [6,013–6,355] → 5,794 (1 run)" \
        in p.stdout
    md = (tmp_path / "c.md").read_text()
    assert "| Loader | Data · source · workers | OLD images/s" in md
    assert "| pytorch-dataloader | jpeg90@256 · ram · 16 workers | 5,193 [4,865–5,522] | 5,403 (1 run) | +4.0% | " \
           "within noise |" in md
    # the FAILED cell has no figure to compare
    assert "| ffcv | jpeg90@256 · ram · 16 workers | no result | 5,141 (1 run) | — | not comparable | " \
           "no median in OLD |" in md
    assert "| webdataset | jpeg90@256 · ram · 1 worker | not run | 451 (1 run) | — | only in NEW |" in md
    assert _compare(LOAD_JPEG, SWEEP, "--threshold", "7").returncode == 0


def test_compare_of_dataload_runs_with_other_epochs_or_cores_is_not_comparable(tmp_path):
    p = _compare(LOAD_JPEG, RESULTS / "dataload-rrc224-corpus-20261202T030118Z.partial.json")
    assert p.returncode == 3, p.stdout + p.stderr  # 5,000- vs 10,000-image epochs: start-up weighs differently
    assert "Not comparable (exit 3): images per epoch (5,000 vs 10,000)." in p.stdout
    doc = doc_of(SWEEP)
    doc["host"]["cpu_count"] = 2
    p = _compare(LOAD_JPEG, written(tmp_path, doc, "two-cores.json"))
    assert p.returncode == 3 and "cores (16 vs 2)" in p.stdout, p.stdout + p.stderr
    p = _compare(LOAD_JPEG, written(tmp_path, doc, "two-cores.json"), "--force")
    assert p.returncode == 1 and "Compared with --force although the results measure different things: cores" \
        in p.stdout, p.stdout + p.stderr


def test_compare_of_two_train_e2e_runs_is_per_loader_and_model(tmp_path):
    """Call 25's ResNet-50 run against call 27's (synthetic and pytorch-nvjpeg only, the same setup)."""
    e2e_r50 = RESULTS / "train-e2e-rrc224-corpus-20261202T002641Z.json"
    nvjpeg = RESULTS / "train-e2e-rrc224-corpus-20261202T023822Z.json"
    p = _compare(e2e_r50, nvjpeg, "--out", tmp_path / "c.md")
    assert p.returncode == 0, p.stdout + p.stderr
    md = (tmp_path / "c.md").read_text()
    assert "| Loader | Model | OLD training images/s" in md
    # 4,609.7 → 4,633.0 training images/s: +0.5%, one run each
    assert "| synthetic | resnet50 | 4,610 (1 run) | 4,633 (1 run) | +0.5% | within noise |" in md
    assert "| pytorch-nvjpeg | resnet50 | no result | 1,616 (1 run) | — | not comparable | no median in OLD |" in md
    assert "| ffcv | resnet50 | 4,520 (1 run) | not run | — | only in OLD |" in md
    doc = doc_of(nvjpeg)
    doc["configuration"]["batch"] = 128
    p = _compare(e2e_r50, written(tmp_path, doc, "b128.json"))
    assert p.returncode == 3 and "Not comparable (exit 3): batch (256 vs 128)." in p.stdout, p.stdout + p.stderr
