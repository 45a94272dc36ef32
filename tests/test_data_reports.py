"""The data benchmarks' artifacts and reports say what ran (found on the first H200 data runs, results/*-20261201T19*).

The fixtures are those committed H200 artifacts (read, never written), changed in memory where a case needs it
and written to tmp_path. NVML cannot exist here: `tests/fake_nvml.FakeNvmlLib` stands in for pynvml and the real
`kitctl.core.gpu.Nvml` adapter describes the GPU, as for the engine benchmarks.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from fake_nvml import FakeDevice, FakeNvmlLib, NVMLError

from kitctl import datarun
from kitctl.reports.report import caveats, render
from kitctl.reports.sources import load_source

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
SIZE = RESULTS / "datasize-rrc224-corpus-20261201T192422Z.json"  # ffcv, 2,000 images, 16 writers
LOAD_JPEG = RESULTS / "dataload-rrc224-corpus-20261201T192753Z.json"  # 2 runs/cell; ffcv ram FAILED (SIGABRT)
LOAD_RAW = RESULTS / "dataload-rrc224-corpus-20261201T193303Z.json"  # 1 run/cell; ffcv cold FAILED
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
    g = datarun.detect_gpu(h200())
    assert g is not None and g["name"] == "NVIDIA H200" and g["uuid"] == H200_UUID
    assert g["index"] == 0 and g["driver"] == "580.95.05" and g["total_mib"] == 143771.0
    assert datarun.detect_gpu(FakeNvmlLib([])) is None  # NVML, no device
    assert datarun.detect_gpu(FakeNvmlLib(init_error=NVMLError("Driver Not Loaded"))) is None


def test_a_new_data_doc_records_the_gpu_and_its_trials_see_only_that_one():
    g = datarun.detect_gpu(h200())
    doc = datarun.new_doc("dataload", {"x": 1}, g)
    assert doc["host"]["gpu"]["uuid"] == H200_UUID
    assert datarun.new_doc("datasize", {"x": 1})["host"]["gpu"] is None  # CPU-only by nature
    where = datarun.Where.of(type("Cfg", (), {"runtime": "local", "python": "py", "image_tag": "ci"})(), doc)
    assert where.gpu_uuid == H200_UUID
    assert datarun.trial_env(where.gpu_uuid)["CUDA_VISIBLE_DEVICES"] == H200_UUID


def test_report_names_the_recorded_gpu_and_only_the_gpu_loader_as_its_user(tmp_path):
    doc = doc_of(LOAD_JPEG)
    doc["host"]["gpu"] = datarun.detect_gpu(h200())
    src = load_source(written(tmp_path, doc, LOAD_JPEG.name))
    text = render([src])
    assert "none (CPU run)" not in text
    assert "| GPU | NVIDIA H200 · UUID `" + H200_UUID in text
    assert "| GPU use | pytorch-nvjpeg (decode) ran on it; nothing else did |" in text
    assert src.machine_short == "NVIDIA H200"


def test_a_gpu_present_but_used_by_no_loader_is_reported_unused(tmp_path):
    doc = doc_of(LOAD_JPEG)
    doc["host"]["gpu"] = datarun.detect_gpu(h200())
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
    assert "| webdataset | jpeg90@256 · ram · 16 workers | 6,184 | — | — |" in overview
    assert "| ffcv | raw@256 · cold · 16 workers | — | FAILED | — |" in overview
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
