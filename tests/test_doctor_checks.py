"""`kitctl doctor`'s checks one at a time: each is a named function over what the earlier ones found."""
from __future__ import annotations

from kitctl.doctor.base import Host, Report
from kitctl.doctor.checks import CHECKS, check_cpu_run, check_cuda, check_gpu_run


def host(client=None, **found) -> Host:
    return Host(Report(), None, 1024.0, 20.0, False, None, client, None, **found)


def test_the_verdict_alone_names_what_is_missing():
    ctx = host(docker_ok=True, nvidia_ok=True)
    check_gpu_run(ctx)
    c = ctx.rep.get("gpu-run")
    assert c.level == "error" and "no GPU through NVML" in c.detail and "no Docker daemon" not in c.detail


def test_the_driver_check_alone_reads_the_driver_an_earlier_check_found():
    rows = [{"image": "kitctl/x:cu13", "present": True, "unfit": None, "cuda_version": "13.0",
             "expected_cuda_version": "13.0"}]
    ctx = host(driver="550.54.15", rows=rows, client=object())
    check_cuda(ctx)
    c = ctx.rep.get("cuda:kitctl/x:cu13")
    assert c.level == "error" and "550.54.15" in c.detail and ctx.rep.runnable == []
    ctx = host(driver="580.65.06", rows=rows, client=object())
    check_cuda(ctx)
    assert ctx.rep.get("cuda:kitctl/x:cu13").ok and ctx.rep.runnable == ["kitctl/x:cu13"]


def test_every_check_is_a_named_function_in_order():
    names = [c.__name__ for c in CHECKS]
    assert names[0] == "check_compose" and names[-2:] == ["check_gpu_run", "check_cpu_run"] and len(set(names)) == len(names)


# -- the verdict first: a GPU run, and a CPU run ----------------------------------------------

def test_cpu_run_is_ready_with_this_interpreters_torch_and_says_its_cap():
    import sys

    from conftest import need_module

    torch = need_module("torch", "the CPU run's local framework")
    ctx = host(python=sys.executable)
    check_gpu_run(ctx)
    check_cpu_run(ctx)
    rep = ctx.rep
    assert rep.cpu_run and rep.get("cpu-run").ok and torch.__version__ in rep.cpu_how
    assert "default memory cap" in rep.cpu_how
    assert rep.verdict.startswith("GPU run: not ready because no Docker daemon, no GPU through NVML; CPU run: ready (")
    assert "\n" not in rep.verdict
    doc = rep.to_json()
    assert list(doc)[0] == "verdict" and doc["cpu_run"] is True and doc["gpu_run_why"] == rep.gpu_why


def test_cpu_run_without_torch_or_images_is_not_ready_and_says_why():
    ctx = host(python="/bin/false")  # an interpreter that cannot import torch
    check_gpu_run(ctx)
    check_cpu_run(ctx)
    rep = ctx.rep
    assert not rep.cpu_run and rep.get("cpu-run").level == "error" and rep.get("cpu-run").fix
    assert "CPU run: not ready because no torch in the local interpreter (/bin/false), no Docker daemon" in rep.verdict


def test_doctor_prints_the_verdict_first_and_json_is_one_document(tmp_path):
    """The real CLI, without a daemon (a socket that is not there)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join([str(root / "host"), os.environ.get("PYTHONPATH", "")])}
    entry = [sys.executable, "-c", "from kitctl.cli import main; main()"]
    p = subprocess.run([*entry, "doctor", "--no-probe", "--json"], capture_output=True, text=True, env=env,
                       timeout=300, cwd=tmp_path)
    doc = json.loads(p.stdout)  # the whole stdout is one JSON document
    assert p.returncode == doc["exit_code"]
    assert doc["verdict"].startswith("GPU run: ") and "; CPU run: " in doc["verdict"]
    assert doc["gpu_run"] is False and "no Docker daemon" in doc["gpu_run_why"]
    p = subprocess.run([*entry, "doctor", "--no-probe"], capture_output=True, text=True, env=env, timeout=300,
                       cwd=tmp_path)
    assert p.stdout.splitlines()[0] == doc["verdict"]
