"""`kitctl doctor`'s checks one at a time: each is a named function over what the earlier ones found."""
from __future__ import annotations

from kitctl.doctor.base import Host, Report
from kitctl.doctor.checks import CHECKS, check_cuda, check_gpu_run


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
    assert names[0] == "check_compose" and names[-1] == "check_gpu_run" and len(set(names)) == len(names)
