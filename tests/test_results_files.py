"""Only regular files are read under results: `report`, `compare` and `results list` never follow a
`*.json` symlink out of the folder, never open a FIFO or a device (a FIFO hung them; a symlink to
/dev/zero made `report` read until the OOM killer came), and cap a file's size. JSON files that are
not results are listed apart. A "running" partial whose kitctl is gone says so. Real CLI, real
files (FIFOs, symlinks, a held lock in a real second process)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kitctl.core import fileio

DATA = Path(__file__).resolve().parent / "data"
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
EAGER = DATA / "maxbatch-resnet50-synthetic-20261129T195932Z.json"
SAMPLE = DATA / "maxbatch-sample.json"


def kitctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    # A hang (the FIFO) is the defect: the timeout turns it into a failure, not a stuck suite.
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=timeout)


def one_line(p: subprocess.CompletedProcess, match: str) -> None:
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert match in p.stderr, p.stderr


@pytest.fixture
def folder(tmp_path) -> Path:
    d = tmp_path / "results"
    d.mkdir()
    shutil.copy(EAGER, d / EAGER.name)
    os.mkfifo(d / "fifo.json")
    (d / "zero.json").symlink_to("/dev/zero")
    outside = tmp_path / "secret.json"
    shutil.copy(SAMPLE, outside)  # a valid artifact, but not in the folder
    (d / "out.json").symlink_to(outside)
    (d / "tool.json").write_text('{"tool": "something else"}')
    return d


def test_results_list_skips_fifos_devices_and_symlinks_out_apart(folder):
    p = kitctl("results", "list", str(folder))
    assert p.returncode == 0, p.stderr
    table, _, apart = p.stdout.partition("not results (4):")
    assert "pytorch-eager fp32: 8,832" in table
    for name in ("fifo.json", "zero.json", "out.json", "tool.json"):
        assert name not in table and name in apart, p.stdout
    assert "out.json: skipped, a symlink out of the folder" in apart
    assert "fifo.json: skipped, not a regular file" in apart
    assert "tool.json: other JSON" in apart
    assert "SAMPLE GPU" not in p.stdout  # the artifact the symlink points to was not read


@pytest.mark.parametrize("name, match", [("fifo.json", "a FIFO, not a regular file"),
                                         ("zero.json", "a character device, not a regular file")])
def test_report_and_compare_refuse_what_is_no_regular_file(folder, name, match):
    one_line(kitctl("report", str(folder / name)), match)
    one_line(kitctl("compare", str(folder / EAGER.name), str(folder / name)), match)


def test_resume_refuses_a_fifo_in_one_line(tmp_path):
    fifo = tmp_path / "x.partial.json"
    os.mkfifo(fifo)
    one_line(kitctl("run", "maxbatch", "--resume", str(fifo)), "not a regular file")


def test_a_file_above_the_cap_is_not_read(tmp_path, monkeypatch):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    with pytest.raises(fileio.NotRegularFile, match="above the"):
        fileio.read_regular(big, cap=1024)
    assert fileio.read_regular(big, cap=4096) == b" " * 2048


def test_a_sparse_huge_file_is_refused_by_the_cli(tmp_path):
    big = tmp_path / "big.json"
    with big.open("wb") as f:  # sparse: costs no disk
        f.truncate(fileio.MAX_RESULT_BYTES + 1)
    one_line(kitctl("report", str(big)), "above the 64 MiB")


HOLD = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(120)
""")


def test_a_running_partial_whose_writer_is_gone_says_so(tmp_path):
    doc = json.loads(SAMPLE.read_text())
    doc.update(state="running", finished_utc=None)
    partial = tmp_path / "maxbatch-resnet50-synthetic-20261129T000000Z.partial.json"
    partial.write_text(json.dumps(doc))
    lock = Path(str(partial) + ".lock")
    lock.touch()  # left behind by a kitctl killed with -9: the file stays, its flock went with the process
    p = kitctl("results", "list", str(tmp_path))
    assert "crashed: no kitctl writes it" in p.stdout, p.stdout

    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        p = kitctl("results", "list", str(tmp_path))
        assert "running (partial)" in p.stdout and "crashed" not in p.stdout, p.stdout
    finally:
        holder.kill()
        holder.wait()
