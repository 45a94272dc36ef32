"""`kitctl data make` with real processes: the corpus appears whole or not at all (a temporary folder renamed
into place under a lock), two makes into one --out never both succeed, and every process of a make ends with
kitctl however kitctl ends (SIGINT, SIGTERM, SIGHUP, kill -9). The corpus's sources are small generated PNGs
in a folder (KITCTL_CORPUS_SOURCES), so no scikit-image is needed."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sources")
    rng = np.random.default_rng(0)
    for name in ("camera.png", "coffee.png", "chelsea.png"):
        Image.fromarray(rng.integers(0, 256, (200, 260, 3), dtype=np.uint8)).save(d / name)
    (d / "SKIMAGE_VERSION").write_text("generated for the tests")
    return d


def _env(sources: Path) -> dict[str, str]:
    return {**os.environ, "KITCTL_CORPUS_SOURCES": str(sources)}


def make(sources: Path, out: Path, *args, env=None) -> subprocess.Popen:
    return subprocess.Popen([*ENTRY, "data", "make", "--out", str(out), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or _env(sources))


def processes_of(out: Path) -> list[str]:
    """Every live process whose command line names `out` (the maker and its forked pool workers)."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next((ln for ln in (p / "status").read_text().splitlines() if ln.startswith("State:")), "")
        except OSError:
            continue
        if str(out) in cmd and "zombie" not in state:
            found.append(f"{p.name}: {cmd}")
    return found


def wait_for_workers(out: Path, n: int, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if len(processes_of(out)) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"the make never had {n} processes: {processes_of(out)}")


def wait_gone(out: Path, timeout: float = 15) -> list[str]:
    end = time.monotonic() + timeout
    while time.monotonic() < end and processes_of(out):
        time.sleep(0.1)
    return processes_of(out)


def check_whole(out: Path) -> dict:
    """The manifest names exactly the files there, each of its recorded size and hash."""
    m = json.loads((out / "manifest.json").read_text())
    on_disk = sorted(str(p.relative_to(out)) for p in (out / "train").rglob("*.jpg"))
    assert on_disk == sorted(f["file"] for f in m["files"]) and len(on_disk) == m["images"]
    for f in m["files"]:
        data = (out / f["file"]).read_bytes()
        assert len(data) == f["bytes"] and hashlib.sha256(data).hexdigest() == f["sha256"], f["file"]
    return m


def test_two_makes_into_one_folder_never_both_succeed(sources, tmp_path):
    out = tmp_path / "corpus"
    a = make(sources, out, "--images", 60, "--classes", 3, "--workers", 2, "--seed", 0)
    # a holds the folder's lock once its work folder is there (kitctl's own process, seen earlier,
    # has not yet started the maker: b could take the lock first)
    end = time.monotonic() + 120
    while not list(tmp_path.glob(".corpus.making-*")) and a.poll() is None and time.monotonic() < end:
        time.sleep(0.05)
    b = make(sources, out, "--images", 40, "--classes", 3, "--workers", 2, "--seed", 1)
    (_, ea), (_, eb) = a.communicate(timeout=300), b.communicate(timeout=300)
    codes = sorted([a.returncode, b.returncode])
    assert codes == [0, 2], (a.returncode, ea, b.returncode, eb)
    loser = eb if b.returncode else ea
    assert len(loser.strip().splitlines()) == 1 and ("another `data make`" in loser or "already holds" in loser)
    m = check_whole(out)
    assert (m["seed"], m["images"]) == (0, 60)
    assert not list(tmp_path.glob(".corpus.making-*"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_the_make_and_all_its_workers(sources, tmp_path, sig):
    out = tmp_path / "corpus"
    p = make(sources, out, "--images", 4000, "--classes", 3, "--workers", 2)
    wait_for_workers(out, 3)  # the maker and both pool workers are running
    p.send_signal(sig)
    _, errs = p.communicate(timeout=60)
    assert p.returncode == 130, errs
    lines = errs.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0] and "Traceback" not in errs, errs
    assert wait_gone(out) == []
    assert not out.exists() and not list(tmp_path.glob(".corpus.making-*"))


def test_kill_9_of_kitctl_leaves_nothing_running(sources, tmp_path):
    out = tmp_path / "corpus"
    p = make(sources, out, "--images", 4000, "--classes", 3, "--workers", 2)
    wait_for_workers(out, 3)
    p.kill()
    p.communicate(timeout=30)
    assert wait_gone(out) == [], "the make went on after kitctl was killed"
    assert not out.exists()
    # What the killed make left (its hidden work folder) is removed by the next make into the same folder.
    p = make(sources, out, "--images", 6, "--classes", 3, "--workers", 1)
    _, errs = p.communicate(timeout=120)
    assert p.returncode == 0, errs
    check_whole(out)
    assert not list(tmp_path.glob(".corpus.making-*"))


def test_limits_and_a_missing_dependency_are_one_line(sources, tmp_path):
    p = make(sources, tmp_path / "c", "--images", 5, "--workers", 100000)
    _, errs = p.communicate(timeout=60)
    assert p.returncode == 2 and "--workers 100000" in errs and "per core" in errs, errs
    assert len(errs.strip().splitlines()) == 1 and not (tmp_path / "c").exists()
    # No scikit-image (a stand-in package that fails to import, first on the path) and no copies of its photos.
    stub = tmp_path / "stub" / "skimage"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('no scikit-image here')\n")
    env = {k: v for k, v in os.environ.items() if k != "KITCTL_CORPUS_SOURCES"}
    env["PYTHONPATH"] = f"{tmp_path / 'stub'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    p = make(sources, tmp_path / "c", "--images", 5, "--workers", 2, env=env)
    _, errs = p.communicate(timeout=60)
    assert p.returncode == 2, errs
    assert len(errs.strip().splitlines()) == 1 and "pip install scikit-image" in errs, errs
    assert "BrokenProcessPool" not in errs and not (tmp_path / "c").exists()


def test_a_read_only_parent_is_refused_up_front(sources, tmp_path):
    if os.geteuid() == 0:
        # root writes anywhere: a read-only bind would need privileges; a file in the way is the same check
        blocker = tmp_path / "file"
        blocker.write_text("x")
        p = make(sources, blocker / "corpus", "--images", 5)
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        p = make(sources, ro / "corpus", "--images", 5)
    _, errs = p.communicate(timeout=60)
    assert p.returncode == 2 and len(errs.strip().splitlines()) == 1 and "not a writable folder" in errs, errs


def test_kill_9_of_kitctl_ends_a_dataload_trial_and_its_loader_workers(sources, tmp_path):
    from conftest import need_module

    need_module("torch", "the pytorch-dataloader loader")
    corpus = tmp_path / "corpus"
    p = make(sources, corpus, "--images", 12, "--classes", 3, "--workers", 1)
    assert p.communicate(timeout=120)[0] is not None and p.returncode == 0
    ds = tmp_path / "ds"
    run = subprocess.Popen([*ENTRY, "run", "dataload", "--corpus", str(corpus), "--data-dir", str(ds), "--loaders",
                            "pytorch-dataloader", "--side", "64", "--workers", "2", "--runs", "1", "--epochs", "100000",
                            "--batch", "4", "--results-dir", str(tmp_path / "r")], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=_env(sources))
    try:
        end = time.monotonic() + 240
        # the trial (its --dataset is under ds) and its 2 forked loader workers, measuring
        while sum("trial.py dataload" in c for c in processes_of(ds)) < 3:
            assert time.monotonic() < end and run.poll() is None, (processes_of(ds), run.poll())
            time.sleep(0.2)
        run.kill()
        run.communicate(timeout=30)
        assert wait_gone(ds) == [], "the trial or its loader workers went on after kitctl was killed"
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
