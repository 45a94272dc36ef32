"""The OpenNN trial's C++ core (trials/opennn, built with KIT_WITH_OPENNN=OFF), checked against
the Python side of trial protocol v1.

The core is configured and built here with this machine's cmake and g++ (no OpenNN, no CUDA),
its unit tests are run, and kit-fake-trial -- the OpenNN trial's protocol driver around a fake
engine -- is run as the host runs a trial, so that its KIT-RESULT lines go through
kitctl.core.protocol.parse_result and its flags, messages, data and formulas are compared with
trials/common/kittrial.py's.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "trials" / "opennn"
sys.path.insert(0, str(ROOT / "trials" / "common"))

import kittrial  # noqa: E402
from cifar_files import write_cifar10  # noqa: E402
from conftest import unavailable  # noqa: E402
from kitctl.core.protocol import ResultParseError, parse_result  # noqa: E402

MODES = ["pool1", "default", "graph", "resident"]
PROTOCOL_KEYS = {"protocol", "engine", "mode", "precision", "batch", "status", "loss_warmup",
                 "loss_final", "parameters", "step_seconds", "framework_peak_mib", "versions",
                 "error"}


# ------------------------------------------------------------------------------ the build

@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    cmake = shutil.which("cmake")
    cxx = os.environ.get("CXX") or shutil.which("g++")
    if not cmake or not cxx or not shutil.which(cxx):
        unavailable("needs cmake and g++ on PATH to build trials/opennn's core (.ci/setup-cxx.sh installs them; "
                    f"cmake: {cmake or 'absent'}, g++: {cxx or 'absent'})")
    out = tmp_path_factory.mktemp("opennn-core-build")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    configure = [cmake, "-S", str(SOURCE), "-B", str(out), *generator,
                 "-DKIT_WITH_OPENNN=OFF", "-DKIT_BUILD_TESTS=ON", f"-DCMAKE_CXX_COMPILER={cxx}",
                 "-DCMAKE_BUILD_TYPE=Release"]
    for cmd in (configure, [cmake, "--build", str(out), "--parallel", str(os.cpu_count() or 2)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return out


def fake_trial(build: Path, *flags, outcome=None, fault=None, timeout=60, env_extra=None):
    """Run kit-fake-trial like the host runs a trial; return (exit code, stdout, stderr)."""
    env = dict(os.environ)
    env.pop(kittrial.FAULT_ENV, None)
    env.pop("KIT_FAKE_OUTCOME", None)
    if outcome:
        env["KIT_FAKE_OUTCOME"] = outcome
    if fault:
        env[kittrial.FAULT_ENV] = fault
    env.update(env_extra or {})
    proc = subprocess.run([str(build / "kit-fake-trial"), *map(str, flags)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd="/")
    return proc.returncode, proc.stdout, proc.stderr


def run_ok(build, *flags, **kw):
    rc, out, err = fake_trial(build, *flags, **kw)
    lines = out.splitlines()
    assert len(lines) == 1, f"stdout must hold only the result line, got {lines!r}; stderr:\n{err[-3000:]}"
    return rc, parse_result(out), err


MAXBATCH = ("--benchmark", "maxbatch", "--batch", 12, "--mode", "pool1")


def python_args(*flags):
    return kittrial.build_parser(MODES).parse_args([str(f) for f in flags])


# ------------------------------------------------------------------------------ unit tests

def test_core_unit_tests_pass(build):
    proc = subprocess.run([str(build / "kit-core-tests")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.endswith(" 0 failed") and not last.startswith("0 passed"), last


def test_cuda_graph_hooks_reach_the_runtime_and_book_every_launch(build):
    # Stand-ins for CUDA's header/runtime and OpenNN's static library (trials/opennn/tests/hooks).
    proc = subprocess.run([str(build / "kit-graph-hooks-test")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "17 passed, 0 failed"


# ------------------------------------------------------------------------ the result line

def test_sample_line_parses_with_the_host_and_has_kittrials_keys(build):
    rc, result, err = run_ok(build, *MAXBATCH)
    assert rc == 0 and result["status"] == "ok" and result["error"] is None, err[-3000:]
    assert PROTOCOL_KEYS <= result.keys()
    assert (result["protocol"], result["engine"], result["mode"], result["batch"]) == (1, "opennn-pool1", "pool1", 12)
    assert result["versions"]["trial_protocol"] == 1
    expected = kittrial.base_result(python_args(*MAXBATCH), "opennn-pool1")
    assert set(expected) - {"versions"} <= set(result)
    assert list(result["settings"])[:len(expected["settings"])] == list(expected["settings"])
    for key, value in expected["settings"].items():
        assert result["settings"][key] == value, key
    assert result["framework_peak_mib"] is None
    assert math.isfinite(result["loss_warmup"]) and math.isfinite(result["loss_final"])
    assert result["step_seconds"] > 0 and result["warmup_seconds"] > 0


def test_throughput_keys_and_formulas(build):
    flags = ("--benchmark", "throughput", "--batch", 6, "--mode", "default", "--precision", "bf16",
             "--warmup-steps", 2, "--steps", 5, "--seed", 3, "--memory-budget-mib", 900,
             "--cudnn-benchmark")
    rc, result, _ = run_ok(build, *flags)
    assert rc == 0 and result["engine"] == "opennn-default" and result["precision"] == "bf16"
    expected = kittrial.base_result(python_args(*flags), "opennn-default")
    assert set(expected) - {"versions"} <= set(result)
    assert {k: result["settings"][k] for k in expected["settings"]} == expected["settings"]
    assert result["images"] == 6 * 5
    assert result["images_per_second"] == pytest.approx(30 / result["window_seconds"])
    assert result["step_seconds"] == pytest.approx(result["window_seconds"] / 5)
    assert result["warmup_seconds"] > 0
    # The fake engine's loss after epoch k is 2.3 / (k + 1): warm-up ends after epoch 1.
    assert result["loss_warmup"] == pytest.approx(2.3 / 2) and result["loss_final"] == pytest.approx(2.3 / 7)

    _, no_warmup, _ = run_ok(build, "--benchmark", "throughput", "--batch", 2, "--mode", "pool1",
                             "--warmup-steps", 0, "--steps", 1)
    assert no_warmup["loss_warmup"] is None and no_warmup["status"] == "ok"


def test_diagnostics_never_reach_stdout_and_the_tree_is_removed(build):
    rc, result, err = run_ok(build, *MAXBATCH)
    for text in ("diagnostics through std::cout", "diagnostics through printf",
                 "diagnostics from a child process", "Epoch: 0", "Training error: "):
        assert text in err
    data = result["settings"]["data"]
    assert data["images_checked"] == 12 and data["classes_in_tree"] == 10
    assert data["tree_format"].startswith("bmp")
    assert not Path(data["tree"]).exists()


@pytest.mark.parametrize("argv", [
    ["--benchmark", "maxbatch", "--batch", "0", "--mode", "pool1"],
    ["--benchmark", "maxbatch", "--batch", "two", "--mode", "pool1"],
    ["--benchmark", "maxbatch", "--batch", "3", "--mode", "eager"],
    ["--batch", "3"],
    ["--benchmark", "throughput", "--batch", "3", "--mode", "pool1", "--steps", "0"],
    ["--benchmark", "throughput", "--batch", "3", "--mode", "pool1", "--warmup-steps", "-1"],
    ["--benchmark", "maxbatch", "--batch", "3", "--mode", "pool1", "--seed", "x"],
    ["--benchmark", "maxbatch", "--batch", "3", "--mode", "pool1", "--s", "1"],
    ["--benchmark", "maxbatch", "--batch", "3", "--mode", "pool1", "extra", "--nope"],
    ["--benchmark", "maxbatch", "--batch"],
    ["--benchmark", "maxbatch", "--batch", "3", "--mode", "pool1", "--dataset", "imagenet"],
])
def test_bad_flags_give_argparses_message_in_a_result_line(build, argv):
    parser = kittrial.build_parser(MODES)
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    rc, out, _ = fake_trial(build, *argv)
    assert rc == 1 and len(out.splitlines()) == 1
    result = parse_result(out)  # every required key is there, unlike a bare error object
    assert result["status"] == "error" and result["engine"] is None
    assert result["error"] == f"invalid arguments: {parser.last_error}"


def test_flag_spellings_match_argparse(build):
    argv = ["--bench=throughput", "--bat", "+4", "--mode", "pool1", "--see", "-2", "--steps", "1_0",
            "--warm", "0", "--batch", "5", "--cudnn"]
    args = python_args(*argv)
    _, result, _ = run_ok(build, *argv)
    assert (result["batch"], result["settings"]["seed"], result["settings"]["steps"]) == (args.batch, args.seed, 10)
    assert result["settings"]["cudnn_benchmark"] is True


def test_help_prints_usage_and_no_result_line(build):
    rc, out, _ = fake_trial(build, "--help")
    assert rc == 0 and out.startswith("usage:")
    assert not any(line.startswith("KIT-RESULT ") for line in out.splitlines())



# ------------------------------------------------------- the throughput path (graph / resident)

GRAPH = ("--benchmark", "throughput", "--batch", 128, "--mode", "graph")


def test_graph_mode_plans_whole_epochs_of_the_50000_image_dataset(build):
    # The real size (no KIT_FAKE_DATASET_IMAGES): 390 steps of 128 per epoch, 80 images dropped.
    rc, result, err = run_ok(build, *GRAPH, "--warmup-steps", 10, "--steps", 780, timeout=120)
    assert rc == 0 and result["status"] == "ok", err[-3000:]
    assert (result["engine"], result["mode"]) == ("opennn-graph", "graph")
    plan = result["settings"]["epoch_plan"]
    assert (plan["dataset_images"], plan["steps_per_epoch"], plan["images_dropped_per_epoch"]) == (50000, 390, 80)
    assert (plan["warmup_epochs"], plan["timed_epochs"], plan["timed_steps"]) == (1, 2, 780)
    assert result["images"] == 780 * 128 == plan["timed_images"]
    assert result["images_per_second"] == pytest.approx(result["images"] / result["window_seconds"])
    assert result["step_seconds"] == pytest.approx(result["window_seconds"] / 780)
    assert result["warmup_seconds"] > 0
    # The settings keep the request as kittrial does; the plan says what ran.
    assert (result["settings"]["warmup_steps"], result["settings"]["steps"]) == (10, 780)
    assert result["settings"]["data"]["images"] == 50000
    audit = result["settings"]["cuda_graph_audit"]
    assert audit["check"] == "ok"
    assert (audit["timed_graph_launches"], audit["expected_graph_launches"]) == (96, 96)
    assert audit["timed_graph_steps_estimate"] == audit["expected_graph_steps"] == 768


def test_graph_mode_refuses_a_figure_when_a_short_graph_stands_in_for_a_group(build):
    rc, result, err = run_ok(build, *GRAPH, "--warmup-steps", 1, "--steps", 1,
                             env_extra={"KIT_FAKE_DATASET_IMAGES": "2048", "KIT_FAKE_GRAPH": "short"})
    assert rc == 1 and result["status"] == "error"
    assert "smaller than a full 8-step group 1 of 2 times" in result["error"]
    assert "about 9 of 16 graph steps ran" in result["error"]
    # The raw figures stay in the line; the host uses none of them for a run that is not ok.
    assert result["images"] == 16 * 128 and result["settings"]["cuda_graph_audit"]["short_graph_launches"] == 1

    rc, result, _ = run_ok(build, *GRAPH, "--warmup-steps", 1, "--steps", 1,
                           env_extra={"KIT_FAKE_DATASET_IMAGES": "2048", "KIT_FAKE_GRAPH": "none"})
    assert rc == 1 and "launched no graph in the timed epochs" in result["error"]


def test_resident_mode_is_the_graphless_control(build):
    rc, result, err = run_ok(build, "--benchmark", "throughput", "--batch", 100, "--mode", "resident",
                             "--precision", "bf16", "--warmup-steps", 3, "--steps", 25,
                             env_extra={"KIT_FAKE_DATASET_IMAGES": "1000"})
    assert rc == 0 and result["engine"] == "opennn-resident" and result["precision"] == "bf16", err[-3000:]
    plan = result["settings"]["epoch_plan"]
    assert (plan["steps_per_epoch"], plan["warmup_epochs"], plan["timed_epochs"]) == (10, 1, 3)
    assert result["images"] == 30 * 100
    assert result["settings"]["data"]["digest"] == fnv1a64(*splitmix64_batch(1000, 0))
    assert result["settings"]["cuda_graph_audit"]["check"] == "ok"
    assert result["settings"]["cuda_graph_audit"]["timed_graph_launches"] == 0

    rc, result, _ = run_ok(build, "--benchmark", "throughput", "--batch", 100, "--mode", "resident",
                           env_extra={"KIT_FAKE_DATASET_IMAGES": "1000", "KIT_FAKE_GRAPH": "full"})
    assert rc == 1 and "CUDA graphs were off, yet" in result["error"]


def test_graph_modes_refuse_maxbatch_and_oversized_batches_in_one_line(build):
    rc, result, _ = run_ok(build, "--benchmark", "maxbatch", "--batch", 8, "--mode", "graph")
    assert rc == 1 and result["status"] == "error"
    assert result["error"] == "opennn-graph runs the throughput benchmark only"
    rc, result, _ = run_ok(build, *GRAPH, env_extra={"KIT_FAKE_DATASET_IMAGES": "100"})
    assert rc == 1 and "batch 128 does not fit the 100-image dataset" in result["error"]

# ------------------------------------------------------------------------------- failures

@pytest.mark.parametrize("outcome, status, fragment", [
    ("oom", "oom", "std::runtime_error: CUDA Error: 2 in "),
    ("cudnn_oom", "oom", "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"),
    ("bad_alloc", "oom", "std::bad_alloc"),
    ("nested_oom", "oom", "while allocating the batch pool <- caused by: std::bad_alloc"),
    ("error", "error", "std::runtime_error: boom on two lines"),
    # The cause OpenNN printed to std::cerr and swallowed decides, and is named in the error.
    ("swallowed_oom", "oom", "requires SM 8.0+ (Ampere). <- after: ConvolutionOperator: cudnn-frontend "
                             "path unavailable (CUDA Error: 2 in /src/opennn/opennn/device_backend.cpp:95)."),
])
def test_failures_are_classified(build, outcome, status, fragment):
    rc, result, err = run_ok(build, *MAXBATCH, outcome=outcome)
    assert rc == 1 and result["status"] == status
    assert fragment in result["error"] and "\n" not in result["error"]
    assert "kit: trial failed:" in err
    assert not Path(result["settings"]["data"]["tree"]).exists()


def test_nan_fault_is_nonfinite(build):
    rc, result, _ = run_ok(build, *MAXBATCH, fault="nan")
    assert rc == 1 and result["status"] == "nonfinite"
    assert result["loss_final"] is None and result["error"] == "non-finite loss: loss_final=nan"


def test_garbage_fault_prints_an_unparsable_line_and_exits_0(build):
    rc, out, _ = fake_trial(build, *MAXBATCH, fault="garbage")
    assert rc == 0 and out.startswith("KIT-RESULT ")
    with pytest.raises(ResultParseError):
        parse_result(out)


def test_crash_fault_aborts_without_a_result(build):
    rc, out, _ = fake_trial(build, *MAXBATCH, fault="crash")
    assert rc == -signal.SIGABRT and "KIT-RESULT" not in out


def test_hang_fault_hangs(build):
    with pytest.raises(subprocess.TimeoutExpired):
        fake_trial(build, *MAXBATCH, fault="hang", timeout=3)


def test_unknown_fault_is_an_error(build):
    rc, result, _ = run_ok(build, *MAXBATCH, fault="melt")
    assert rc == 1 and result["status"] == "error" and "unknown KIT_TRIAL_FAULT='melt'" in result["error"]


# ------------------------------------------------------------------------------------ data

def fnv1a64(images: np.ndarray, labels: np.ndarray) -> str:
    h = 0xCBF29CE484222325
    for byte in images.astype(np.uint8).tobytes() + labels.astype(np.uint8).tobytes():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"fnv1a64:{h:016x}"


def splitmix64_batch(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The documented synthetic generator, independently in Python."""
    mask = (1 << 64) - 1
    state, out = seed & mask, bytearray()
    while len(out) < n * 3072:
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out += (z ^ (z >> 31)).to_bytes(8, "little")
    images = np.frombuffer(bytes(out[:n * 3072]), dtype=np.uint8)
    return images, np.arange(n) % 10


@pytest.mark.parametrize("seed", [0, 5, -3])
def test_synthetic_data_is_the_documented_generator(build, seed):
    _, result, _ = run_ok(build, "--benchmark", "maxbatch", "--batch", 3, "--mode", "pool1", "--seed", seed)
    assert result["settings"]["data"]["digest"] == fnv1a64(*splitmix64_batch(3, seed))
    assert "splitmix64" in result["settings"]["data"]["generator"]


@pytest.mark.parametrize("point_at", ["folder", "parent"])
def test_cifar10_matches_kittrial(build, tmp_path, point_at):
    folder = write_cifar10(tmp_path, "bin")  # 20 records over two files
    data_dir = folder if point_at == "folder" else tmp_path
    rc, result, err = run_ok(build, "--benchmark", "maxbatch", "--batch", 25, "--mode", "pool1",
                             "--dataset", "cifar10", "--data-dir", data_dir)
    assert rc == 0, err[-3000:]
    images, labels = kittrial.load_cifar10(data_dir, 25)
    data = result["settings"]["data"]
    assert data["digest"] == fnv1a64(images, labels)
    assert (data["name"], data["layout"], data["records_read"], data["wrapped"]) == ("cifar10", "bin", 20, True)
    assert data["files"] == ["data_batch_1.bin", "data_batch_2.bin"]
    assert result["settings"]["data_dir"] == str(data_dir)


def test_cifar10_errors_are_one_line(build, tmp_path):
    absent = tmp_path / "absent"
    _, result, _ = run_ok(build, *MAXBATCH, "--dataset", "cifar10", "--data-dir", absent)
    with pytest.raises(kittrial.TrialError) as python_error:
        kittrial.load_cifar10(absent, 12)
    assert result["status"] == "error" and result["error"] == str(python_error.value)

    write_cifar10(tmp_path / "py", "py")
    _, result, _ = run_ok(build, *MAXBATCH, "--dataset", "cifar10", "--data-dir", tmp_path / "py")
    assert result["status"] == "error" and "python (pickle) layout is not read" in result["error"]

    _, result, _ = run_ok(build, *MAXBATCH, "--dataset", "cifar10")
    assert result["status"] == "error" and result["error"] == "--dataset cifar10 needs --data-dir"


def test_result_line_escapes_like_json_dumps(build, tmp_path):
    odd = tmp_path / 'd"ir\\with \u00e9 and \u20ac'
    _, out, _ = fake_trial(build, *MAXBATCH, "--dataset", "cifar10", "--data-dir", odd)
    line = out.strip()
    assert line.isascii()
    result = json.loads(line[len("KIT-RESULT "):])
    assert result["settings"]["data_dir"] == str(odd)
    assert str(odd) in result["error"]
