"""The TensorFlow trial (engine tensorflow-xla) on CPU with real tensorflow-cpu (no mocks).

XLA compiles the ResNet-50 training step for ~15-30 s on a 2-core CI machine, so every test
that trains runs one tiny candidate (batch 2, or one OOM candidate). The subprocess runs get
XLA_FLAGS=--xla_llvm_disable_expensive_passes=true (KITCTL_TEST_XLA_FLAGS overrides it; empty
for XLA's defaults), which halves the compile on CPU; the trial's code path is the same.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kitctl.core.artifact import load
from kitctl.core.protocol import TrialRequest
from kitctl.runtimes.local import LocalRuntime
from conftest import need_module, unavailable  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TRIAL = ROOT / "trials" / "tensorflow" / "trial.py"
RESNET50_CIFAR_PARAMS = 23_528_522
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
FAST_XLA = {"XLA_FLAGS": os.environ.get("KITCTL_TEST_XLA_FLAGS",
                                        "--xla_llvm_disable_expensive_passes=true")}


def _require_tensorflow():
    """Skip only where TensorFlow is absent; CI installs it (.ci/setup-python.sh), so it must run."""
    if importlib.util.find_spec("tensorflow") is None:
        unavailable("tensorflow is not installed (pip install tensorflow-cpu==2.21.0; .ci/setup-python.sh pins it)")


pytestmark = pytest.mark.usefixtures("tensorflow_installed")


@pytest.fixture(scope="module")
def tensorflow_installed():
    _require_tensorflow()


def _load(name: str, path: Path):
    """Import a trial module by path under a unique name (both trials have a `trial.py`)."""
    for p in (ROOT / "trials" / "common", path.parent):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_trial(*flags, timeout=600, env=None):
    """Run the trial as the host does; return (exit code, parsed result, stderr)."""
    e = {**os.environ, **FAST_XLA, "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    e.pop("KIT_TRIAL_FAULT", None)
    base = ["--model", "resnet50", "--device", "cpu", "--seed", "0", "--mode", "xla"]
    proc = subprocess.run([sys.executable, str(TRIAL), *base, *map(str, flags)],
                          capture_output=True, text=True, timeout=timeout, env=e, cwd="/")
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no stdout; stderr:\n{proc.stderr[-3000:]}"
    assert len(lines) == 1 and lines[0].startswith("KIT-RESULT "), lines
    return proc.returncode, json.loads(lines[0][len("KIT-RESULT "):]), proc.stderr


def assert_ok(result: dict, precision: str) -> None:
    assert result["status"] == "ok" and result["error"] is None, result["error"]
    assert (result["engine"], result["mode"], result["precision"]) == ("tensorflow-xla", "xla", precision)
    assert math.isfinite(result["loss_warmup"]) and math.isfinite(result["loss_final"])
    assert result["parameters"] == RESNET50_CIFAR_PARAMS
    assert result["parameters_total"] == RESNET50_CIFAR_PARAMS + 53_120  # + BN moving mean/var
    assert result["framework_peak_mib"] is None  # cpu: no device allocator
    assert result["step_seconds"] > 0 and result["warmup_seconds"] > 0
    v = result["versions"]
    assert v["framework"] == "tensorflow" and v["tensorflow"].startswith("2.")
    assert v["trial_protocol"] == 1 and "keras" in v and "cuda" in v and "cudnn" in v
    s = result["settings"]
    assert s["xla"]["jit_compile"] is True
    assert s["dtype_policy"] == ("mixed_bfloat16" if precision == "bf16" else "float32")
    assert s["optimizer"]["name"] == "Adam" and s["optimizer"]["lr"] == 0.001
    assert s["memory_budget_enforced"].startswith("no: on cpu")


# ------------------------------------------------------------------- no training

def test_trainable_parameters_match_the_pytorch_trial():
    """Same network: the same trainable count, the same per-tensor sizes, the same BN statistics."""
    torch = need_module("torch")
    keras = need_module("keras")
    torch_net = _load("kit_resnet50_torch", ROOT / "trials/pytorch/resnet50.py")
    keras_net = _load("kit_resnet50_keras", ROOT / "trials/tensorflow/resnet50_keras.py")

    tm = torch_net.resnet50(num_classes=10)
    keras.mixed_precision.set_global_policy("float32")
    km = keras_net.resnet50(num_classes=10)
    counts = keras_net.count_parameters(km)
    assert counts["trainable"] == torch_net.count_parameters(tm) == RESNET50_CIFAR_PARAMS
    assert sorted(math.prod(v.shape) for v in km.trainable_weights) == sorted(
        p.numel() for p in tm.parameters())
    torch_stats = sum(b.numel() for n, b in tm.named_buffers() if n.endswith(("running_mean", "running_var")))
    assert counts["non_trainable"] == torch_stats == 53_120
    assert counts["total"] == RESNET50_CIFAR_PARAMS + 53_120
    # NHWC geometry of the PyTorch net: 32 -> 16 (stem) -> 8 (pool) -> 8, 4, 2, 1 (stages).
    assert tuple(km.get_layer("stem_pool").output.shape) == (None, 8, 8, 64)
    assert tuple(km.get_layer("layer4_2_out").output.shape) == (None, 1, 1, 2048)
    with torch.no_grad():
        assert tuple(tm.layer4(tm.layer3(tm.layer2(tm.layer1(
            tm.maxpool(tm.conv1(torch.zeros(2, 3, 32, 32))))))).shape) == (2, 2048, 1, 1)


def test_oom_classification_on_real_tensorflow_errors():
    tf = need_module("tensorflow")
    trial = _load("kit_tf_trial", TRIAL)
    oom = [
        tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[512,64,16,16]"),
        tf.errors.ResourceExhaustedError(None, None, "anything: the type alone says so"),
        tf.errors.InternalError(None, None, "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3.92GiB"),
        tf.errors.UnknownError(None, None, "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.2GiB"),
        tf.errors.InternalError(None, None, "Failed to compile: XLA compilation: RESOURCE_EXHAUSTED"),
        MemoryError(),
    ]
    for exc in oom:
        assert trial.classify(exc) == "oom", exc
    try:  # wrapped: the OOM is the cause of what reaches the trial
        try:
            raise tf.errors.ResourceExhaustedError(None, None, "OOM")
        except tf.errors.ResourceExhaustedError as inner:
            raise RuntimeError("train step failed") from inner
    except RuntimeError as outer:
        assert trial.classify(outer) == "oom"
    for exc in (tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [2,10] vs. [3]"),
                tf.errors.InternalError(None, None, "ptxas exited with non-zero error code"),
                ValueError("bad input")):
        assert trial.classify(exc) == "error", exc


def test_bad_flags_still_give_a_result_line():
    rc, r, _ = run_trial("--benchmark", "maxbatch", "--batch", 0)
    assert (r["status"], rc) == ("error", 1) and "--batch" in r["error"]


# ---------------------------------------------------------------------- training

def test_local_search_through_the_cli_ends_in_an_artifact(tmp_path):
    """fp32 and bf16, one candidate each (batch 2), through `kitctl run maxbatch --runtime local`."""
    p = subprocess.run([*ENTRY, "run", "maxbatch", "--runtime", "local", "--device", "cpu",
                        "--engines", "tensorflow-xla", "--precision", "both",
                        "--start-batch", "2", "--max-batch", "2", "--results-dir", str(tmp_path),
                        # TensorFlow's batch-2 step holds ~2,000 MiB here: the CPU's default cap (2,048 MiB at most)
                        # sits on its edge, and a candidate over it is an `oom` and a second trial
                        "--memory-limit", "4096"],
                       capture_output=True, text=True, timeout=1200, env={**os.environ, **FAST_XLA})
    assert p.returncode == 0, p.stderr + p.stdout
    (final,) = [f for f in tmp_path.glob("*.json") if not f.name.endswith(".partial.json")]
    doc = load(final)
    assert doc["state"] == "complete" and doc["runtime"]["name"] == "local"
    ent = doc["engines"]["tensorflow-xla"]
    assert ent["label"] == "TensorFlow XLA" and ent["mode"] == "xla"
    assert ent["provenance"]["trial"].endswith("trials/tensorflow/trial.py")
    assert ent["versions"]["tensorflow"].startswith("2.")
    assert [(c["engine"], c["precision"]) for c in doc["results"]] == [
        ("tensorflow-xla", "fp32"), ("tensorflow-xla", "bf16")]
    for cell in doc["results"]:
        assert cell["search_status"] == "censored_at_max_batch"
        assert (cell["max_batch"], cell["next_batch"]) == (2, None)
        assert len(cell["trials"]) == 1, [(t["batch"], t["status"], t.get("error")) for t in cell["trials"]]
        (t,) = cell["trials"]
        assert t["status"] == "ok" and t["exit_code"] == 0
        assert_ok(t["result"], cell["precision"])
    assert "TensorFlow" in p.stdout and "censored" in p.stdout  # the table (labels may wrap)


def test_throughput_window():
    rc, r, err = run_trial("--benchmark", "throughput", "--batch", 2, "--warmup-steps", 1, "--steps", 2)
    assert rc == 0, err[-3000:]
    assert_ok(r, "fp32")
    assert r["settings"]["warmup_steps"] == 1 and r["settings"]["steps"] == 2
    assert r["images"] == 4 and r["window_seconds"] > 0
    assert r["step_seconds"] == pytest.approx(r["window_seconds"] / 2)
    assert r["images_per_second"] == pytest.approx(4 / r["window_seconds"])


def test_a_memory_limit_that_cannot_hold_the_batch_is_oom():
    """Through the local runtime's host memory limit (RLIMIT_DATA): the step compiles (~1.8 GiB),
    then XLA's ~3.9 GiB temp buffer for batch 2000 cannot be allocated -> ResourceExhaustedError."""
    runtime = LocalRuntime(memory_limit_mib=3000, env=FAST_XLA)
    out = runtime.run(TrialRequest(engine="tensorflow-xla", mode="xla", benchmark="maxbatch",
                                   batch=2000, precision="fp32", device="cpu"), timeout_s=900)
    assert out.status.value == "oom", (out.error, out.stderr_tail[-2000:])
    assert out.exit_code == 1 and out.signal is None  # reported, not a crash
    assert out.result["engine"] == "tensorflow-xla" and out.result["loss_warmup"] is None
    assert "ResourceExhaustedError" in out.error and "memory" in out.error.lower()
