"""README's first command fits the machine it runs on: `kitctl run maxbatch` without `--engines`
(`--engines auto`) measures PyTorch eager and torch.compile on a GPU, eager alone on the CPU, where
it says that torch.compile is left out, what it would cost and how to add it.

The GPU is the named NVML stand-in where one must be seen (the choice only); the end-to-end test
runs the real CLI and the real PyTorch trial on this GPU-less host."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from conftest import host_kind_reason
from kitctl.benchmarks.maxbatch import config as mbconfig
from kitctl.core import device as dev

ROOT = Path(__file__).resolve().parents[1]
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]


def _has_gpu() -> bool:
    try:
        return dev.gpu_problem(None) is None
    except Exception:  # noqa: BLE001
        return False


def readme_first_command() -> list[str]:
    """The arguments of README's first `kitctl run maxbatch` (after `kitctl`), as a user types them."""
    first = (ROOT / "README.md").read_text().splitlines()[:40]
    (line,) = [ln for ln in first if ln.startswith("python3 -m pip install") and "&& kitctl run maxbatch" in ln]
    return shlex.split(line.split("&& kitctl", 1)[1])


def _config_of(monkeypatch, args: list[str], gpu: bool):
    """The typed config `kitctl <args>` builds for a new run (not started), on a host with or
    without a usable GPU (NVML and the local torch both answer accordingly)."""
    from kitctl.run import session as launch
    from kitctl.cli import app

    seen = {}

    def fake_start(benchmark, given, resume, timeout, gpu_, results_dir, python, require_idle, threshold,
                   new_config, gpu_request="auto", **_more):
        seen["config"] = new_config()
        raise typer.Exit(0)

    monkeypatch.setattr(launch, "start", fake_start)
    monkeypatch.setattr(dev, "gpu_problem", lambda g, lib=None: None if gpu else "no NVIDIA driver found")
    monkeypatch.setattr(dev, "local_torch_problem", lambda python, engines: None)
    app(list(args), standalone_mode=False, prog_name="kitctl")
    return seen["config"]


# -- the rule ------------------------------------------------------------------------------------

def test_auto_engines_are_eager_and_compile_on_a_gpu_eager_alone_on_the_cpu():
    gpu = mbconfig.engines_for("auto", "cuda")
    assert (gpu.engines, gpu.note) == ("pytorch-eager,pytorch-compile", None)
    cpu = mbconfig.engines_for("auto", "cpu")
    assert cpu.engines == "pytorch-eager"
    # one line: what is left out, what it would cost, how to add it
    assert cpu.note and "\n" not in cpu.note
    assert "pytorch-compile is left out" in cpu.note and "s each on 2 cores" in cpu.note
    assert "--engines pytorch-eager,pytorch-compile" in cpu.note


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_an_explicit_engine_list_is_run_as_given(device):
    for given in ("pytorch-eager,pytorch-compile", "pytorch-compile", "jax-xla"):
        assert mbconfig.engines_for(given, device) == mbconfig.EngineChoice(given)


# -- README's first command, through the CLI's own flag handling ------------------------------------

def test_readme_first_command_leaves_the_engine_list_to_the_machine():
    args = readme_first_command()
    assert args[:2] == ["run", "maxbatch"] and "--engines" not in args


def test_readme_first_command_on_a_gpu_host_runs_eager_and_compile(monkeypatch):
    cfg = _config_of(monkeypatch, readme_first_command(), gpu=True)
    assert cfg.run.device == "cuda"
    assert cfg.run.engines == ("pytorch-eager", "pytorch-compile")
    assert cfg.to_json()["engines"] == ["pytorch-eager", "pytorch-compile"]


def test_readme_first_command_on_a_cpu_host_runs_eager_alone_capped(monkeypatch):
    cfg = _config_of(monkeypatch, readme_first_command(), gpu=False)
    assert cfg.run.device == "cpu" and cfg.run.engines == ("pytorch-eager",)
    assert cfg.run.memory_limit_mib is not None and cfg.run.memory_limit_mib <= dev.CPU_CAP_CEILING_MIB


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
def test_explicit_engines_are_honoured_on_either_device(monkeypatch, gpu):
    cfg = _config_of(monkeypatch, [*readme_first_command(), "--engines", "pytorch-eager,pytorch-compile"], gpu=gpu)
    assert cfg.run.engines == ("pytorch-eager", "pytorch-compile")
    cfg = _config_of(monkeypatch, [*readme_first_command(), "--engines", "auto", "--device", "cpu"], gpu=gpu)
    assert cfg.run.engines == ("pytorch-eager",)


# -- end to end on this GPU-less host --------------------------------------------------------------

@pytest.mark.skipif(_has_gpu(), reason=host_kind_reason("no-gpu", "this host has a GPU: auto would pick it"))
def test_first_command_on_the_cpu_says_what_it_left_out_at_the_start_and_the_end(tmp_path):
    """README's first command, its search shortened to one tiny candidate: eager alone ran, the line
    about torch.compile follows the device line and ends the output, the artifact lists eager only."""
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": os.pathsep.join([str(ROOT / "host"),
                                                                           os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([*ENTRY, *readme_first_command(), "--start-batch", "2", "--max-batch", "2",
                        "--results-dir", str(tmp_path / "results")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, (p.stdout, p.stderr)
    err = p.stderr.splitlines()
    assert err[0].startswith("device cpu (auto: no usable GPU")
    assert err[1] == mbconfig.CPU_LEFT_OUT_NOTE and err[-1] == mbconfig.CPU_LEFT_OUT_NOTE
    assert "PyTorch eager" in p.stdout and "torch.compile" not in p.stdout  # the table: eager's row only
    assert "left out" not in p.stdout  # stdout holds only the result
    (artifact,) = (tmp_path / "results").glob("maxbatch-*.json")
    doc = json.loads(artifact.read_text())
    assert doc["configuration"]["engines"] == ["pytorch-eager"]
    assert [c["engine"] for c in doc["results"]] == ["pytorch-eager"] and doc["results"][0]["max_batch"] == 2


# -- README's CPU example ------------------------------------------------------------------------

def readme_cpu_example() -> tuple[dict[str, str], list[str], int, int]:
    """README's CPU max-batch example: (its environment, its arguments after `kitctl`, the max batch
    and the next batch it states)."""
    import re

    text = " ".join((ROOT / "README.md").read_text().split())
    m = re.search(r"`((?:[A-Z_]+=\S+ )+)kitctl (run maxbatch [^`]*--device cpu[^`]*)` gave max batch ([\d,]+) "
                  r"\(oom at ([\d,]+)\) in 3 of 3 fresh runs", text)
    assert m, "README states its CPU example as: `ENV=… kitctl run maxbatch … --device cpu …` gave max batch N " \
              "(oom at N+1) in 3 of 3 fresh runs"
    env = dict(kv.split("=", 1) for kv in m.group(1).split())
    return env, shlex.split(m.group(2)), int(m.group(3).replace(",", "")), int(m.group(4).replace(",", ""))


def test_readme_cpu_example_is_the_measured_one(monkeypatch):
    """The example names its cap and its allocator setting (what makes it repeat), runs eager on the
    CPU, and its figures are the three runs the report records."""
    env, args, top, nxt = readme_cpu_example()
    assert env == {"MALLOC_MMAP_THRESHOLD_": "131072"} and nxt == top + 1
    cfg = _config_of(monkeypatch, args, gpu=False)
    assert (cfg.run.device, cfg.run.memory_limit_mib, cfg.run.engines) == ("cpu", 2048, ("pytorch-eager",))
    runs = sorted((ROOT / "results/reference/logs/cpu-example").glob("2.14.1-cap2048-mmap-run*.log"))
    assert len(runs) == 3
    for log in runs:
        text = log.read_text()
        assert "env: MALLOC_MMAP_THRESHOLD_=131072" in text
        assert f"│ PyTorch eager │ fp32      │ {top:>9,} │" in text and f"oom at {nxt}" in text


def test_the_local_runtime_hands_the_allocator_setting_to_the_trial(monkeypatch):
    """The example's variable reaches the trial process (the local runtime passes the environment on)."""
    from kitctl.core.protocol import TrialRequest
    from kitctl.runtimes.local import LocalRuntime

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    req = TrialRequest(engine="pytorch-eager", mode="eager", benchmark="maxbatch", batch=2, precision="fp32",
                       device="cpu")
    rt = LocalRuntime(run_id="envtest")
    assert rt._env(rt.spec(req))["MALLOC_MMAP_THRESHOLD_"] == "131072"
