"""The PyTorch trial and the shared trial module, on CPU with real torch (no mocks).

The trial runs as a subprocess, exactly as the host starts it, from a foreign cwd.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
TRIAL = ROOT / "trials" / "pytorch" / "trial.py"
sys.path.insert(0, str(ROOT / "trials" / "common"))
sys.path.insert(0, str(ROOT / "trials" / "pytorch"))

import kittrial  # noqa: E402
from kitctl.core.protocol import parse_result  # noqa: E402
from cifar_files import write_cifar10  # noqa: E402
from conftest import host_kind_reason  # noqa: E402

PROTOCOL_KEYS = {"protocol", "engine", "mode", "precision", "batch", "status", "loss_warmup",
                 "loss_final", "parameters", "step_seconds", "framework_peak_mib", "versions",
                 "error"}
THROUGHPUT_KEYS = {"images", "window_seconds", "warmup_seconds"}
RESNET50_CIFAR_PARAMS = 23_528_522


def run_trial(*flags, fault=None, timeout=600, cwd=None):
    """Run the trial; return (exit code, parsed result, stderr)."""
    env = dict(os.environ)
    env.pop(kittrial.FAULT_ENV, None)
    if fault:
        env[kittrial.FAULT_ENV] = fault
    base = ["--model", "resnet50", "--device", "cpu", "--seed", "0"]
    proc = subprocess.run([sys.executable, str(TRIAL), *base, *map(str, flags)],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=cwd or "/")
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no stdout; stderr:\n{proc.stderr[-3000:]}"
    assert lines[-1].startswith("KIT-RESULT "), lines[-1]
    assert len(lines) == 1, f"diagnostics leaked to stdout: {lines[:-1]}"
    return proc.returncode, json.loads(lines[-1][len("KIT-RESULT "):]), proc.stderr


def assert_ok(rc, result, stderr):
    assert result["status"] == "ok", (result["error"], stderr[-3000:])
    assert rc == 0
    assert PROTOCOL_KEYS <= result.keys()
    assert result["protocol"] == 1 and result["error"] is None
    assert math.isfinite(result["loss_warmup"]) and math.isfinite(result["loss_final"])
    assert result["parameters"] == RESNET50_CIFAR_PARAMS
    assert result["step_seconds"] > 0
    assert result["framework_peak_mib"] is None  # cpu: no device allocator
    assert result["versions"]["trial_protocol"] == 1 and result["versions"]["torch"]


# ------------------------------------------------------------------ model, kittrial

def test_resnet50_parameter_count():
    from resnet50 import count_parameters, resnet50

    assert count_parameters(resnet50(num_classes=10)) == RESNET50_CIFAR_PARAMS


def test_parser_rejects_non_positive_batch(capsys):
    parser = kittrial.build_parser(["eager"])
    for bad in ("0", "-3", "two"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--benchmark", "maxbatch", "--batch", bad, "--mode", "eager"])
        assert "--batch" in capsys.readouterr().err
    args = parser.parse_args(["--benchmark", "throughput", "--batch", "4", "--mode", "eager"])
    assert (args.precision, args.dataset, args.device, args.seed) == ("fp32", "synthetic", "cuda", 0)
    assert (args.warmup_steps, args.steps, args.cudnn_benchmark) == (None, None, False)
    assert kittrial.step_counts(args) == (10, 50)


def test_emit_replaces_nonfinite_and_is_last_line(capsys):
    result = {"status": "nonfinite", "loss_warmup": float("nan"), "loss_final": float("inf"),
              "nested": {"x": [float("-inf"), 1.5]}, "error": "loss_final=nan"}
    print("diagnostic")
    kittrial.emit(result)
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("KIT-RESULT ") and " " not in last[len("KIT-RESULT "):]
    data = json.loads(last[len("KIT-RESULT "):])
    assert data["loss_warmup"] is None and data["loss_final"] is None
    assert data["nested"] == {"x": [None, 1.5]}


def test_set_losses_flags_nonfinite():
    result = {}
    kittrial.set_losses(result, 2.0, float("nan"))
    assert result["status"] == "nonfinite" and "nan" in result["error"]
    kittrial.set_losses(result, None, 1.0)  # throughput with no warm-up
    assert result["status"] == "ok" and result["error"] is None


def test_is_oom_follows_cause_chain():
    try:
        try:
            raise RuntimeError("CUDA error: out of memory")
        except RuntimeError as inner:
            raise ValueError("backend compiler failed") from inner
    except ValueError as outer:
        assert kittrial.is_oom(outer)
    assert kittrial.is_oom(MemoryError())
    assert not kittrial.is_oom(RuntimeError("shape mismatch"))


# ------------------------------------------------------------------------ CIFAR-10

@pytest.mark.parametrize("layout", ["bin", "py"])
@pytest.mark.parametrize("point_at", ["folder", "parent"])
def test_load_cifar10_layouts_and_wrap(tmp_path, layout, point_at):
    folder = write_cifar10(tmp_path, layout)  # 20 records over two files
    images, labels = kittrial.load_cifar10(folder if point_at == "folder" else tmp_path, 25, 0)
    assert images.shape == (25, 32, 32, 3) and images.dtype == np.uint8
    assert labels.dtype == np.int64
    for i in range(25):
        j = i % 20  # wraps modulo the dataset size
        assert labels[i] == j % 10
        assert tuple(images[i, 5, 7]) == (j, 100 + j, 200 - j)  # CHW -> HWC
    # fewer than one file's worth: only the first records, no wrap
    images, labels = kittrial.load_cifar10(folder, 3, 0)
    assert images.shape[0] == 3 and list(labels) == [0, 1, 2]


def test_load_cifar10_missing_and_corrupt(tmp_path):
    with pytest.raises(kittrial.TrialError, match="not found"):
        kittrial.load_cifar10(tmp_path / "nope", 4, 0)
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    (folder / "data_batch_1.bin").write_bytes(b"\0" * 100)
    with pytest.raises(kittrial.TrialError, match="multiple"):
        kittrial.load_cifar10(tmp_path, 4, 0)


def test_synthetic_is_seeded():
    a, b = kittrial.synthetic(6, 1), kittrial.synthetic(6, 1)
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all()
    assert a[0].shape == (6, 32, 32, 3) and a[0].dtype == np.uint8
    assert 0 <= a[1].min() and a[1].max() <= 9
    assert not (kittrial.synthetic(6, 2)[0] == a[0]).all()


# ------------------------------------------------------------- the trial, end to end

@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_eager_maxbatch(precision):
    rc, r, err = run_trial("--benchmark", "maxbatch", "--batch", 2, "--mode", "eager",
                           "--precision", precision)
    assert_ok(rc, r, err)
    assert (r["engine"], r["mode"], r["precision"], r["batch"]) == (
        "pytorch-eager", "eager", precision, 2)
    assert r["settings"]["channels_last"] is True
    assert r["settings"]["optimizer"]["fused"] is False  # eager keeps torch's default Adam
    # where the candidate's time went, phase by phase, in the order they ran (the report's "Candidate time")
    ph = r["phases"]
    parts = ["build_data_s", "build_data_to_device_s", "build_model_s", "build_model_to_device_s", "build_optimizer_s"]
    assert [k for k in ph if k not in parts] == ["startup_s", "import_s", "device_s", "build_s", "steps_s"]
    assert [k for k in ph if k.startswith("build_")] == parts + ["build_s"]  # the parts of build, then build
    assert sum(ph[k] for k in parts) <= ph["build_s"] + 1e-3
    assert all(isinstance(v, float) and v >= 0 for v in ph.values()), ph
    assert ph["import_s"] > 0.05 and ph["steps_s"] >= r["warmup_seconds"]  # torch's import; the steps hold the warm-up


def test_compile_maxbatch():
    rc, r, err = run_trial("--benchmark", "maxbatch", "--batch", 2, "--mode", "compile")
    assert_ok(rc, r, err)
    assert r["engine"] == "pytorch-compile" and r["settings"]["compile"]["backend"] == "inductor"


def _assert_fair_compile_settings(r, warmup_run):
    c = r["settings"]["compile"]
    assert (c["mode"], c["backend"], c["fullgraph"]) == ("reduce-overhead", "inductor", False)
    assert "backward + Adam.step" in c["scope"] and c["warmup_steps_run"] == warmup_run
    assert c["cudagraphs"].startswith("none")  # inductor has no CUDA graphs on the cpu
    assert c["unique_graphs"] >= 2  # forward(+backward) and the optimizer step, both compiled
    assert any("backward" in reason.lower() for reason in c["graph_breaks"])
    assert r["settings"]["channels_last"] is True
    opt = r["settings"]["optimizer"]  # capturable Adam is for CUDA tensors only
    assert (opt["name"], opt["lr"], opt["fused"], opt["capturable"]) == ("Adam", 1e-3, False, False)


@pytest.mark.slow
def test_compile_graphs_maxbatch():
    rc, r, err = run_trial("--benchmark", "maxbatch", "--batch", 2, "--mode", "compile-graphs",
                           timeout=1800)
    assert_ok(rc, r, err)
    assert (r["engine"], r["mode"]) == ("pytorch-compile-graphs", "compile-graphs")
    # max-batch's measured step follows two warm-up steps: on the GPU the graph trees have
    # run plainly and recorded by then, so the step measured is a replay.
    _assert_fair_compile_settings(r, warmup_run=2)
    assert r["settings"]["cudnn_benchmark"] is False  # only throughput on cuda forces it on


@pytest.mark.slow
def test_compile_graphs_throughput_bf16():
    rc, r, err = run_trial("--benchmark", "throughput", "--batch", 2, "--mode", "compile-graphs",
                           "--precision", "bf16", "--warmup-steps", 3, "--steps", 2, timeout=1800)
    assert_ok(rc, r, err)
    assert r["engine"] == "pytorch-compile-graphs" and r["images"] == 4
    _assert_fair_compile_settings(r, warmup_run=3)
    assert r["settings"]["autocast"] == {"dtype": "bfloat16", "cache_enabled": True}


def test_throughput_window():
    rc, r, err = run_trial("--benchmark", "throughput", "--batch", 2, "--mode", "eager",
                           "--warmup-steps", 1, "--steps", 2)
    assert_ok(rc, r, err)
    assert THROUGHPUT_KEYS <= r.keys()
    assert r["images"] == 4 and r["window_seconds"] > 0 and r["warmup_seconds"] > 0
    assert r["images_per_second"] == pytest.approx(4 / r["window_seconds"])


@pytest.mark.parametrize("layout,point_at", [("bin", "folder"), ("py", "parent")])
def test_cifar10_trial_wraps_small_dataset(tmp_path, layout, point_at):
    folder = write_cifar10(tmp_path, layout)
    rc, r, err = run_trial("--benchmark", "maxbatch", "--batch", 24, "--mode", "eager",
                           "--dataset", "cifar10",
                           "--data-dir", folder if point_at == "folder" else tmp_path)
    assert_ok(rc, r, err)
    data = r["settings"]["data"]
    assert (data["name"], data["layout"], data["records_read"], data["wrapped"]) == (
        "cifar10", layout, 20, True)


def test_missing_data_dir_is_error(tmp_path):
    rc, r, _ = run_trial("--benchmark", "maxbatch", "--batch", 2, "--mode", "eager",
                         "--dataset", "cifar10", "--data-dir", tmp_path / "absent")
    assert (r["status"], rc) == ("error", 1)
    assert "CIFAR-10 not found" in r["error"] and "\n" not in r["error"]


def test_nan_fault_is_nonfinite():
    rc, r, _ = run_trial("--benchmark", "maxbatch", "--batch", 2, "--mode", "eager",
                         fault="nan")
    assert (r["status"], rc) == ("nonfinite", 1)
    assert r["loss_final"] is None and "nan" in r["error"]


def test_cudagraph_on_cpu_is_error():
    rc, r, _ = run_trial("--benchmark", "throughput", "--batch", 2, "--mode", "cudagraph")
    assert (r["status"], rc, r["engine"]) == ("error", 1, "pytorch-cudagraph")
    assert r["error"] == "cudagraph mode needs --device cuda"


def test_bad_flags_still_give_a_result_line():
    rc, r, _ = run_trial("--benchmark", "maxbatch", "--batch", 0, "--mode", "eager")
    assert (r["status"], rc) == ("error", 1)
    assert "--batch" in r["error"]
    p = subprocess.run([sys.executable, str(TRIAL), "--benchmark", "maxbatch", "--batch", "0", "--mode", "eager"],
                       capture_output=True, text=True, timeout=120)
    assert parse_result(p.stdout)["status"] == "error"  # the host's parser accepts it: `error`, not `crash`


# --------------------------------------------------------- GPU only (skipped without CUDA)

def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not _cuda_available(), reason=host_kind_reason("gpu", "needs a CUDA GPU"))


def _build_on_cuda(mode, precision="fp32", batch=8):
    import torch_train

    args = kittrial.build_parser(["cudagraph", "compile-graphs"]).parse_args(
        ["--benchmark", "throughput", "--batch", str(batch), "--mode", mode, "--device", "cuda",
         "--precision", precision, "--warmup-steps", "2", "--steps", "3"])
    result = kittrial.base_result(args, f"pytorch-{mode}")
    device = torch_train._setup_device(args, result["settings"], result["versions"])
    return args, result, torch_train.build_runner(args, result, device)


@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cudagraph_capture_structure(precision):
    """The canonical whole-network capture: fused capturable Adam, gradients allocated by
    the graph itself (same addresses every replay, never zeroed in it), the model trains."""
    import torch

    args, result, runner = _build_on_cuda("cudagraph", precision)
    opt = result["settings"]["optimizer"]
    assert (opt["fused"], opt["capturable"], opt["foreach"]) == (True, True, False)
    assert result["settings"]["cudnn_benchmark"] is True  # throughput on cuda: autotuned
    assert result["settings"]["cudnn_benchmark_source"] == "on: cudagraph mode, throughput"
    runner.warmup(2)
    params = [p for p in runner.net.parameters()]
    grads = [p.grad.data_ptr() for p in params]
    assert isinstance(runner.graph, torch.cuda.CUDAGraph)
    before = params[0].detach().clone()
    loss = runner.run(3)
    torch.cuda.synchronize()
    assert [p.grad.data_ptr() for p in params] == grads  # static, from the graph's pool
    assert not torch.equal(before, params[0].detach())  # Adam stepped inside the graph
    assert torch.isfinite(loss).item()


@needs_cuda
@pytest.mark.slow
def test_compile_graphs_on_cuda_records_graphs_and_no_skips():
    args, result, runner = _build_on_cuda("compile-graphs", batch=4)
    assert result["settings"]["cudnn_benchmark"] is True  # throughput on cuda: autotuned
    assert result["settings"]["optimizer"]["capturable"] is True
    runner.warmup(2)
    loss = runner.run(3)
    import torch_train

    stats = torch_train.compile_stats()
    assert stats["cudagraph_skips"] == 0, stats  # every compiled graph runs as a CUDA graph
    assert loss.isfinite().item()


def test_the_allocator_cap_stays_a_slack_under_the_budget():
    # H200, 16,376 MiB: a fraction of exactly the budget let the allocator fill it and end 1–4 MiB
    # over B (the memory outside it grew with the batch), where the gate killed batch 2,645 while
    # 8,832 passed (results/reference/maxbatch-resnet50-synthetic-20261201T165627Z.json). The cap leaves room.
    import torch_train

    MIB = 2**20
    total = 143_155 * MIB
    assert kittrial.FRAMEWORK_SLACK_MIB == 64
    assert torch_train.memory_fraction(15_353, total) * total / MIB == pytest.approx(15_353 - 64)
    assert torch_train.memory_fraction(10**9, total) == 1.0  # never above the card
    assert torch_train.memory_fraction(10, total) * total / MIB == pytest.approx(1.0)  # never 0
