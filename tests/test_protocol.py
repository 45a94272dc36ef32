"""Trial protocol v1 on the host: the KIT-RESULT parser, the trial argv, and `classify()`.

`classify` is the one rule every runtime uses to turn what it observed (a RawRun) into a
TrialOutcome; these tests build RawRuns by hand, exactly as a runtime would.
"""
from __future__ import annotations

import json

import pytest

from kitctl.core.outcome import KilledBy, MemoryPeaks, Status, TrialOutcome
from kitctl.core.protocol import PROTOCOL_VERSION, ResultParseError, TrialRequest, parse_result
from kitctl.runtimes.base import STDERR_TAIL_CHARS, RawRun, classify


def result(**over):
    r = {"protocol": 1, "engine": "pytorch-eager", "mode": "eager", "precision": "fp32", "batch": 64,
         "status": "ok", "loss_warmup": 2.41, "loss_final": 2.39, "parameters": 23528522,
         "step_seconds": 0.12, "framework_peak_mib": 5120.5, "versions": {"torch": "2.13.0"},
         "error": None}
    r.update(over)
    return r


def line(obj) -> str:
    return "KIT-RESULT " + (obj if isinstance(obj, str) else json.dumps(obj))


# -- parse_result -------------------------------------------------------------------------

def test_parses_the_result_among_diagnostics():
    stdout = "\n".join(["loading model", "warning: something", line(result(batch=7))]) + "\n"
    assert parse_result(stdout)["batch"] == 7


def test_several_result_lines_last_wins():
    stdout = "\n".join([line(result(batch=1)), "noise", line(result(batch=2)), line(result(batch=3))])
    assert parse_result(stdout)["batch"] == 3


def test_crlf_line_endings():
    assert parse_result("diag\r\n" + line(result(batch=9)) + "\r\n")["batch"] == 9


@pytest.mark.parametrize("stdout", [
    "",
    "\n\n",
    "garbage \x00\x01 binary ☃ and words\nmore garbage",
    "KIT-RESULT",  # prefix without the space
    "kit-result " + json.dumps(result()),  # wrong case
    " KIT-RESULT " + json.dumps(result()),  # not at the start of the line
    "KIT-RESULT: " + json.dumps(result()),
])
def test_no_result_line(stdout):
    with pytest.raises(ResultParseError, match="no KIT-RESULT line"):
        parse_result(stdout)


@pytest.mark.parametrize("payload", [
    json.dumps(result())[:40],  # killed mid-write
    '{"protocol": 1, "status": "ok"',
    "",
    "not json at all",
    "{'protocol': 1}",  # python repr, not JSON
])
def test_truncated_or_invalid_json(payload):
    with pytest.raises(ResultParseError, match="not valid JSON"):
        parse_result("diag\n" + line(payload))


def test_a_truncated_last_line_is_not_rescued_by_an_earlier_good_one():
    stdout = line(result(batch=1)) + "\n" + line(json.dumps(result(batch=2))[:30])
    with pytest.raises(ResultParseError):
        parse_result(stdout)


@pytest.mark.parametrize("payload", ["[1, 2, 3]", '"ok"', "42", "null", "true"])
def test_non_object_json(payload):
    with pytest.raises(ResultParseError, match="not a JSON object"):
        parse_result(line(payload))


@pytest.mark.parametrize("key", ["protocol", "engine", "mode", "precision", "batch", "status"])
def test_missing_required_key(key):
    r = result()
    del r[key]
    with pytest.raises(ResultParseError, match=f"lacks keys: {key}"):
        parse_result(line(r))


def test_missing_several_keys_are_all_named():
    with pytest.raises(ResultParseError) as ei:
        parse_result(line({"protocol": 1, "status": "ok"}))
    for k in ("engine", "mode", "precision", "batch"):
        assert k in str(ei.value)


@pytest.mark.parametrize("version", [0, 2, "1", None, 1.5])
def test_wrong_protocol_version(version):
    with pytest.raises(ResultParseError, match="protocol"):
        parse_result(line(result(protocol=version)))


def test_protocol_true_is_not_version_1():
    # JSON `true` is not the integer 1, although Python says True == 1.
    with pytest.raises(ResultParseError, match="protocol"):
        parse_result(line(result(protocol=True)))


def test_parse_errors_are_one_line():
    for stdout in ["", line("{"), line("[]"), line({"protocol": 1})]:
        with pytest.raises(ResultParseError) as ei:
            parse_result(stdout)
        assert "\n" not in str(ei.value)


def test_nan_result_line_is_classified_nonfinite():
    # Not strict JSON, but a trial of another engine may print it: the host must still say
    # `nonfinite` (and never `ok`) for it.
    stdout = ('KIT-RESULT {"protocol": 1, "engine": "e", "mode": "m", "precision": "fp32", '
              '"batch": 64, "status": "ok", "loss_warmup": NaN, "loss_final": Infinity}')
    o = classify(REQ, raw(stdout), MemoryPeaks(), over_budget=False, runtime="local")
    assert o.status is Status.NONFINITE


def test_protocol_version_constant():
    assert PROTOCOL_VERSION == 1


# -- TrialRequest.argv --------------------------------------------------------------------

def test_argv_minimal():
    req = TrialRequest(engine="pytorch-eager", mode="eager", benchmark="maxbatch", batch=256,
                       precision="bf16", device="cuda")
    assert req.argv() == ["--benchmark", "maxbatch", "--batch", "256", "--precision", "bf16",
                          "--mode", "eager", "--model", "resnet50", "--dataset", "synthetic",
                          "--device", "cuda", "--seed", "0"]


def test_argv_every_option():
    req = TrialRequest(engine="pytorch-compile", mode="compile", benchmark="throughput", batch=128,
                       precision="fp32", device="cpu", dataset="cifar10", data_dir="/data/cifar",
                       memory_budget_mib=15320.9, cudnn_benchmark=True, seed=3, warmup_steps=5,
                       steps=20, extra_args=("--x", "1"))
    argv = req.argv()
    pairs = dict(zip(argv[::2], argv[1::2]))
    assert pairs["--benchmark"] == "throughput"
    assert pairs["--dataset"] == "cifar10"
    assert pairs["--data-dir"] == "/data/cifar"
    assert pairs["--memory-budget-mib"] == "15320"  # whole MiB
    assert pairs["--seed"] == "3"
    assert "--cudnn-benchmark" in argv
    i = argv.index("--warmup-steps")
    assert argv[i + 1] == "5"
    assert argv[argv.index("--steps") + 1] == "20"
    assert argv[-2:] == ["--x", "1"]
    assert all(isinstance(a, str) for a in argv)


def test_argv_data_dir_override_for_a_container_mount():
    req = TrialRequest(engine="pytorch-eager", mode="eager", benchmark="maxbatch", batch=1,
                       precision="fp32", device="cuda", dataset="cifar10", data_dir="/home/me/cifar")
    argv = req.argv(data_dir="/data")
    assert argv[argv.index("--data-dir") + 1] == "/data"
    assert "/home/me/cifar" not in argv


def test_argv_omits_unset_options():
    req = TrialRequest(engine="pytorch-eager", mode="eager", benchmark="maxbatch", batch=1,
                       precision="fp32", device="cuda", memory_budget_mib=0)
    argv = req.argv()
    for flag in ("--data-dir", "--cudnn-benchmark", "--warmup-steps", "--steps"):
        assert flag not in argv
    # 0 is a value, not "unset"
    assert argv[argv.index("--memory-budget-mib") + 1] == "0"


# -- classify -----------------------------------------------------------------------------

REQ = TrialRequest(engine="pytorch-eager", mode="eager", benchmark="maxbatch", batch=64,
                   precision="fp32", device="cuda")


def raw(stdout="", *, exit_code=0, signal=None, killed_by=KilledBy.NONE, stderr="", elapsed=3.0, **kw):
    return RawRun(stdout=stdout, stderr=stderr, exit_code=exit_code, signal=signal, killed_by=killed_by,
                  elapsed_s=elapsed, **kw)


def run(r: RawRun, *, over_budget=False, peaks=None) -> TrialOutcome:
    return classify(REQ, r, peaks or MemoryPeaks(device_delta_mib=100.0), over_budget=over_budget,
                    runtime="local")


def test_ok():
    o = run(raw(line(result())))
    assert o.status is Status.OK and o.passed
    assert o.error is None
    assert o.batch == 64 and o.runtime == "local"
    assert o.peaks.framework_mib == 5120.5
    assert o.result["loss_final"] == 2.39


def test_deadline_kill_is_timeout_even_with_an_ok_line():
    o = run(raw(line(result()), exit_code=None, signal=9, killed_by=KilledBy.KIT_DEADLINE, elapsed=901))
    assert o.status is Status.TIMEOUT
    assert o.killed_by is KilledBy.KIT_DEADLINE
    assert "deadline" in o.error
    assert not o.status.is_memory_failure


def test_deadline_kill_without_output_is_timeout_not_crash():
    o = run(raw("", exit_code=None, signal=9, killed_by=KilledBy.KIT_DEADLINE))
    assert o.status is Status.TIMEOUT


def test_vram_gate_kill():
    o = run(raw("", exit_code=None, signal=9, killed_by=KilledBy.KIT_VRAM_GATE), over_budget=True)
    assert o.status is Status.VRAM_CAP_EXCEEDED
    assert o.status.is_memory_failure
    assert o.killed_by is KilledBy.KIT_VRAM_GATE


def test_vram_gate_kill_wins_over_an_ok_line():
    o = run(raw(line(result()), exit_code=None, signal=9, killed_by=KilledBy.KIT_VRAM_GATE), over_budget=True)
    assert o.status is Status.VRAM_CAP_EXCEEDED


def test_kit_kill_137_is_never_a_kernel_oom():
    # Docker reports exit 137 for a SIGKILL from anyone: the kit's own kills keep their reason.
    o = run(raw("", exit_code=137, killed_by=KilledBy.KIT_DEADLINE))
    assert o.status is Status.TIMEOUT
    assert o.status is not Status.HOST_OOM_KILLED


def test_kernel_oom_is_host_oom_killed():
    o = run(raw("", exit_code=137, killed_by=KilledBy.KERNEL_OOM))
    assert o.status is Status.HOST_OOM_KILLED
    assert o.status.is_memory_failure


def test_kernel_oom_even_with_a_result_line():
    o = run(raw(line(result()), exit_code=137, killed_by=KilledBy.KERNEL_OOM))
    assert o.status is Status.HOST_OOM_KILLED


def test_no_result_and_a_signal_is_crash():
    o = run(raw("some diagnostics\n", exit_code=None, signal=11, stderr="Segmentation fault"))
    assert o.status is Status.CRASH
    assert o.signal == 11
    assert "signal 11" in o.error
    assert "no KIT-RESULT line" in o.error
    assert o.stderr_tail == "Segmentation fault"


def test_no_result_and_an_exit_code_is_crash():
    o = run(raw("", exit_code=134))
    assert o.status is Status.CRASH
    assert "exit code 134" in o.error


def test_truncated_result_is_crash():
    o = run(raw(line(json.dumps(result())[:50]), exit_code=None, signal=6))
    assert o.status is Status.CRASH
    assert "not valid JSON" in o.error


def test_ok_status_but_exit_1_is_crash():
    o = run(raw(line(result()), exit_code=1))
    assert o.status is Status.CRASH
    assert "exited with code 1" in o.error


@pytest.mark.parametrize("warm,final", [(float("nan"), 2.0), (2.0, float("nan")), (None, 2.0),
                                        (2.0, None), (float("inf"), 2.0), (2.0, "2.0")])
def test_ok_but_nonfinite_loss(warm, final):
    o = run(raw(line(result(loss_warmup=warm, loss_final=final))))
    assert o.status is Status.NONFINITE
    assert "not finite" in o.error
    assert not o.status.is_memory_failure


def test_ok_but_missing_loss_keys_is_nonfinite():
    r = result()
    del r["loss_warmup"], r["loss_final"]
    assert run(raw(line(r))).status is Status.NONFINITE


def test_ok_but_over_budget_is_vram_cap_exceeded():
    o = run(raw(line(result())), over_budget=True)
    assert o.status is Status.VRAM_CAP_EXCEEDED
    assert o.killed_by is KilledBy.NONE  # the gate saw it too late to kill


@pytest.mark.parametrize("status", ["weird", "", None, 3, "vram_cap_exceeded", "timeout", "crash",
                                    "host_oom_killed", "OK"])
def test_unknown_or_host_only_status_is_crash(status):
    o = run(raw(line(result(status=status)), exit_code=1))
    assert o.status is Status.CRASH
    assert "unknown status" in o.error


def test_trial_oom():
    o = run(raw(line(result(status="oom", error="CUDA out of memory. Tried to allocate 2.00 GiB",
                            loss_warmup=None, loss_final=None, framework_peak_mib=15000.0)), exit_code=1))
    assert o.status is Status.OOM
    assert o.status.is_memory_failure
    assert "out of memory" in o.error
    assert o.peaks.framework_mib == 15000.0


def test_trial_oom_with_exit_0_is_still_oom():
    o = run(raw(line(result(status="oom", loss_warmup=None, loss_final=None)), exit_code=0))
    assert o.status is Status.OOM


def test_trial_error_and_nonfinite_statuses_pass_through():
    o = run(raw(line(result(status="error", error="ValueError: boom")), exit_code=1))
    assert o.status is Status.ERROR and o.error == "ValueError: boom"
    o = run(raw(line(result(status="nonfinite", error="loss is nan")), exit_code=1))
    assert o.status is Status.NONFINITE


def test_framework_peak_non_finite_is_dropped():
    o = run(raw(line(result(framework_peak_mib=None))))
    assert o.peaks.framework_mib is None
    o = run(raw(line(result(framework_peak_mib="big"))))
    assert o.peaks.framework_mib is None


def test_stderr_tail_is_bounded_and_keeps_the_end():
    err = "x" * 10_000 + "THE END"
    o = run(raw(line(result()), stderr=err))
    assert len(o.stderr_tail) == STDERR_TAIL_CHARS
    assert o.stderr_tail.endswith("THE END")


def test_host_rss_is_recorded():
    o = run(raw(line(result()), host_rss_mib=2048.0))
    assert o.peaks.host_rss_mib == 2048.0


def test_outcome_round_trips_through_json():
    o = run(raw(line(result()), exit_code=0), peaks=MemoryPeaks(device_delta_mib=5900.0, baseline_mib=512.0,
                                                                samples=900, sample_rate_hz=1500.0))
    d = json.loads(json.dumps(o.to_json()))
    back = TrialOutcome.from_json(d)
    assert back == o
