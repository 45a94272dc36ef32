"""Flags that cannot apply are refused in one line, never silently recorded as if used (`--gpu` on
the CPU, `--gpu-request` with the local runtime or on the CPU); a results folder name the file system
cannot hold is one line, not an OSError traceback. Real CLI; each refusal writes nothing."""
from __future__ import annotations

import subprocess
import sys

import pytest

ENTRY = [sys.executable, "-c", "from kitctl.entry import main; main()"]


def refused(args, match, results=None):
    p = subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert match in p.stderr, p.stderr
    if results is not None:
        assert not results.exists() or not list(results.iterdir())


@pytest.mark.parametrize("bench", ["maxbatch", "throughput"])
@pytest.mark.parametrize("flags, match", [
    (("--device", "cpu", "--runtime", "local", "--gpu", "0"), "--gpu 0 applies to --device cuda"),
    (("--device", "cpu", "--runtime", "docker", "--gpu", "0"), "--gpu 0 applies to --device cuda"),
    (("--device", "cuda", "--runtime", "local", "--gpu-request", "cdi"), "does not apply with --runtime local"),
    (("--device", "cpu", "--runtime", "docker", "--gpu-request", "toolkit"), "does not apply with --device cpu"),
])
def test_a_flag_that_does_not_apply_is_refused(tmp_path, bench, flags, match):
    refused(["run", bench, *flags, "--results-dir", str(tmp_path / "r")], match, tmp_path / "r")


@pytest.mark.parametrize("args", [
    ["run", "maxbatch", "--device", "cpu", "--runtime", "local", "--results-dir"],
    ["run", "throughput", "--device", "cpu", "--runtime", "local", "--results-dir"],
    ["results", "list"],
])
def test_a_results_folder_name_too_long_is_one_line(tmp_path, args):
    long = tmp_path / ("a" * 256) / "b"
    refused([*args, str(long)], "cannot ")
    assert not (tmp_path / ("a" * 10)).exists() and list(tmp_path.iterdir()) == []
