"""The JAX trial (engine jax-xla) on CPU with real jax/flax/optax (no mocks).

XLA compiles the ResNet-50 training step for ~37 s of CPU on the 2-core development machine
(more wall time when the machine is shared), so every test that trains runs one tiny candidate
(batch 2, or one OOM candidate). XLA's defaults are kept: --xla_llvm_disable_expensive_passes,
which halves TensorFlow's compile in its tests, saved nothing here (37.6 vs 38.6 s of CPU).
The model checks (parameter parity with the PyTorch trial, layer shapes) only trace: no compile.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kitctl.core.artifact import load
from kitctl.core.protocol import TrialRequest
from kitctl.runtimes.local import LocalRuntime
from conftest import host_kind_reason, need_module, unavailable  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TRIAL = ROOT / "trials" / "jax" / "trial.py"
RESNET50_CIFAR_PARAMS = 23_528_522
BN_STATS = 53_120
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
MIB = 2**20


@pytest.fixture(scope="module", autouse=True)
def jax_installed():
    """Skip only where jax is absent; CI installs it (.ci/setup-python.sh), so it must run."""
    missing = [m for m in ("jax", "flax", "optax") if importlib.util.find_spec(m) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not installed (pip install jax==0.10.2 flax==0.12.8 optax==0.2.8; "
                    ".ci/setup-python.sh pins them)")


def _load(name: str, path: Path):
    """Import a trial module by path under a unique name (every trial has a `trial.py`)."""
    for p in (ROOT / "trials" / "common", path.parent):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Flax modules are dataclasses: they look their module up
    spec.loader.exec_module(module)
    return module


def run_trial(*flags, timeout=900, env=None):
    """Run the trial as the host does; return (exit code, parsed result, stderr)."""
    e = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    if not (env and "KIT_TRIAL_FAULT" in env):
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
    assert (result["engine"], result["mode"], result["precision"]) == ("jax-xla", "xla", precision)
    assert math.isfinite(result["loss_warmup"]) and math.isfinite(result["loss_final"])
    assert result["parameters"] == RESNET50_CIFAR_PARAMS
    assert result["parameters_total"] == RESNET50_CIFAR_PARAMS + BN_STATS
    assert result["framework_peak_mib"] is None  # cpu: no device allocator
    assert result["step_seconds"] > 0 and result["warmup_seconds"] >= result["compile_seconds"] > 0
    v = result["versions"]
    assert v["framework"] == "jax" and v["jax"] == v["jaxlib"] and v["jax"].startswith("0.")
    assert v["trial_protocol"] == 1 and v["flax"] and v["optax"]
    assert v["cuda"] is None and v["cudnn"] is None  # the CPU jaxlib has no CUDA plugin
    s = result["settings"]
    assert s["xla"]["jit"].startswith("whole step") and s["backend"] == "cpu"
    no_cache = {"JAX_ENABLE_COMPILATION_CACHE": "false"} if result["benchmark"] == "maxbatch" else {}
    assert s["xla_env"] == {"JAX_PLATFORMS": "cpu", **no_cache}
    assert s["precision_policy"] == {"params": "float32", "logits": "float32",
                                     "compute": "bfloat16" if precision == "bf16" else "float32"}
    assert s["optimizer"]["name"] == "Adam" and s["optimizer"]["lr"] == 0.001
    assert s["memory_budget_enforced"].startswith("no: on cpu")
    # XLA's own account of the compiled step; its rematerialisation pass does not run on the CPU.
    assert result["xla_rematerialization"] is None and s["xla_rematerialization_null_means"]
    mem = result["xla_memory_analysis"]
    assert mem["argument_bytes"] > RESNET50_CIFAR_PARAMS * 4 and mem["temp_bytes"] > 0


# ------------------------------------------------------------------- no training

def _torch_name(path: tuple[str, ...]) -> str:
    """Flax variable path -> the PyTorch trial's parameter/buffer name."""
    *mods, leaf = path
    mods = [m.replace("downsample_conv", "downsample.0").replace("downsample_bn", "downsample.1")
            for m in mods]
    mods = [m.replace("_", ".", 1) if m.startswith("layer") else m for m in mods]
    leaf = {"kernel": "weight", "scale": "weight", "bias": "bias",
            "mean": "running_mean", "var": "running_var"}[leaf]
    return ".".join([*mods, leaf])


def _torch_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Flax HWIO conv kernels and in×out dense kernels as PyTorch's OIHW and out×in."""
    if len(shape) == 4:
        h, w, i, o = shape
        return (o, i, h, w)
    if len(shape) == 2:
        return (shape[1], shape[0])
    return tuple(shape)


def test_every_tensor_matches_the_pytorch_trial():
    """Same network: the same 23,528,522 parameters and BN statistics, tensor for tensor
    (by name and shape), and the same activation shape after every layer."""
    torch = need_module("torch")
    import flax
    import jax
    import jax.numpy as jnp

    torch_net = _load("kit_resnet50_torch", ROOT / "trials/pytorch/resnet50.py")
    flax_net = _load("kit_resnet50_flax", ROOT / "trials/jax/resnet50_flax.py")
    tm = torch_net.resnet50(num_classes=10)
    fm = flax_net.resnet50(num_classes=10)
    x = jnp.zeros((2, 32, 32, 3), jnp.float32)
    shapes = jax.eval_shape(lambda k: fm.init(k, x, train=False), jax.random.PRNGKey(0))

    counts = flax_net.count_parameters(shapes)
    assert counts["trainable"] == torch_net.count_parameters(tm) == RESNET50_CIFAR_PARAMS
    assert counts["non_trainable"] == BN_STATS

    flat = flax.traverse_util.flatten_dict(shapes)
    ours = {_torch_name(path[1:]): _torch_shape(leaf.shape) for path, leaf in flat.items()}
    theirs = {n: tuple(p.shape) for n, p in tm.named_parameters()}
    theirs.update({n: tuple(b.shape) for n, b in tm.named_buffers()
                   if n.endswith(("running_mean", "running_var"))})
    assert ours == theirs

    # Activation shapes, NHWC against NCHW: stem, every bottleneck, logits.
    _, inter = jax.eval_shape(lambda v: fm.apply(v, x, train=False, capture_intermediates=True),
                              shapes)
    got = {k: v["__call__"][0].shape for k, v in inter["intermediates"].items() if k != "__call__"}
    want = {}
    hooks = [m.register_forward_hook(lambda mod, _i, out, name=name: want.__setitem__(name, out.shape))
             for name, m in tm.named_modules() if name.count(".") == 1 or name in ("conv1", "fc")]
    with torch.no_grad():
        tm.train()(torch.zeros(2, 3, 32, 32))
    for h in hooks:
        h.remove()
    for name, shape in want.items():
        key = name.replace(".", "_")
        nhwc = (shape[0], shape[2], shape[3], shape[1]) if len(shape) == 4 else tuple(shape)
        assert tuple(got[key]) == nhwc, name
    assert tuple(got["layer1_0"]) == (2, 8, 8, 256) and tuple(got["layer4_2"]) == (2, 1, 1, 2048)


def test_host_initialisation_matches_the_modules_distributions():
    import flax
    import jax
    import jax.numpy as jnp
    import numpy as np

    flax_net = _load("kit_resnet50_flax", ROOT / "trials/jax/resnet50_flax.py")
    fm = flax_net.resnet50(num_classes=10)
    v = flax_net.init_variables(fm, seed=0)
    shapes = jax.eval_shape(lambda k: fm.init(k, jnp.zeros((2, 32, 32, 3)), train=False),
                            jax.random.PRNGKey(0))
    flat, ref = flax.traverse_util.flatten_dict(v), flax.traverse_util.flatten_dict(shapes)
    assert flat.keys() == ref.keys()
    assert all(flat[k].shape == ref[k].shape and flat[k].dtype == np.float32 for k in flat)
    k = v["params"]["layer3_0"]["conv2"]["kernel"]  # 3×3, 256 -> 256: Kaiming fan-out
    assert k.std() == pytest.approx(math.sqrt(2 / (3 * 3 * 256)), rel=0.02)
    assert abs(v["params"]["fc"]["kernel"]).max() <= 1 / math.sqrt(2048)
    assert (v["params"]["bn1"]["scale"] == 1).all() and (v["batch_stats"]["bn1"]["var"] == 1).all()
    again = flax_net.init_variables(fm, seed=0)["params"]["conv1"]["kernel"]
    assert (again == v["params"]["conv1"]["kernel"]).all()  # deterministic by seed


def _args(**kw):
    base = dict(device="cuda", memory_budget_mib=None, benchmark="maxbatch")
    return SimpleNamespace(**{**base, **kw})


XLA_VARS = ("JAX_PLATFORMS", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION",
            "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_ALLOCATOR",
            "JAX_ENABLE_COMPILATION_CACHE", "JAX_COMPILATION_CACHE_DIR")


def test_budget_becomes_xla_memory_settings(monkeypatch):
    """The environment XLA's client reads at start-up, per device and budget (set in this
    process, restored by monkeypatch); the device total is passed in, as libcuda would give it."""
    trial = _load("kit_jax_trial", TRIAL)
    for name in XLA_VARS:
        # setenv first: monkeypatch records a variable only when it touches one that exists, and delenv of an
        # absent one records nothing — what configure_xla_env then sets would outlive the test (a JAX_PLATFORMS=cuda
        # left here made the next in-process jax backend fail to start)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    total = 16 * 1024 * MIB

    s = {}
    trial.configure_xla_env(_args(device="cpu", memory_budget_mib=1000), s, lambda: total)
    assert os.environ["JAX_PLATFORMS"] == "cpu" and "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ
    assert s["memory_budget_enforced"].startswith("no: on cpu")

    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", "0.9")  # both spellings would stop the plugin
    s = {}
    trial.configure_xla_env(_args(memory_budget_mib=4096), s, lambda: total)
    assert os.environ["JAX_PLATFORMS"] == "cuda"
    # 64 MiB under the budget (POOL_SLACK_MIB): (4096 - 64) / 16384.
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.246094"
    assert s["pool_slack_mib"] == 64
    # Preallocated: a pool grown on demand fragmented (H200: OOM at 6,144 below a smaller pool's 8,704).
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
    assert os.environ["XLA_PYTHON_CLIENT_ALLOCATOR"] == "bfc"
    assert "XLA_CLIENT_MEM_FRACTION" not in os.environ
    assert s["memory_fraction"] == 0.246094 and s["device_total_mib"] == 16384
    assert s["xla_env"]["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.246094"
    assert s["memory_budget_enforced"].startswith("yes: XLA_PYTHON_CLIENT_MEM_FRACTION")

    s = {}
    trial.configure_xla_env(_args(memory_budget_mib=99_999), s, lambda: total)
    assert s["memory_fraction"] == 1.0  # never above the card (XLA reads > 1 as oversubscription)

    s = {}
    trial.configure_xla_env(_args(), s, lambda: pytest.fail("no budget: the total is not needed"))
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ
    assert s["memory_budget_enforced"] == "no budget given (preallocation off)"
    assert os.environ["JAX_ENABLE_COMPILATION_CACHE"] == "false"  # maxbatch: every compile cold

    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/tmp/cache")
    monkeypatch.delenv("JAX_ENABLE_COMPILATION_CACHE")
    s = {}
    trial.configure_xla_env(_args(benchmark="throughput"), s, lambda: total)
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == "/tmp/cache"  # outside throughput's window
    assert "JAX_ENABLE_COMPILATION_CACHE" not in os.environ and "JAX_ENABLE_COMPILATION_CACHE" not in s["xla_env"]


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None,
                    reason=host_kind_reason("no-gpu", "a CUDA driver is installed"))
def test_a_budget_on_cuda_without_a_driver_is_one_clear_error():
    rc, r, err = run_trial("--benchmark", "maxbatch", "--batch", 2, "--device", "cuda",
                           "--memory-budget-mib", 1000)
    assert (r["status"], rc) == ("error", 1)
    assert "libcuda.so.1" in r["error"] and "\n" not in r["error"]


def test_oom_classification_on_real_jax_errors():
    from jax.errors import JaxRuntimeError

    trial = _load("kit_jax_trial", TRIAL)
    for exc in (JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 5555373288 bytes."),
                JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3.92GiB."),
                JaxRuntimeError("INTERNAL: Failed to allocate: CUDA_ERROR_OUT_OF_MEMORY: out of memory"),
                MemoryError()):
        assert trial.classify(exc) == "oom", exc
    try:  # wrapped: the OOM is the cause of what reaches the trial
        try:
            raise JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 1 bytes.")
        except JaxRuntimeError as inner:
            raise RuntimeError("train step failed") from inner
    except RuntimeError as outer:
        assert trial.classify(outer) == "oom"
    for exc in (JaxRuntimeError("INVALID_ARGUMENT: Incompatible shapes for broadcasting"),
                JaxRuntimeError("INTERNAL: ptxas exited with non-zero error code 65280"),
                ValueError("bad input")):
        assert trial.classify(exc) == "error", exc


def test_bad_flags_still_give_a_result_line():
    rc, r, _ = run_trial("--benchmark", "maxbatch", "--batch", 0)
    assert (r["status"], rc) == ("error", 1) and "--batch" in r["error"]


# ---------------------------------------------------------------------- training

def test_local_search_through_the_cli_ends_in_an_artifact(tmp_path):
    """fp32 and bf16, one candidate each (batch 2), through `kitctl run maxbatch --runtime local`."""
    p = subprocess.run([*ENTRY, "run", "maxbatch", "--runtime", "local", "--device", "cpu",
                        "--engines", "jax-xla", "--precision", "both",
                        "--start-batch", "2", "--max-batch", "2", "--results-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr + p.stdout
    (final,) = [f for f in tmp_path.glob("*.json") if not f.name.endswith(".partial.json")]
    doc = load(final)
    assert doc["state"] == "complete" and doc["runtime"]["name"] == "local"
    ent = doc["engines"]["jax-xla"]
    assert ent["label"] == "JAX XLA" and ent["mode"] == "xla"
    assert ent["provenance"]["trial"].endswith("trials/jax/trial.py")
    assert ent["versions"]["jax"].startswith("0.")
    assert [(c["engine"], c["precision"]) for c in doc["results"]] == [
        ("jax-xla", "fp32"), ("jax-xla", "bf16")]
    for cell in doc["results"]:
        assert cell["search_status"] == "censored_at_max_batch"
        assert (cell["max_batch"], cell["next_batch"]) == (2, None)
        (t,) = cell["trials"]
        assert t["status"] == "ok" and t["exit_code"] == 0
        assert_ok(t["result"], cell["precision"])
    assert "JAX" in p.stdout and "censored" in p.stdout  # the table (labels may wrap)


def test_throughput_window():
    rc, r, err = run_trial("--benchmark", "throughput", "--batch", 2, "--warmup-steps", 1, "--steps", 2)
    assert rc == 0, err[-3000:]
    assert_ok(r, "fp32")
    assert r["settings"]["warmup_steps"] == 1 and r["settings"]["steps"] == 2
    assert r["images"] == 4 and r["window_seconds"] > 0
    assert r["step_seconds"] == pytest.approx(r["window_seconds"] / 2)
    assert r["images_per_second"] == pytest.approx(4 / r["window_seconds"])
    # Compilation is outside the window: the compiled step is timed apart, inside the warm-up.
    assert r["compile_seconds"] > r["window_seconds"] / 2


def test_a_nonfinite_loss_is_reported_as_nonfinite():
    rc, r, err = run_trial("--benchmark", "maxbatch", "--batch", 2, env={"KIT_TRIAL_FAULT": "nan"})
    assert (r["status"], rc) == ("nonfinite", 1), err[-3000:]
    assert r["loss_warmup"] is None and r["loss_final"] is None  # NaN has no JSON form
    assert "non-finite loss" in r["error"] and "nan" in r["error"]


def test_a_memory_limit_that_cannot_hold_the_batch_is_oom():
    """Through the local runtime's host memory limit (RLIMIT_DATA): the step compiles (~1.1 GiB
    peak RSS), then XLA's ~5.2 GiB of buffers for batch 2000 cannot be allocated ->
    JaxRuntimeError RESOURCE_EXHAUSTED, reported by the trial (exit 1), not a crash."""
    runtime = LocalRuntime(memory_limit_mib=3000)
    out = runtime.run(TrialRequest(engine="jax-xla", mode="xla", benchmark="maxbatch",
                                   batch=2000, precision="fp32", device="cpu"), timeout_s=1200)
    assert out.status.value == "oom", (out.error, out.stderr_tail[-2000:])
    assert out.exit_code == 1 and out.signal is None  # reported, not a crash
    assert out.result["engine"] == "jax-xla" and out.result["loss_warmup"] is None
    assert "RESOURCE_EXHAUSTED" in out.error and "memory" in out.error.lower()


def test_framework_peak_is_the_pool_the_budget_caps():
    """XLA's memory stats as the H200 reported them (calibration at batch 16 without a budget,
    results/reference/maxbatch-resnet50-synthetic-20261201T102817Z.partial.json): the framework peak the host
    subtracts from the device delta is the BFC pool (what XLA's fraction caps, like torch's reserved
    memory), so the overhead is the delta minus the pool, not minus the bytes in use."""
    train = _load("kit_jax_train", ROOT / "trials/jax/jax_train.py")
    mib = 1024 * 1024
    stats = {"peak_bytes_in_use": int(4984.3 * mib), "bytes_in_use": 0,
             "peak_pool_bytes": 10238 * mib, "bytes_limit": 107368 * mib}
    peaks = train.device_peaks(stats)
    assert peaks["framework_peak_mib"] == 10238.0
    assert peaks["framework_in_use_peak_mib"] == 4984.3
    assert (peaks["framework_limit_mib"], peaks["framework_current_mib"]) == (107368.0, 0.0)
    assert round(10886.8 - peaks["framework_peak_mib"], 1) == 648.8  # the calibrated overhead now
    # Without a pool figure the in-use peak is what there is.
    assert train.device_peaks({"peak_bytes_in_use": 5 * mib})["framework_peak_mib"] == 5.0
    assert train.device_peaks({}) == {}


# --------------------------------------------------- XLA's rematerialisation, memory analysis

# Verbatim from the H200 (jaxlib 0.11.2, --vram-limit 16376): the stderr_tail of the fp32 trial at
# batch 13568, the jax-xla max batch, in results/reference/maxbatch-resnet50-synthetic-20261201T163217Z.json.
H200_FP32_13568 = ("W1201 16:55:22.587089   12178 hlo_rematerialization.cc:3363] Can't reduce memory use "
                   "below 14.16GiB (15204325068 bytes) by rematerialization; only reduced to 14.60GiB "
                   "(15677178712 bytes), down from 22.35GiB (24000769048 bytes) originally")
# Verbatim from the H200 too: bf16 batch 44898 (its second attempt, a timeout) in
# results/reference/maxbatch-resnet50-synthetic-20261201T191219Z.json (the lead's checkout, 2026-12-01).
H200_BF16_44898 = ("W1201 19:22:46.262283   18491 hlo_rematerialization.cc:3363] Can't reduce memory use "
                   "below 13.82GiB (14836479832 bytes) by rematerialization; only reduced to 28.19GiB "
                   "(30271695764 bytes), down from 35.57GiB (38189665624 bytes) originally")


def test_xla_rematerialization_lines_from_the_h200_are_parsed():
    xla_log = _load("xla_log", ROOT / "trials/jax/xla_log.py")
    tail = ("W1201 16:54:58.208001   12215 bfc_allocator.cc:371] Allocator (GPU_0_bfc) ran out of memory "
            "trying to allocate 61.89GiB from the lower end with freed_by_count=0.\n" + H200_FP32_13568 + "\n")
    assert xla_log.parse_rematerialization(tail) == {
        "limit_bytes": 15204325068, "reduced_to_bytes": 15677178712, "original_bytes": 24000769048,
        "fitted": False, "rematerialised": True, "lines": 1,
        "form": "LOG(WARNING): rematerialisation could not reach the limit"}
    # Two modules: the step is the one with the larger peak before the pass; both are counted.
    both = xla_log.parse_rematerialization(H200_FP32_13568 + "\n" + H200_BF16_44898)
    assert (both["original_bytes"], both["reduced_to_bytes"], both["lines"]) == (38189665624, 30271695764, 2)
    # The VLOG(1) form (TF_CPP_VMODULE=hlo_rematerialization=1), as HloRematerialization::RunImpl
    # formats it: without a warning, XLA reached its limit (which that line does not print).
    vlog = ("I1201 16:55:22.500000   12178 hlo_rematerialization.cc:3340] Peak memory usage of module now "
            "14.60GiB (15677178712 bytes), was 22.35GiB (24000769048 bytes)")
    fit = xla_log.parse_rematerialization(vlog)
    assert (fit["limit_bytes"], fit["fitted"], fit["rematerialised"]) == (None, True, True)
    assert xla_log.parse_rematerialization(vlog + "\n" + H200_FP32_13568)["fitted"] is False
    # Nothing from the pass, or a different message of the same file: no record.
    assert xla_log.parse_rematerialization("") is None
    assert xla_log.parse_rematerialization(tail.replace("Can't reduce", "Cannot reduce")) is None


def test_fd2_capture_restores_stderr_and_copies_what_it_caught(capfd):
    """C++ logging writes to fd 2: caught there (not in sys.stderr), copied back in order, and fd 2
    restored even when the block raises."""
    xla_log = _load("xla_log", ROOT / "trials/jax/xla_log.py")
    os.write(2, b"before\n")
    with pytest.raises(RuntimeError), xla_log.capture_fd2() as cap:
        os.write(2, b"inside " + H200_FP32_13568.encode() + b"\n")
        raise RuntimeError("compile failed")
    os.write(2, b"after\n")
    assert cap.text == "inside " + H200_FP32_13568 + "\n"
    assert xla_log.parse_rematerialization(cap.text)["lines"] == 1
    assert capfd.readouterr().err == "before\n" + cap.text + "after\n"


def test_the_trial_records_xla_memory_analysis_on_cpu():
    """Batch 1 on CPU: compiled.memory_analysis() is recorded, no rematerialisation line (the
    pass does not run on the CPU), and what XLA logged while compiling still reaches stderr."""
    rc, r, err = run_trial("--benchmark", "maxbatch", "--batch", 1,
                           env={"TF_CPP_VMODULE": "cpu_compiler=1", "TF_CPP_MIN_LOG_LEVEL": "0"})
    assert rc == 0, err[-3000:]
    assert_ok(r, "fp32")
    assert r["xla_rematerialization"] is None
    mem = r["xla_memory_analysis"]
    assert set(mem) >= {"argument_bytes", "output_bytes", "temp_bytes", "generated_code_bytes"}
    assert all(isinstance(v, int) and v >= 0 for v in mem.values())
    # The step's parameters and Adam's two moments are arguments (fp32): at least 3 × 4 bytes each.
    assert mem["argument_bytes"] >= 3 * 4 * RESNET50_CIFAR_PARAMS
    # The generic field the host's guided search reads: XLA's compiled peak in MiB.
    assert r["compiled_peak_mib"] == round(mem["peak_memory_bytes"] / 2**20, 2)
    assert r["compiled_peak_mib"] >= mem["argument_bytes"] / 2**20
    assert "Compiling: jit_train_step" in err  # captured on fd 2 during the compile, copied back


def test_no_persistent_compilation_cache(tmp_path):
    """Every candidate compiles (and on a GPU autotunes) as a first run does. On the H200 a cache
    left by an earlier call made the calibration a cache hit: no autotuning, ~80 MiB fewer kernels
    loaded outside XLA's pool, so the calibrated overhead came out low, the pool high, and every
    fresh compile above 26,000 crossed the budget by 1 MiB (results/reference/logs/h200-call20-…). A cache
    directory in the environment must stay unused."""
    cache = tmp_path / "jax-cache"
    cache.mkdir()
    rc, r, err = run_trial("--benchmark", "maxbatch", "--batch", 1,
                           env={"JAX_COMPILATION_CACHE_DIR": str(cache),
                                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})
    assert rc == 0, err[-3000:]
    assert_ok(r, "fp32")
    assert list(cache.iterdir()) == []
    assert r["settings"]["xla_env"]["JAX_ENABLE_COMPILATION_CACHE"] == "false"
