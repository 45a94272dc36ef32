"""Resuming a partial on another GPU: only an explicit --gpu, only a card of the same model,
memory and driver, and the move is recorded. NVML is the named stand-in (tests/fake_nvml.py)."""
from __future__ import annotations

import pytest

from fake_nvml import FakeDevice, FakeNvmlLib

import kitctl.core.gpu as gpu_mod
from kitctl.run import gpus
from kitctl.errors import Fail
from kitctl.run.config import RunConfig

FIRST = "GPU-892ab65f-970f-84fa-2bc5-f46331c585a2"
TWIN = "GPU-9cb17cd8-b2dc-d3ab-3f86-6b6ab85de808"
CFG = RunConfig.from_flags(["pytorch-eager"], "fp32", "cuda", None, 16376, 256, None, "local", "synthetic", None,
                         False, None)
REAL_NVML = gpu_mod.Nvml


def machine(monkeypatch, *devices: FakeDevice, driver: str = "580.159.04") -> None:
    monkeypatch.setattr(gpu_mod, "Nvml", lambda lib=None: REAL_NVML(lib=FakeNvmlLib(list(devices), driver=driver)))


def partial_doc(monkeypatch) -> dict:
    """host.gpu exactly as a run on the first card recorded it."""
    machine(monkeypatch, FakeDevice(FIRST))
    info = gpus.open_gpu(None, 16376, 256, False, 0).info.to_json()
    return {"host": {"gpu": info}, "resumes": [{"argv": ["run"], "utc": "now"}]}


def test_same_gpu_resumes_without_a_note(monkeypatch):
    doc = partial_doc(monkeypatch)
    ctx = gpus.open_resumed_gpu(doc, None, CFG, False, 0)
    assert ctx.info.uuid == FIRST and "gpu" not in doc["resumes"][-1]


def test_gpu_gone_without_gpu_flag_says_how_to_continue(monkeypatch):
    doc = partial_doc(monkeypatch)
    machine(monkeypatch, FakeDevice(TWIN))
    with pytest.raises(Fail, match="pass --gpu"):
        gpus.open_resumed_gpu(doc, None, CFG, False, 0)


def test_twin_card_with_gpu_flag_continues_and_is_recorded(monkeypatch):
    doc = partial_doc(monkeypatch)
    machine(monkeypatch, FakeDevice(TWIN))
    ctx = gpus.open_resumed_gpu(doc, "0", CFG, False, 0)
    assert ctx.info.uuid == TWIN
    assert doc["resumes"][-1]["gpu"]["uuid"] == TWIN
    assert doc["host"]["gpu"]["uuid"] == FIRST  # the run's first card stays the host's


@pytest.mark.parametrize("device, driver, what", [
    (FakeDevice(TWIN, name="NVIDIA H100 80GB HBM3"), "580.159.04", "name"),
    (FakeDevice(TWIN, total_mib=81559.0), "580.159.04", "total_mib"),
    (FakeDevice(TWIN), "575.57.08", "driver"),
])
def test_another_kind_of_card_is_refused(monkeypatch, device, driver, what):
    doc = partial_doc(monkeypatch)
    machine(monkeypatch, device, driver=driver)
    with pytest.raises(Fail, match=f"not the same kind of card.*{what}"):
        gpus.open_resumed_gpu(doc, "0", CFG, False, 0)
    assert "gpu" not in doc["resumes"][-1]
