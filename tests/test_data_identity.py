"""A dataset belongs to its corpus, and what is read is what was written (docs/data-trust.md): real `kitctl data
make`, `kitctl run dataload` and the data trial on CPU, with small generated source photographs
(KITCTL_CORPUS_SOURCES) so no scikit-image is needed. Limits are refused up front in one line."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import host_lacks, need_module

ROOT = Path(__file__).resolve().parent.parent
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
TRIAL = ROOT / "trials" / "dataload" / "trial.py"
sys.path.insert(0, str(ROOT / "trials" / "dataload"))


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sources")
    rng = np.random.default_rng(0)
    for name in ("camera.png", "coffee.png"):
        Image.fromarray(rng.integers(0, 256, (160, 200, 3), dtype=np.uint8)).save(d / name)
    return d


def kitctl(sources: Path, *args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([*ENTRY, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "KITCTL_CORPUS_SOURCES": str(sources)})


@pytest.fixture(scope="module")
def corpora(sources, tmp_path_factory) -> tuple[Path, Path]:
    """Two corpora of the same count side by side (one parent, so one default data dir), other seeds."""
    parent = tmp_path_factory.mktemp("corpora")
    for name, seed in (("c12", 0), ("c12s1", 1)):
        p = kitctl(sources, "data", "make", "--out", parent / name, "--images", 12, "--classes", 3, "--seed", seed,
                   "--workers", 1)
        assert p.returncode == 0, p.stderr
    return parent / "c12", parent / "c12s1"


LOAD = ("--loaders", "pytorch-dataloader", "--encoding", "jpeg90", "--side", 64, "--workers", 1, "--runs", 1,
        "--epochs", 1, "--batch", 4, "--window-images", 1, "--window-seconds", 0.01)


def dataload(sources: Path, corpus: Path, res: Path, *extra) -> tuple[subprocess.CompletedProcess, dict | None]:
    p = kitctl(sources, "run", "dataload", "--corpus", corpus, *LOAD, *extra, "--results-dir", res)
    docs = sorted(res.glob("dataload-*.json"), key=lambda f: f.stat().st_mtime)
    return p, (json.loads(docs[-1].read_text()) if docs else None)


def test_the_host_and_the_writer_agree_on_a_corpus_identity(corpora):
    import corpus as corpus_mod

    from kitctl.benchmarks.data.corpus import corpus_identity, read_corpus_manifest

    a, b = (read_corpus_manifest(c) for c in corpora)
    assert corpus_identity(a) == corpus_mod.identity(a) == a["identity"]
    assert corpus_identity(a) != corpus_identity(b)  # same count, other seed: other images, other identity


def test_a_dataset_is_only_reused_for_its_own_corpus(sources, corpora, tmp_path):
    need_module("torch", "the pytorch-dataloader loader")
    a, b = corpora
    ds = tmp_path / "ds"
    p, doc_a = dataload(sources, a, tmp_path / "ra", "--data-dir", ds)
    assert p.returncode == 0, p.stderr + p.stdout
    [rec_a] = doc_a["datasets"]
    assert rec_a["reused"] is False and rec_a["corpus_seed"] == 0 and rec_a["corpus_identity"] in rec_a["path"]
    # The other corpus (same count, same format/encoding/side) gets its own dataset, not the first one's.
    p, doc_b = dataload(sources, b, tmp_path / "rb", "--data-dir", ds)
    assert p.returncode == 0, p.stderr + p.stdout
    [rec_b] = doc_b["datasets"]
    assert rec_b["reused"] is False and rec_b["path"] != rec_a["path"] and rec_b["corpus_seed"] == 1
    assert doc_b["configuration"]["corpus"] == str(b)
    # A second run of the first corpus reuses its dataset, checked, and the artifact lists it.
    p, doc_a2 = dataload(sources, a, tmp_path / "ra2", "--data-dir", ds)
    assert p.returncode == 0 and "reused" in p.stdout, p.stderr + p.stdout
    [rec] = doc_a2["datasets"]
    assert rec["reused"] is True and rec["path"] == rec_a["path"] and rec["corpus_identity"] == rec_a["corpus_identity"]
    # A folder holding another corpus's dataset under this corpus's name is refused, not measured.
    shutil.rmtree(rec_b["path"])
    shutil.copytree(rec_a["path"], rec_b["path"])
    p, doc = dataload(sources, b, tmp_path / "rb2", "--data-dir", ds)
    assert p.returncode == 1, p.stderr + p.stdout
    [cell] = doc["results"]
    assert cell["status"] == "failed" and "written from another corpus" in cell["reason"] and not cell["runs"]
    # A half-written (truncated) dataset is refused, naming its folder.
    victim = next(Path(rec_a["path"]).rglob("*.jpg"))
    victim.write_bytes(victim.read_bytes()[:100])
    p, doc = dataload(sources, a, tmp_path / "ra3", "--data-dir", ds)
    assert p.returncode == 1
    [cell] = doc["results"]
    assert "half-written" in cell["reason"] and rec_a["path"] in cell["reason"] and not cell["runs"]


def test_the_trial_checks_sizes_and_names_the_file_a_worker_fails_on(sources, corpora, tmp_path):
    need_module("torch", "the pytorch-dataloader loader")
    a, _ = corpora
    out = tmp_path / "ds"
    r = _trial("datasize", "--corpus", a, "--out", out, "--format", "folder", "--encoding", "jpeg90", "--side", 64,
               "--workers", 1, "--keep")
    assert r["status"] == "ok", r
    info = json.loads((out / "dataset.json").read_text())
    assert len(info["file_list"]) == 12 and all(len(f["sha256"]) == 64 for f in info["file_list"])
    # Same size, not an image: the loader's worker fails, and the error is one line that names the file.
    victim = sorted((out / "train").rglob("*.jpg"))[3]
    victim.write_bytes(b"x" * victim.stat().st_size)
    r = _trial("dataload", "--loader", "pytorch-dataloader", "--dataset", out, "--workers", 2, "--batch", 4,
               "--epochs", 1)
    assert r["status"] == "error" and victim.name in r["error"] and "DataLoader worker" in r["error"], r
    assert "Original Traceback" not in r["error"] and "\n" not in r["error"]
    # Truncated: refused before any loader reads it, naming the dataset's folder.
    victim.write_bytes(b"x")
    r = _trial("dataload", "--loader", "pytorch-dataloader", "--dataset", out, "--workers", 1, "--batch", 4,
               "--epochs", 1)
    assert r["status"] == "error" and str(out) in r["error"] and "half-written" in r["error"], r
    # A corpus image changed since the manifest: the writer refuses, naming it (sizes always; hashes on --verify).
    entry = json.loads((a / "manifest.json").read_text())["files"][5]
    img = a / entry["file"]
    original = img.read_bytes()
    try:
        k = len(original) // 2
        img.write_bytes(original[:k] + bytes([original[k] ^ 1]) + original[k + 1:])  # same size, other bytes
        args = ("datasize", "--corpus", a, "--out", tmp_path / "ds2", "--format", "folder", "--encoding", "jpeg90",
                "--side", 64, "--workers", 1)
        r = _trial(*args)
        assert r["status"] == "ok", r  # sizes only, by default
        r = _trial(*args, "--verify")
        assert r["status"] == "error" and entry["file"] in r["error"] and "SHA-256" in r["error"], r
        img.write_bytes(original[:1000])
        r = _trial(*args)
        assert r["status"] == "error" and entry["file"] in r["error"] and "manifest says" in r["error"], r
    finally:
        img.write_bytes(original)


def _trial(*args) -> dict:
    p = subprocess.run([sys.executable, str(TRIAL), *map(str, args)], capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("KIT-RESULT ")]
    assert lines, p.stderr[-2000:]
    return json.loads(lines[-1][len("KIT-RESULT "):])


def refuse(sources: Path, tmp_path: Path, *args, says: str) -> None:
    p = kitctl(sources, *args, "--results-dir", tmp_path / "r")
    assert p.returncode == 2, (args, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in p.stderr, (args, p.stderr)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_limits_are_checked_before_anything_is_written(sources, corpora, tmp_path):
    a, _ = corpora
    e2e = ("run", "train-e2e", "--corpus", a, "--loaders", "pytorch-dataloader", "--device", "cpu", "--batch", 4)
    refuse(sources, tmp_path, *e2e, "--side", 10, says="--side 10")
    refuse(sources, tmp_path, *e2e, "--steps", 50, says="more than one epoch")
    refuse(sources, tmp_path, *e2e, "--workers", 100000, says="per core")
    refuse(sources, tmp_path, "run", "dataload", "--corpus", a, "--batch", 4, "--workers", "1,100000",
           says="per core")
    refuse(sources, tmp_path, "run", "datasize", "--corpus", a, "--workers", 100000, says="per core")
    refuse(sources, tmp_path, "run", "dataload", "--corpus", a, "--batch", 13, says="more than the 12 images")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")  # a data dir that cannot be written (a file in the way: refused for root too)
    refuse(sources, tmp_path, "run", "dataload", "--corpus", a, *LOAD, "--data-dir", blocker / "ds",
           says="not a writable folder")
    refuse(sources, tmp_path, *e2e, "--steps", 2, "--data-dir", blocker / "ds", says="not a writable folder")


def test_device_cuda_without_a_gpu_is_refused_up_front(sources, corpora, tmp_path):
    from kitctl.core.gpu import detect_gpu

    if detect_gpu() is not None:
        host_lacks("no-gpu", "--device cuda is refused only where NVML finds no GPU")
    a, _ = corpora
    refuse(sources, tmp_path, "run", "train-e2e", "--corpus", a, "--loaders", "pytorch-dataloader", "--device",
           "cuda", "--batch", 4, "--steps", 2, says="--device cuda")


def test_a_truncated_manifest_is_one_line(sources, corpora, tmp_path):
    a, _ = corpora
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text((a / "manifest.json").read_text()[:200])
    for bench in ("dataload", "datasize", "train-e2e"):
        refuse(sources, tmp_path, "run", bench, "--corpus", bad, says="not a readable corpus manifest")
    (bad / "manifest.json").write_text('{"kind": "something else"}')
    refuse(sources, tmp_path, "run", "dataload", "--corpus", bad, says="not a kitctl corpus manifest")


def test_data_verify_reads_every_byte(sources, corpora, tmp_path):
    a = shutil.copytree(corpora[0], tmp_path / "c")
    p = kitctl(sources, "data", "verify", a)
    assert p.returncode == 0 and "matches" in p.stdout, p.stderr
    r = _trial("datasize", "--corpus", a, "--out", tmp_path / "ds", "--format", "folder", "--encoding", "raw",
               "--side", 48, "--workers", 1, "--keep")
    assert r["status"] == "ok", r
    assert kitctl(sources, "data", "verify", tmp_path / "ds").returncode == 0
    for root, victim in ((a, sorted((a / "train").rglob("*.jpg"))[2]), (tmp_path / "ds",
                                                                         sorted((tmp_path / "ds").rglob("*.npy"))[2])):
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 1  # same size: only the hash tells
        victim.write_bytes(bytes(data))
        p = kitctl(sources, "data", "verify", root)
        assert p.returncode == 1 and victim.name in p.stderr and "SHA-256" in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
    p = kitctl(sources, "data", "verify", tmp_path)
    assert p.returncode == 2 and "neither a corpus" in p.stderr


def test_resume_of_a_partial_from_another_gpu_is_refused_and_keeps_it(sources, tmp_path):
    """A dataload partial recorded on the H200 (its GPU's UUID in host.gpu): here (no GPU, or another one) its
    pytorch-nvjpeg runs would fail one by one; the resume is refused in one line and the partial is untouched."""
    from conftest import ROOT

    src = ROOT / "results/reference/dataload-rrc224-corpus-20261203T133518Z.partial.json"
    uuid = json.loads(src.read_text())["host"]["gpu"]["uuid"]
    partial = tmp_path / src.name
    shutil.copy2(src, partial)
    before = partial.read_bytes()
    for _ in range(2):  # the refusal releases the partial's lock: a second try says the same
        p = kitctl(sources, "run", "dataload", "--resume", partial)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and f"the partial ran on NVIDIA H200 {uuid}" in lines[0], p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == [src.name]  # nothing written beside it
    assert partial.read_bytes() == before
