"""The local runtime's compiled trials (OpenNN): found under build/<trial>/ or
KITCTL_<TRIAL>_PREFIX, refused in one line when not built, run as a program with the
protocol's flags. The real OpenNN trial needs GCC 13 and CUDA (not here): a small shell
script stands in for the compiled program, named as such."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kitctl.runtimes.factory import make_runtime
from kitctl.errors import Fail
from kitctl.core.engines import ENGINES
from kitctl.core.outcome import Status
from kitctl.core.protocol import TrialRequest
from kitctl.runtimes.base import RuntimeUnavailable
from kitctl.runtimes.local import LocalRuntime

OPENNN = [ENGINES["opennn-pool1"], ENGINES["opennn-default"]]

# Stand-in for the compiled kit-opennn-trial: echoes its argv into a protocol result line.
STAND_IN = r"""#!/bin/sh
echo "opennn says hello on stdout"
printf 'KIT-RESULT {"protocol":1,"engine":"opennn-pool1","mode":"pool1","precision":"fp32",'
printf '"batch":4,"status":"ok","loss_warmup":2.3,"loss_final":2.2,"argv":"%s"}\n' "$*"
"""


@pytest.fixture
def prefix(tmp_path, monkeypatch) -> Path:
    p = tmp_path / "opennn"
    monkeypatch.setenv("KITCTL_OPENNN_PREFIX", str(p))
    return p


def install_stand_in(prefix: Path) -> Path:
    exe = prefix / "bin" / "kit-opennn-trial"
    exe.parent.mkdir(parents=True)
    exe.write_text(STAND_IN)
    exe.chmod(0o755)
    return exe


def test_missing_program_is_one_line_naming_the_build_script(prefix):
    with pytest.raises(RuntimeUnavailable) as e:
        LocalRuntime.check(OPENNN)
    msg = str(e.value)
    assert "\n" not in msg and str(prefix / "bin" / "kit-opennn-trial") in msg
    assert "images/opennn/build.sh" in msg and "KITCTL_OPENNN_PREFIX" in msg


def test_cli_runtime_choice_refuses_an_unbuilt_trial(prefix):
    with pytest.raises(Fail, match="no trial program"):
        make_runtime("local", OPENNN, "cuda", None, "r1", None, None, None, [])


def test_python_engines_need_no_program(prefix):
    LocalRuntime.check([ENGINES["pytorch-eager"], ENGINES["tensorflow-xla"]])


def test_a_non_executable_file_is_not_a_trial(prefix):
    exe = install_stand_in(prefix)
    exe.chmod(0o644)
    with pytest.raises(RuntimeUnavailable):
        LocalRuntime.check(OPENNN)


def test_built_program_runs_with_the_protocol_flags_and_its_build_is_described(prefix):
    exe = install_stand_in(prefix)
    info = prefix / "share" / "kit-opennn" / "build-info.json"
    info.parent.mkdir(parents=True)
    info.write_text(json.dumps({"opennn_commit": "5ffbaa62a47df8c224b466d78edc627c7053f421"}))
    LocalRuntime.check(OPENNN)
    rt = LocalRuntime()
    req = TrialRequest(engine="opennn-pool1", mode="pool1", benchmark="maxbatch", batch=4,
                       precision="fp32", device="cuda")
    assert rt.command(req)[0] == str(exe)
    out = rt.run(req, timeout_s=30)
    assert out.status is Status.OK, out
    assert "--mode pool1" in out.result["argv"] and "--batch 4" in out.result["argv"]
    d = rt.describe("opennn-pool1")
    assert d["trial"] == str(exe) and d["build_info"]["opennn_commit"].startswith("5ffbaa62")
    assert "interpreter" not in d  # no Python runs it


def test_default_prefix_is_the_checkouts_build_folder(monkeypatch):
    monkeypatch.delenv("KITCTL_OPENNN_PREFIX", raising=False)
    from kitctl.core.paths import kit_root, native_trial
    assert native_trial("opennn-pool1") == kit_root() / "build" / "opennn" / "bin" / "kit-opennn-trial"
    assert os.fspath(native_trial("opennn-default")) == os.fspath(native_trial("opennn-pool1"))


def test_doctor_says_whether_the_local_trial_is_built(prefix):
    from kitctl.doctor.base import Report
    from kitctl.doctor.checks import local_trial_checks

    rep = Report()
    local_trial_checks(rep)
    check = rep.get("local-trial:opennn")
    assert check.level == "skip" and "not built" in check.detail and "images/opennn/build.sh" in check.fix
    install_stand_in(prefix)
    info = prefix / "share" / "kit-opennn" / "build-info.json"
    info.parent.mkdir(parents=True)
    info.write_text(json.dumps({"opennn_commit": "5ffbaa62a47df8c224b466d78edc627c7053f421", "cuda_archs": "90",
                                "built_at": "2026-11-29T22:36:37Z"}))
    rep = Report()
    local_trial_checks(rep)
    check = rep.get("local-trial:opennn")
    assert check.level == "ok" and "commit 5ffbaa62a47d" in check.detail and "archs 90" in check.detail


# -- OpenNN's throughput path: opennn-graph (CUDA graphs) and opennn-resident (the control) ---

@pytest.mark.parametrize("name, mode", [("opennn-graph", "graph"), ("opennn-resident", "resident")])
def test_throughput_path_engines_are_modes_of_the_same_program(prefix, name, mode):
    from kitctl.images.compose import load_compose
    from kitctl.core.engines import IMPLEMENTED, parse_engines

    e = ENGINES[name]
    assert name in IMPLEMENTED and parse_engines(name) == [e]
    assert (e.trial, e.service, e.mode, e.native, e.family) == ("opennn", "opennn", mode, True, "OpenNN")
    assert load_compose().service_for_engine(name).name == "opennn"
    # One line each before anything starts: no max-batch (a dataset of many batches), no CPU.
    assert e.refuse("throughput", "cuda") is None
    assert e.refuse("maxbatch", "cuda") == f"engine {name} does not run the maxbatch benchmark"
    assert e.refuse("throughput", "cpu") == f"engine {name} cannot run on --device cpu"
    exe = install_stand_in(prefix)
    LocalRuntime.check([e])
    req = TrialRequest(engine=name, mode=mode, benchmark="throughput", batch=128, precision="bf16",
                       device="cuda", warmup_steps=10, steps=780)
    cmd = LocalRuntime().command(req)
    assert cmd[0] == str(exe)
    assert cmd[cmd.index("--mode") + 1] == mode and cmd[cmd.index("--steps") + 1] == "780"

