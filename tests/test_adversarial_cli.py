"""Faults injected into real runs (issue 14 item 5): signals at any moment, two writers of one
partial, a full disk, a resumed Docker run's image, the partial's file mode.

Each test starts the real console entry point (`kitctl.entry`, which installs the signal handlers
before it imports the CLI) with the local runtime and the real PyTorch trial on the CPU, or the
Docker runtime with the CI image.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kitctl import benchmarks
from kitctl.run.resume import check_resumed
from kitctl.core.artifact import PARTIAL_SUFFIX, load, open_for_resume
from conftest import host_lacks, unavailable  # noqa: E402

ENTRY = [sys.executable, "-c", "from kitctl.entry import main; main()"]
CPU = ["run", "maxbatch", "--device", "cpu", "--runtime", "local"]


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([*ENTRY, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200", **(env or {})})


def kitctl(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def error_lines(stderr: str) -> list[str]:
    """The run's errors on stderr: lines that start "kitctl: ". The device line, the run's id and the
    progress go to stderr too, before them; an error is one line, and the last one."""
    lines = stderr.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("kitctl: ")]
    assert not errors or lines[-1] == errors[-1], stderr[-2000:]
    return errors


def handlers_installed(pid: int, timeout: float = 10.0) -> bool:
    """Wait until the process catches SIGTERM and SIGHUP (/proc/PID/status SigCgt): before that,
    Python itself is starting and no program can handle a signal."""
    want = (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGHUP - 1))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False
        caught = int(next(ln for ln in status.splitlines() if ln.startswith("SigCgt:")).split()[1], 16)
        if caught & want == want:
            return True
        time.sleep(0.002)
    return False


def assert_nothing_or_a_resumable_partial(results: Path) -> str:
    """The results folder holds nothing, or exactly one whole, schema-valid, resumable partial."""
    files = sorted(results.iterdir()) if results.exists() else []
    assert not [f for f in files if f.name.endswith((".tmp", ".lock"))], files
    assert all(f.stat().st_size > 0 for f in files), [(f.name, f.stat().st_size) for f in files]
    if not files:
        return "nothing"
    (partial,) = files
    assert partial.name.endswith(PARTIAL_SUFFIX), files
    store, doc = open_for_resume(partial)  # schema-valid, not complete, lockable
    try:
        assert doc["state"] == "interrupted", doc["state"]
        check_resumed(benchmarks.get(doc["benchmark"]).config, doc)  # what `--resume` checks before it writes
    finally:
        store.release()
    return "partial"


# -- signals ------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_every_signal_at_every_moment_exits_130_with_a_partial_or_nothing(tmp_path, sig):
    """After 0.05 s the CLI is still importing; later the run is set up, then candidates run.
    Every time: exit 130, one line, no traceback, and a resumable partial or nothing at all."""
    seen = []
    for delay in (0.05, 0.2, 0.5, 1.0, 2.0, "mid-run"):
        results = tmp_path / f"r{delay}"
        proc = start(*CPU, "--start-batch", "2", "--max-batch", "8", "--timeout", "120",
                     "--results-dir", str(results))
        try:
            handlers_installed(proc.pid)  # (if never, the signal still goes: the exit code tells)
            if delay == "mid-run":  # on a loaded machine 2 s may still be setup: also once mid-run
                while proc.poll() is None and not list(results.glob("*" + PARTIAL_SUFFIX)):
                    time.sleep(0.05)
                time.sleep(0.5)
            else:
                time.sleep(delay)
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, (delay, proc.returncode, err[-2000:])
        assert "Traceback" not in err and "Traceback" not in out, (delay, err[-2000:])
        lines = error_lines(err)
        assert len(lines) == 1 and lines[0].startswith(f"kitctl: interrupted ({sig.name})"), (delay, err)
        left = assert_nothing_or_a_resumable_partial(results)
        assert ("--resume" in lines[0]) == (left == "partial"), (delay, lines[0], left)
        seen.append(left)
    assert seen[-1] == "partial", seen  # the mid-run signal did land mid-run


# -- one writer per partial ------------------------------------------------------------------

def test_a_running_run_holds_its_partial_and_a_second_writer_is_refused(tmp_path):
    """A new run locks its own partial from its first byte to its final; `--resume` of it
    meanwhile is refused in one line, and the run then finishes alone: one final, no partial."""
    proc = start(*CPU, "--start-batch", "2", "--max-batch", "4", "--timeout", "300", "--results-dir", str(tmp_path))
    try:
        deadline = time.monotonic() + 300
        partial = None
        while time.monotonic() < deadline and partial is None and proc.poll() is None:
            partial = next(iter(tmp_path.glob("*" + PARTIAL_SUFFIX)), None)
            time.sleep(0.05)
        assert partial is not None, "the run wrote no partial"
        p = kitctl("run", "maxbatch", "--resume", str(partial), timeout=120)
        assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and "being written by another kitctl" in lines[0], p.stderr
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    names = sorted(f.name for f in tmp_path.iterdir())
    assert names == [partial.name.replace(PARTIAL_SUFFIX, ".json")], names  # no partial, no lock, no temp


# -- the file's mode ----------------------------------------------------------------------------

def test_a_partial_is_0644_and_the_final_0444(tmp_path):
    from test_cli import local_partial

    partial = local_partial(tmp_path, trials=((2, "ok"),))
    assert stat.S_IMODE(partial.stat().st_mode) == 0o644
    store, doc = open_for_resume(partial)
    store.save_partial(doc)  # a save replaces the file: the mode must survive it
    assert stat.S_IMODE(partial.stat().st_mode) == 0o644
    doc["state"] = "complete"
    final = store.finalize(doc)
    assert stat.S_IMODE(final.stat().st_mode) == 0o444


# -- a full disk ------------------------------------------------------------------------------

@pytest.fixture()
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs (root only; skipped where mount is not allowed), unmounted afterwards."""
    d = tmp_path / "tiny"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        if os.geteuid() != 0:
            host_lacks("root", f"mounting a tmpfs needs root: {r.stderr.strip() or r.returncode}")
        unavailable(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def fill(disk: Path, leave_pages: int) -> None:
    """Fill the tmpfs but `leave_pages` pages of 4 KiB."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:  # ENOSPC: full
            pass
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave_pages * 4096))


def test_disk_full_mid_run_keeps_the_partial_and_says_how_to_resume(tiny_disk):
    results = tiny_disk / "results"
    results.mkdir()
    fill(tiny_disk, leave_pages=3)  # the first saves fit; a partial and its replacement of 2+ pages do not
    p = kitctl(*CPU, "--start-batch", "2", "--max-batch", "64", "--timeout", "300", "--results-dir", str(results))
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "No space left on device" in lines[0], p.stderr
    (partial,) = results.glob("*" + PARTIAL_SUFFIX)
    assert f"--resume {partial}" in lines[0], lines[0]
    assert sorted(f.name for f in results.iterdir()) == [partial.name]  # no temp file, no lock left
    doc = load(partial)
    assert doc["results"][0]["trials"], "the run should have recorded candidates before the disk filled"
    check_resumed(benchmarks.get("maxbatch").config, doc)


def test_disk_full_before_the_first_byte_writes_nothing(tiny_disk):
    results = tiny_disk / "results"
    results.mkdir()
    fill(tiny_disk, leave_pages=0)
    p = kitctl(*CPU, "--start-batch", "2", "--max-batch", "2", "--timeout", "300", "--results-dir", str(results))
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "No space left on device" in lines[0] and "nothing written" in lines[0], p.stderr
    assert list(results.iterdir()) == []


# -- Docker: a resume runs in the image its run started in -------------------------------------

@pytest.mark.docker
def test_docker_resume_uses_the_image_the_run_started_in(client, image, tmp_path):
    """Started under KITCTL_IMAGE_VARIANT=cpu-ci, resumed without it: the resume must not pick
    compose.yaml's default image, nor rewrite the partial's provenance."""
    from conftest import VARIANT

    args = ["run", "maxbatch", "--device", "cpu", "--runtime", "docker", "--start-batch", "2", "--max-batch", "4",
            "--timeout", "300", "--results-dir", str(tmp_path)]
    proc = start(*args, env={"KITCTL_IMAGE_VARIANT": VARIANT})
    try:
        partial, deadline = None, time.monotonic() + 600
        while time.monotonic() < deadline and partial is None and proc.poll() is None:
            for f in tmp_path.glob("*" + PARTIAL_SUFFIX):
                try:
                    doc = json.loads(f.read_text())
                except (OSError, json.JSONDecodeError):
                    continue
                if doc["results"] and len(doc["results"][0]["trials"]) == 1:
                    partial = f
            time.sleep(0.2)
        assert partial is not None, "no candidate finished in time"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    before = load(partial)["engines"]["pytorch-eager"]["provenance"]
    assert before["image"] == image and before["id"].startswith("sha256:")

    env = {k: v for k, v in os.environ.items() if k != "KITCTL_IMAGE_VARIANT"}
    p = subprocess.run([*ENTRY, "run", "maxbatch", "--resume", str(partial)], capture_output=True, text=True,
                       timeout=900, env=env)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    final = load(partial.with_name(partial.name.replace(PARTIAL_SUFFIX, ".json")))
    assert final["engines"]["pytorch-eager"]["provenance"] == before
    assert [t["batch"] for t in final["results"][0]["trials"]] == [2, 4]


@pytest.mark.docker
def test_docker_resume_whose_image_is_gone_is_refused(client, image, tmp_path):
    from test_cli import local_partial

    def docker_run(doc):
        doc["runtime"] = {"name": "docker"}
        doc["engines"]["pytorch-eager"]["provenance"] = {"runtime": "docker", "image": image,
                                                         "id": "sha256:" + "0" * 64}

    partial = local_partial(tmp_path, trials=((2, "ok"),), max_batch=4, edit=docker_run)
    content = partial.read_bytes()
    p = kitctl("run", "maxbatch", "--resume", str(partial), env={"KITCTL_IMAGE_VARIANT": "cpu-ci"}, timeout=300)
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "no longer present" in lines[0] and "sha256:000" in lines[0], p.stderr
    assert partial.read_bytes() == content


def test_a_signal_python_cannot_raise_is_not_printed_and_is_raised_again(tmp_path):
    """The handler can run inside a callback whose exceptions Python drops and reports as "Exception
    ignored in …" with a traceback (seen: logging's after-fork hook while a trial was spawned). That
    report is kept quiet; the signal is recorded, and check() raises it at the next milestone."""
    code = (
        "import os, signal, sys\n"
        "from kitctl.core import signals\n"
        "signals.install()\n"
        "class Finalised:\n"
        "    def __del__(self):\n"
        "        os.kill(os.getpid(), signal.SIGHUP)\n"
        "        sum(range(1000))  # the handler runs here: its exception cannot propagate from __del__\n"
        "Finalised()\n"
        "print('after', flush=True)\n"
        "try:\n"
        "    signals.check()\n"
        "except signals.Interrupted as exc:\n"
        "    print('raised again:', exc.args[0])\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "host")})
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["after", "raised again: SIGHUP"], p.stdout
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr
