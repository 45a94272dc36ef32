"""The OpenNN trial's C++ core (trials/opennn, built with KIT_WITH_OPENNN=OFF), checked against
the Python side of trial protocol v1.

The core is configured and built here with this machine's cmake and g++ (no OpenNN, no CUDA),
its unit tests are run, and kit-fake-trial -- the OpenNN trial's protocol driver around a fake
engine -- is run as the host runs a trial, so that its KIT-RESULT lines go through
kitctl.core.protocol.parse_result and its flags, messages, data and formulas are compared with
trials/common/kittrial.py's.
"""

from __future__ import annotations

import argparse
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


def _number_at_least(low):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or value < low:
            raise argparse.ArgumentTypeError(f"must be a number >= {low}, got {text!r}")
        return value
    return parse


def reference_parser() -> argparse.ArgumentParser:
    """kittrial's parser, with the throughput window's flags (protocol v1 additions) as the
    lead's spec gives them where this kittrial does not define them yet: the C++ core must give
    argparse's messages for them too. Once kittrial has them, kittrial's own definitions rule."""
    parser = kittrial.build_parser(MODES)
    known = parser._option_string_actions
    if "--image-size" not in known:
        parser.add_argument("--image-size", type=kittrial._positive_int, default=32)
    if "--window-images" not in known:
        parser.add_argument("--window-images", type=kittrial._positive_int, default=None)
    if "--window-seconds" not in known:
        parser.add_argument("--window-seconds", type=_number_at_least(0), default=None)
    if "--steady-tolerance" not in known:
        parser.add_argument("--steady-tolerance", type=_number_at_least(0), default=0.02)
    if "--max-warmup-seconds" not in known:
        parser.add_argument("--max-warmup-seconds", type=_number_at_least(0), default=120.0)
    return parser


def python_args(*flags):
    return reference_parser().parse_args([str(f) for f in flags])


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
    # The throughput window's flags (a trial that did not know them would fail every run).
    ["--benchmark", "throughput", "--batch", "3", "--mode", "graph", "--image-size", "0"],
    ["--benchmark", "throughput", "--batch", "3", "--mode", "graph", "--window-images", "0"],
    ["--benchmark", "throughput", "--batch", "3", "--mode", "graph", "--window-images", "1e5"],
    ["--benchmark", "throughput", "--batch", "3", "--mode", "graph", "--window-seconds", "-5"],
    ["--benchmark", "throughput", "--batch", "3", "--mode", "graph", "--window-seconds", "five"],
    ["--benchmark", "throughput", "--batch", "3", "--mode", "graph", "--window-seconds", "inf"],
    ["--benchmark", "throughput", "--batch", "3", "--mode", "graph", "--steady-tolerance", "nan"],
    ["--benchmark", "throughput", "--batch", "3", "--mode", "graph", "--steady-tolerance", "0x1"],
    ["--benchmark", "throughput", "--batch", "3", "--mode", "graph", "--max-warmup-seconds", "-0.5"],
    ["--benchmark", "throughput", "--batch", "3", "--mode", "graph", "--max-warmup-seconds"],
    ["--benchmark", "throughput", "--batch", "3", "--mode", "graph", "--window", "5"],
])
def test_bad_flags_give_argparses_message_in_a_result_line(build, argv):
    parser = reference_parser()
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


def test_window_flags_are_parsed_like_argparse_and_recorded(build):
    argv = ["--benchmark", "throughput", "--batch", 4, "--mode", "pool1", "--image-size=32", "--window-im", "1_000",
            "--window-seconds", " .05 ", "--steady-tolerance", "5e-1", "--max-warmup-seconds", "1_0"]
    args = python_args(*argv)
    rc, result, err = run_ok(build, *argv)
    assert rc == 0 and result["status"] == "ok", err[-3000:]
    settings = result["settings"]
    assert (settings["image_size"], settings["window_images"], settings["window_seconds"],
            settings["steady_tolerance"], settings["max_warmup_seconds"]) == (
        args.image_size, args.window_images, args.window_seconds, args.steady_tolerance, args.max_warmup_seconds)
    assert settings["steps"] is None and settings["warmup_steps"] is None  # the rule decides them
    assert result["window"]["rule"] == "at least 1000 images and 0.05 s"
    assert result["warmup"]["rule"] == "until two successive chunks within 0.5 (at most 10 s)"


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

# ------------------------------------------------------ the window rule (protocol v1 additions)

WINDOW_KEYS = ["rule", "steps", "images", "seconds", "chunk_steps", "chunk_seconds", "chunk_device_seconds",
               "start_unix", "end_unix", "first_half_ips", "second_half_ips", "halves_change", "tolerance", "steady"]
WARMUP_KEYS = ["rule", "steps", "seconds", "converged", "chunk_rates"]
SMALL = {"KIT_FAKE_DATASET_IMAGES": "2048"}  # 16 steps of 128 an epoch, nothing dropped


def check_window(result, tolerance=0.02):
    """The window's own arithmetic, recomputed: images, chunk sums, halves and steadiness."""
    w = result["window"]
    assert list(w) == WINDOW_KEYS and list(result["warmup"]) == WARMUP_KEYS
    assert w["images"] == result["images"] == w["steps"] * result["batch"]
    assert w["seconds"] == result["window_seconds"]
    assert result["images_per_second"] == pytest.approx(w["images"] / w["seconds"])
    chunks = w["chunk_seconds"]
    assert w["steps"] == w["chunk_steps"] * len(chunks)
    assert sum(chunks) == pytest.approx(w["seconds"], rel=1e-9)
    assert w["end_unix"] - w["start_unix"] == pytest.approx(w["seconds"], abs=1e-5)
    assert w["chunk_device_seconds"] is None and w["tolerance"] == tolerance
    if len(chunks) < 2:
        assert w["first_half_ips"] is w["second_half_ips"] is w["halves_change"] is w["steady"] is None
        return w
    half = len(chunks) // 2
    per_chunk = w["chunk_steps"] * result["batch"]
    first = per_chunk * half / sum(chunks[:half])
    second = per_chunk * (len(chunks) - half) / sum(chunks[half:])
    assert w["first_half_ips"] == pytest.approx(first) and w["second_half_ips"] == pytest.approx(second)
    assert w["halves_change"] == pytest.approx((second - first) / first)
    assert w["steady"] is (abs(w["halves_change"]) <= tolerance)
    return w


def test_old_hosts_keep_the_fixed_counts_with_every_window_key(build):
    rc, result, err = run_ok(build, *GRAPH, env_extra=SMALL)
    assert rc == 0, err[-3000:]
    w = check_window(result)
    assert (w["rule"], result["warmup"]["rule"]) == ("fixed: 50 steps", "fixed: 10 steps")
    # W 10 / S 50 at 16 steps an epoch: 1 warm-up epoch, 4 timed (the fewest holding 50 steps).
    assert (w["steps"], w["chunk_steps"], len(w["chunk_seconds"])) == (64, 16, 4)
    assert result["warmup"]["steps"] == 16 and result["warmup"]["converged"] is None
    assert result["warmup"]["seconds"] == result["warmup_seconds"]


def test_the_rule_takes_the_fewest_whole_epochs_holding_the_images(build):
    # 5,000 images at 2,048 trained images an epoch: 3 epochs; 4,096 would be 2.
    rc, result, err = run_ok(build, *GRAPH, "--warmup-steps", 16, "--window-images", 5000, env_extra=SMALL)
    assert rc == 0, err[-3000:]
    w = check_window(result)
    assert w["rule"] == "at least 5000 images and 0 s"
    assert (w["images"], w["steps"], w["chunk_steps"], len(w["chunk_seconds"])) == (6144, 48, 16, 3)
    plan = result["settings"]["epoch_plan"]
    assert (plan["settled"], plan["warmup_epochs"], plan["timed_epochs"], plan["timed_epochs_for_images"]) == (
        True, 1, 3, 3)
    _, exact, _ = run_ok(build, *GRAPH, "--warmup-steps", 16, "--window-images", 4096, env_extra=SMALL)
    assert exact["window"]["steps"] == 32


def test_the_rule_lasts_at_least_the_seconds_and_stops_at_the_first_epoch_past_them(build):
    # Epochs of >= 30 ms: the window closes at the first epoch end at or past 0.2 s, so without
    # its last epoch it would have been short (what "fewest whole epochs" means, measured).
    rc, result, err = run_ok(build, *GRAPH, "--warmup-steps", 16, "--window-images", 1, "--window-seconds", 0.2,
                             env_extra={**SMALL, "KIT_FAKE_EPOCH_MS": "5,30"})
    assert rc == 0, err[-3000:]
    w = check_window(result)
    assert w["seconds"] >= 0.2 > w["seconds"] - w["chunk_seconds"][-1]
    assert 2 <= len(w["chunk_seconds"]) <= 7  # 0.2 s / 30 ms: at most 7 epochs
    assert result["settings"]["epoch_plan"]["timed_epochs"] == len(w["chunk_seconds"])


def test_the_adaptive_warmup_ends_when_two_successive_epoch_rates_agree(build):
    # Epoch 0 is the minimum; epochs of 60, 20, 20 ... ms: their rates agree from the 20 ms ones on.
    rc, result, err = run_ok(build, *GRAPH, "--window-images", 2048, "--steady-tolerance", 0.5,
                             env_extra={**SMALL, "KIT_FAKE_EPOCH_MS": "100,60,20"})
    assert rc == 0, err[-3000:]
    check_window(result, tolerance=0.5)
    warmup = result["warmup"]
    rates = warmup["chunk_rates"]
    assert warmup["converged"] is True and len(rates) >= 2
    assert warmup["steps"] == 16 * (1 + len(rates))  # epoch 0 + the adaptive epochs

    def within(a, b):
        return abs(b - a) / ((a + b) / 2) <= 0.5
    assert within(rates[-2], rates[-1])
    assert not any(within(a, b) for a, b in zip(rates[:-2], rates[1:-1]))  # it ended at the first agreement
    assert warmup["rule"] == "until two successive chunks within 0.5 (at most 120 s)"

    _, bounded, _ = run_ok(build, *GRAPH, "--window-images", 2048, "--max-warmup-seconds", 0, env_extra=SMALL)
    assert bounded["warmup"]["converged"] is False and bounded["warmup"]["chunk_rates"] == []
    assert bounded["warmup"]["steps"] == 16 and bounded["status"] == "ok"


def test_steps_given_override_the_rule(build):
    rc, result, _ = run_ok(build, *GRAPH, "--warmup-steps", 20, "--steps", 33, "--window-images", 99840,
                           "--window-seconds", 5, env_extra=SMALL)
    assert rc == 0
    w = check_window(result)
    assert w["rule"] == "fixed: 33 steps" and w["steps"] == 48  # 3 whole epochs of 16 hold 33 steps
    assert result["warmup"]["rule"] == "fixed: 20 steps" and result["warmup"]["steps"] == 32
    assert (result["settings"]["steps"], result["settings"]["warmup_steps"]) == (33, 20)


def test_one_batch_modes_time_the_rule_in_50_step_chunks(build):
    # pool1/default: the dataset is one batch, an epoch one step; chunks are 50 steps.
    rc, result, err = run_ok(build, "--benchmark", "throughput", "--batch", 128, "--mode", "pool1",
                             "--window-images", 12800, "--steady-tolerance", 0.5, env_extra={"KIT_FAKE_EPOCH_MS": "3,1"})
    assert rc == 0, err[-3000:]
    w = check_window(result, tolerance=0.5)
    assert (w["steps"], w["chunk_steps"], len(w["chunk_seconds"])) == (100, 50, 2)
    assert result["images"] == 12800
    warmup = result["warmup"]
    assert warmup["steps"] == 1 + 50 * len(warmup["chunk_rates"]) and warmup["converged"] is True
    # loss_warmup is the last warm-up epoch's loss (the fake's loss after epoch k: 2.3 / (k + 1)).
    assert result["loss_warmup"] == pytest.approx(2.3 / warmup["steps"])
    # Fixed counts: the chunk is the largest divisor of S not over 50.
    _, fixed, _ = run_ok(build, "--benchmark", "throughput", "--batch", 8, "--mode", "default", "--steps", 78)
    assert (fixed["window"]["chunk_steps"], len(fixed["window"]["chunk_seconds"])) == (39, 2)
    check_window(fixed)


# ------------------------------------------------------------ opennn_figures beside the naive one

def figures_of(result):
    f, inputs = result["opennn_figures"], result["settings"]["opennn_figures"]
    assert list(f) == ["naive_ips", "executed_steps", "executed_ips", "runner_style_ips"]
    return f, inputs


def test_opennn_figures_set_executed_steps_beside_a_refused_graph_figure(build):
    # 2,200 images at 128: 17 steps an epoch, two 8-step groups + 1 eager step. The "short" audit:
    # one group an epoch replays the one-step warm-up graph -> 8 + 1 + 1 = 10 steps ran of 17.
    rc, result, _ = run_ok(build, *GRAPH, "--warmup-steps", 17, "--window-images", 4352,
                           env_extra={"KIT_FAKE_DATASET_IMAGES": "2200", "KIT_FAKE_GRAPH": "short"})
    assert rc == 1 and result["status"] == "error" and "smaller than a full 8-step group" in result["error"]
    f, inputs = figures_of(result)
    window = result["window_seconds"]
    assert result["settings"]["epoch_plan"]["eager_tail_steps_per_epoch"] == 1
    assert result["settings"]["cuda_graph_audit"]["timed_graph_steps_estimate"] == 2 * 9
    assert f["executed_steps"] == 2 * 9 + 2 * 1 == 20
    assert f["naive_ips"] == pytest.approx(34 * 128 / window) == result["images_per_second"]
    assert f["executed_ips"] == pytest.approx(20 * 128 / window)
    assert inputs["train_epochs"] == 3 and inputs["dataset_images"] == 2200
    # opennn_resnet50_speed.cpp: long(double(samples) / (total_s / epochs)), the same operations.
    assert f["runner_style_ips"] == int(2200 / (inputs["train_seconds"] / 3))
    assert inputs["train_seconds"] == result["settings"]["train_seconds"] > window
    assert "timed_graph_steps_estimate + timed_epochs x eager_tail_steps_per_epoch" in inputs["executed_steps"]
    check_window(result)


def test_opennn_figures_on_an_ok_run_count_every_step(build):
    rc, result, _ = run_ok(build, *GRAPH, "--warmup-steps", 1, "--steps", 1,
                           env_extra={"KIT_FAKE_DATASET_IMAGES": "2200"})
    assert rc == 0
    f, _ = figures_of(result)
    assert f["executed_steps"] == 17 and f["executed_ips"] == pytest.approx(result["images_per_second"])
    rc, result, _ = run_ok(build, "--benchmark", "throughput", "--batch", 128, "--mode", "resident",
                           "--warmup-steps", 1, "--steps", 1, env_extra={"KIT_FAKE_DATASET_IMAGES": "2200"})
    assert rc == 0 and figures_of(result)[0]["executed_steps"] == 17


# ------------------------------------------------------------------------------ --image-size

def test_imagenet_side_for_the_one_batch_modes(build):
    rc, result, err = run_ok(build, "--benchmark", "maxbatch", "--batch", 3, "--mode", "pool1", "--image-size", 224,
                             "--seed", 2)
    assert rc == 0, err[-3000:]
    data = result["settings"]["data"]
    assert data["shape_hwc"] == [224, 224, 3] and data["images_checked"] == 3 and data["image_size"] == 224
    assert data["digest"] == fnv1a64(*splitmix64_batch(3, 2, side=224))
    assert result["settings"]["image_size"] == 224 and "window" not in result


@pytest.mark.parametrize("argv, message", [
    (["--mode", "graph", "--benchmark", "throughput", "--image-size", 224],
     "opennn-graph runs --image-size 32 only: at 224 its GPU-resident dataset of 50000 images would need about 30 GB "
     "of GPU memory"),
    (["--mode", "resident", "--benchmark", "throughput", "--image-size", 64], "opennn-resident runs --image-size 32 only"),
    (["--mode", "pool1", "--benchmark", "maxbatch", "--image-size", 64],
     "opennn-pool1 runs --image-size 32 (CIFAR-10's geometry) or 224 (ImageNet's), got 64"),
    (["--mode", "default", "--benchmark", "maxbatch", "--image-size", 224, "--dataset", "cifar10", "--data-dir", "/x"],
     "--dataset cifar10 has 32x32 images: --image-size 224 needs --dataset synthetic"),
])
def test_sides_an_engine_cannot_run_are_refused_in_one_line(build, argv, message):
    rc, result, _ = run_ok(build, "--batch", 4, *argv)
    assert rc == 1 and result["status"] == "error" and result["error"].startswith(message)
    assert "\n" not in result["error"]


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


def splitmix64_batch(n: int, seed: int, side: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """The documented synthetic generator, independently in Python."""
    mask = (1 << 64) - 1
    size = n * side * side * 3
    state, out = seed & mask, bytearray()
    while len(out) < size:
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out += (z ^ (z >> 31)).to_bytes(8, "little")
    images = np.frombuffer(bytes(out[:size]), dtype=np.uint8)
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
