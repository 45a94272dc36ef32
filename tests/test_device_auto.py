"""`--device auto` (the default) and the CPU's safe memory cap.

NVML is the named stand-in (tests/fake_nvml.py) where a GPU must be seen; the interpreter probed
for the local runtime's torch is this one (a real CPU or CUDA build); the end-to-end test runs the
real CLI in a subprocess on this GPU-less host."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from conftest import host_kind_reason
from fake_nvml import FakeNvmlLib, NVMLError
from kitctl.core import device as dev
from kitctl.errors import Fail

ROOT = Path(__file__).resolve().parents[1]
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]


def _no_driver() -> FakeNvmlLib:
    return FakeNvmlLib(init_error=NVMLError("NVML Shared Library Not Found"))


def _has_gpu() -> bool:
    try:
        return dev.gpu_problem(None) is None
    except Exception:  # noqa: BLE001
        return False


HAS_GPU = _has_gpu()


# -- the cap ---------------------------------------------------------------------------------

@pytest.mark.parametrize("available, cap", [(4000, 1000), (23_000, 2048), (100, 256)])
def test_default_cpu_cap_is_a_quarter_of_available_ram_within_bounds(available, cap):
    got, how = dev.default_cpu_cap(available)
    assert got == cap
    assert f"{available:,} MiB available" in how and "--memory-limit" in how


def test_default_cpu_cap_when_ram_is_unknown():
    got, how = dev.default_cpu_cap(None)
    assert got == dev.CPU_CAP_CEILING_MIB and "unknown" in how


def test_available_ram_reads_memavailable(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       24683520 kB\nMemFree:  100 kB\nMemAvailable:   8388608 kB\n")
    assert dev.available_ram_mib(f) == 8192


def test_default_cpu_max_batch_is_bounded_by_the_cap():
    assert dev.default_cpu_max_batch(2048, 128) == 2048
    assert dev.default_cpu_max_batch(100, 128) == 128  # never below the first candidate


# -- the choice ------------------------------------------------------------------------------

def test_auto_without_a_driver_is_the_cpu_capped():
    c = dev.choose("auto", memory_limit=None, gpu_flags=[], runtime="local", python=None,
                   engines=["pytorch-eager"], nvml_lib=_no_driver())
    assert (c.device, c.requested) == ("cpu", "auto")
    assert "no NVIDIA driver" in c.reason
    assert c.memory_limit_mib is not None and 256 <= c.memory_limit_mib <= 2048
    line = c.line()
    assert "\n" not in line and f"memory cap {c.memory_limit_mib:,} MiB" in line


def test_auto_with_a_gpu_and_docker_is_the_gpu():
    c = dev.choose("auto", memory_limit=None, gpu_flags=[], runtime="docker", python=None,
                   engines=["pytorch-eager"], nvml_lib=FakeNvmlLib())
    assert c.device == "cuda" and c.memory_limit_mib is None


def test_auto_with_a_gpu_but_a_cpu_torch_locally_is_the_cpu():
    """The GPU is seen, but the local interpreter's PyTorch cannot use it (a CPU wheel)."""
    import torch

    if torch.version.cuda is not None:
        pytest.skip(host_kind_reason("no-gpu", "this interpreter's torch is a CUDA build"))
    c = dev.choose("auto", memory_limit=None, gpu_flags=[], runtime="local", python=sys.executable,
                   engines=["pytorch-eager"], nvml_lib=FakeNvmlLib())
    assert c.device == "cpu" and "CPU build" in c.reason and torch.__version__ in c.reason


def test_auto_with_gpu_flags_asks_for_the_gpu_and_memory_limit_for_the_cpu():
    c = dev.choose("auto", memory_limit=None, gpu_flags=["--gpu"], runtime="local", python=None,
                   engines=["pytorch-eager"], nvml_lib=_no_driver())
    assert c.device == "cuda"  # the run's own GPU check then refuses in one line
    c = dev.choose("auto", memory_limit=700, gpu_flags=[], runtime="local", python=None,
                   engines=["pytorch-eager"], nvml_lib=FakeNvmlLib())
    assert (c.device, c.memory_limit_mib, c.memory_limit_source) == ("cpu", 700, "--memory-limit")
    with pytest.raises(Fail, match="pick --device"):
        dev.choose("auto", memory_limit=700, gpu_flags=["--vram-limit"], runtime="local", python=None,
                   engines=["pytorch-eager"])


def test_device_cpu_without_memory_limit_is_never_unbounded():
    c = dev.choose("cpu", memory_limit=None, gpu_flags=[], runtime="local", python=None, engines=["pytorch-eager"])
    assert c.device == "cpu" and c.memory_limit_mib is not None and c.memory_limit_mib <= dev.CPU_CAP_CEILING_MIB
    assert "quarter" in (c.memory_limit_source or "") or "unknown" in (c.memory_limit_source or "")


def test_recorded_line_names_device_reason_and_cap():
    doc = {"configuration": {"device": "cpu", "memory_limit_mib": 2048,
                             "device_choice": {"requested": "auto", "device": "cpu", "reason": "no usable GPU: x",
                                               "memory_limit_source": "default: …"}}}
    assert dev.recorded_line(doc) == ("ran on: cpu (auto: no usable GPU: x); memory cap 2,048 MiB per candidate "
                                      "(default: …)")
    old = {"configuration": {"device": "cuda"}, "host": {"gpu": {"index": 0, "name": "NVIDIA H200"}}}
    assert dev.recorded_line(old) == "ran on: cuda; GPU 0 NVIDIA H200"


# -- the commands' wiring (in process: the config each command would start with) ---------------

def _config_of(monkeypatch, *args: str):
    """The typed config `kitctl run …` builds for a new run, without starting it."""
    from kitctl.run import session as launch
    from kitctl.cli import app

    seen = {}

    def fake_start(benchmark, given, resume, timeout, gpu, results_dir, python, require_idle, threshold,
                   new_config, gpu_request="auto", **_more):
        seen["config"] = new_config()
        raise typer.Exit(0)

    monkeypatch.setattr(launch, "start", fake_start)
    monkeypatch.setattr(dev, "gpu_problem", lambda gpu, lib=None: "no NVIDIA driver found")
    app(list(args), standalone_mode=False, prog_name="kitctl")
    return seen["config"]


def test_maxbatch_on_the_cpu_defaults_max_batch_to_one_the_cap_bounds(monkeypatch):
    cfg = _config_of(monkeypatch, "run", "maxbatch", "--runtime", "local")
    assert cfg.run.device == "cpu" and cfg.run.device_choice.requested == "auto"
    assert cfg.max_batch == cfg.run.memory_limit_mib  # not 1,048,576
    cfg = _config_of(monkeypatch, "run", "maxbatch", "--runtime", "local", "--device", "cpu", "--max-batch", "300",
                     "--start-batch", "16")
    assert cfg.max_batch == 300 and cfg.run.memory_limit_mib is not None
    assert cfg.to_json()["device_choice"]["requested"] == "cpu"


def test_throughput_on_the_cpu_is_capped(monkeypatch):
    cfg = _config_of(monkeypatch, "run", "throughput", "--runtime", "local")
    assert cfg.run.device == "cpu" and cfg.run.memory_limit_mib is not None


# -- end to end: the first command on a host without a GPU ---------------------------------------

@pytest.mark.skipif(HAS_GPU, reason=host_kind_reason("no-gpu", "this host has a GPU: auto would pick it"))
def test_first_run_without_a_gpu_ends_with_a_table_an_artifact_and_its_cap(tmp_path):
    """README's first command, shortened to two tiny candidates (--start-batch/--max-batch) so the test
    stays short: the device is auto, the runtime local, the cap the default."""
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": os.pathsep.join([str(ROOT / "host"),
                                                                           os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([*ENTRY, "run", "maxbatch", "--runtime", "local", "--engines", "pytorch-eager",
                        "--start-batch", "2", "--max-batch", "2", "--results-dir", str(tmp_path / "results")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, (p.stdout, p.stderr)
    first = p.stderr.splitlines()[0]  # progress and notes go to stderr; stdout holds the result
    m = re.match(r"device cpu \(auto: no usable GPU: .+\); memory cap ([\d,]+) MiB per candidate \(default: ", first)
    assert m, first
    cap = int(m.group(1).replace(",", ""))
    assert "Max batch — resnet50, synthetic" in p.stdout and "Peak host RSS at max" in p.stdout  # not VRAM
    assert f"ran on: cpu (auto: no usable GPU" in p.stdout
    (artifact,) = (tmp_path / "results").glob("maxbatch-*.json")
    assert f"artifact: {artifact}" in p.stdout
    doc = json.loads(artifact.read_text())
    conf = doc["configuration"]
    assert (conf["device"], conf["memory_limit_mib"]) == ("cpu", cap)
    assert conf["device_choice"]["requested"] == "auto"
    assert doc["results"][0]["max_batch"] == 2
