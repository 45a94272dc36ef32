"""The data-loading trial side (trials/dataload) with real parts: a real corpus from scikit-image's
photographs, real ffcv/webdataset/folder writers, real loaders run as subprocesses on CPU, real page-cache
drops checked with mincore. Small sizes (tens of images): a smoke check of every path, not a benchmark."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
TRIAL = ROOT / "trials" / "dataload" / "trial.py"
sys.path.insert(0, str(ROOT / "trials" / "common"))
sys.path.insert(0, str(ROOT / "trials" / "dataload"))

import corpus  # noqa: E402  (imports scikit-image only when it makes a corpus)
import pagecache  # noqa: E402
import writers  # noqa: E402

from conftest import need_module  # noqa: E402

N = 48


def trial(*flags, timeout=300, env=None):
    proc = subprocess.run([sys.executable, str(TRIAL), *map(str, flags)], capture_output=True, text=True,
                          timeout=timeout, cwd="/", env=env)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("KIT-RESULT "), (proc.stdout, proc.stderr[-2000:])
    return proc.returncode, json.loads(lines[0][len("KIT-RESULT "):]), proc.stderr


def _processes_marked(mark: str) -> list[int]:
    """Live processes whose environment holds `mark` (a trial's children outliving it are reparented, not gone)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if mark.encode() in (d / "environ").read_bytes():
                    found.append(int(d.name))
            except OSError:  # exited meanwhile, or not ours to read
                pass
    return found


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    need_module("skimage", "the corpus's photographs ship in scikit-image")
    out = tmp_path_factory.mktemp("corpus") / "c"
    corpus.make(out, N, classes=4, seed=3, workers=2)
    return out


def test_corpus_is_deterministic_licensed_and_imagenet_like(made, tmp_path):
    m = corpus.read_manifest(made)
    assert m["images"] == N and len(m["files"]) == N
    assert all(s["licence"] and s["file"] in corpus.SOURCES for s in m["sources"])
    assert len(m["sources"]) >= 5  # many distinct photographs, not one
    # A smaller corpus with the same seed is a prefix of a larger one, byte for byte, whatever the workers.
    small = tmp_path / "small"
    corpus.make(small, 10, classes=4, seed=3, workers=1)
    for e in corpus.read_manifest(small)["files"]:
        assert (small / e["file"]).read_bytes() == (made / e["file"]).read_bytes()
    other = tmp_path / "other"
    corpus.make(other, 10, classes=4, seed=4, workers=1)
    first = corpus.read_manifest(other)["files"][0]
    assert (other / first["file"]).read_bytes() != (made / first["file"]).read_bytes()
    # Sizes in ImageNet's range: a median long side of a few hundred px; bytes are what the files hold.
    assert 200 < m["long_side_px"]["median"] < 900
    assert m["bytes"] == sum((made / e["file"]).stat().st_size for e in m["files"])
    with pytest.raises(SystemExit, match="already holds"):
        corpus.make(made, 5)


def test_a_large_corpus_has_a_tail_of_large_images():
    sizes = [max(corpus._size(np.random.default_rng([0, i]))) for i in range(2000)]
    assert sum(s >= 1000 for s in sizes) > 40  # the 1,600 px column needs images above 1,600
    assert max(sizes) > 1600
    assert 300 < sorted(sizes)[len(sizes) // 2] < 700  # an ImageNet-like median long side


@pytest.mark.parametrize("encoding", ["jpeg90", "mix90", "raw"])
def test_writers_agree_on_payload_and_report_file_overheads(made, tmp_path, encoding):
    m = corpus.read_manifest(made)
    infos = {fmt: writers.write(made, m, tmp_path / fmt, fmt, encoding, 256, workers=2, seed=0)
             for fmt in writers.FORMATS}
    raw_payload = sum(writers.prepared(made, e, 256).size for e in m["files"])
    for fmt, info in infos.items():
        assert info["images"] == N and info["side"] == 256
        assert info["file_bytes"] >= info["payload_bytes"] > 0
        assert info["imagenet_equivalent_gb"]["payload"] == pytest.approx(
            info["payload_bytes"] / N * writers.IMAGENET_TRAIN_IMAGES / 1e9)
        if encoding == "raw":
            assert info["payload_bytes"] == raw_payload and info["jpeg_images"] == 0
        if encoding == "jpeg90":
            assert info["jpeg_images"] == N and info["payload_bytes"] < raw_payload / 4
    if encoding == "jpeg90":  # the same pixels and the same libjpeg-turbo settings: the same JPEG bytes
        assert infos["folder"]["payload_bytes"] == infos["webdataset"]["payload_bytes"]
        assert abs(infos["ffcv"]["payload_bytes"] - infos["folder"]["payload_bytes"]) < 0.02 * infos["folder"]["payload_bytes"]
    if encoding == "mix90":
        assert infos["ffcv"]["compress_probability"] == writers.MIX_COMPRESS_PROBABILITY
        for info in infos.values():
            assert 0 < info["jpeg_images"] < N  # some JPEG, some raw
    # ffcv pads its allocations to 8 MiB pages: the file is far larger than the payload on a small set.
    assert infos["ffcv"]["file_bytes"] - infos["ffcv"]["payload_bytes"] >= 4 << 20
    assert len(list((tmp_path / "webdataset").glob("shard-*.tar"))) == writers.shard_count(N)


def test_every_image_is_downscaled_never_upscaled(made):
    m = corpus.read_manifest(made)
    for e in m["files"][:10]:
        px = writers.prepared(made, e, 256)
        assert max(px.shape[:2]) == min(256, max(e["width"], e["height"]))


def test_page_cache_drop_and_warm_are_measured(made):
    files = [made / e["file"] for e in corpus.read_manifest(made)["files"]]
    assert pagecache.drop(files) < 0.05
    assert pagecache.warm(files) == 1.0


@pytest.fixture(scope="module")
def datasets(made, tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("datasets")
    out = {}
    for fmt in writers.FORMATS:
        rc, r, err = trial("datasize", "--corpus", made, "--out", base / fmt, "--format", fmt,
                           "--encoding", "jpeg90", "--side", 256, "--workers", 2, "--keep")
        assert rc == 0 and r["status"] == "ok", (r["error"], err[-2000:])
        assert r["kept"] and (base / fmt / writers.DATASET_INFO).is_file()
        out[fmt] = base / fmt
    return out


@pytest.mark.parametrize("loader", ["pytorch-dataloader", "webdataset", "ffcv", "dali-cpu"])
@pytest.mark.parametrize("source", ["ram", "cold"])
def test_each_cpu_loader_runs_the_pipeline(datasets, loader, source):
    if loader == "ffcv":
        need_module("ffcv")
    if loader == "dali-cpu":
        need_module("nvidia.dali", "nvidia-dali-cuda130 (.ci/setup-dataload.sh installs it)")
    fmt = {"pytorch-dataloader": "folder", "webdataset": "webdataset", "ffcv": "ffcv", "dali-cpu": "folder"}[loader]
    mark = f"kitctl-test-{uuid.uuid4().hex}"  # inherited by the loader's worker processes
    rc, r, err = trial("dataload", "--loader", loader, "--dataset", datasets[fmt], "--workers", 2,
                       "--source", source, "--batch", 16, "--epochs", 2, env={**os.environ, "KITCTL_TEST_MARK": mark})
    assert rc == 0 and r["status"] == "ok", (r["error"], err[-3000:])
    # The trial ends without interpreter finalisation (os._exit, after its result line); no worker outlives it.
    assert not _processes_marked(mark)
    assert r["images"] == 2 * N and len(r["epochs"]) == 2
    assert all(e["images"] == N for e in r["epochs"])
    shape = r["batch_shape"]
    assert shape[0] == 16 and sorted(shape[1:]) == [3, 224, 224]
    assert r["images_per_second"] == pytest.approx(r["images"] / r["window_seconds"])
    for e in r["epochs"]:  # the source was what was asked, measured before every timed epoch
        assert (e["resident_before"] >= 0.98) if source == "ram" else (e["resident_before"] <= 0.05)


def test_datasize_deletes_unless_kept_and_bad_input_is_one_line(made, tmp_path):
    rc, r, _ = trial("datasize", "--corpus", made, "--out", tmp_path / "d", "--format", "folder",
                     "--encoding", "jpeg50", "--side", 128, "--limit", 8, "--workers", 1)
    assert rc == 0 and r["images"] == 8 and not (tmp_path / "d").exists()
    rc, r, _ = trial("dataload", "--loader", "nope", "--dataset", tmp_path, "--workers", 1)
    assert rc == 1 and r["status"] == "error" and "invalid choice" in r["error"]
    rc, r, _ = trial("dataload", "--loader", "ffcv", "--dataset", tmp_path, "--workers", 1)
    assert rc == 1 and "no dataset.json" in r["error"]
    rc, r, _ = trial("dataload", "--loader", "pytorch-nvjpeg", "--dataset", made, "--workers", 1)
    assert rc == 1 and r["status"] == "error"  # no dataset.json here (and no GPU): an error line, not a traceback


@pytest.mark.parametrize("fmt", ["folder", "webdataset", "ffcv"])
def test_a_dataset_folder_exists_only_whole(made, tmp_path, fmt):
    """A writer failing (or killed) midway leaves no half dataset at its folder: an interrupted run's next write
    of it must succeed, and a loader must never read a half one. A killed writer's hidden work folder is removed by
    the next write."""
    if fmt != "folder":
        need_module(fmt)
    m = corpus.read_manifest(made)
    out = tmp_path / "data" / fmt
    # A missing image is refused before anything is written (ffcv's writer would wait for ever on its worker).
    missing = dict(m, files=[*m["files"][:5], dict(m["files"][5], file="missing/0.jpg")])
    with pytest.raises(ValueError, match="lacks 1 of its manifest's images, e.g. missing/0.jpg"):
        writers.write(made, missing, out, fmt, "jpeg90", 64, workers=1, seed=0)
    assert not out.exists()
    if fmt == "folder":  # an image that does not decode: the writer fails after writing 5, naming it
        junk = tmp_path / "junk.jpg"
        junk.write_bytes(b"not a JPEG")
        broken = dict(m, files=[*m["files"][:5], dict(m["files"][5], file=str(junk))])
        with pytest.raises(writers.UnreadableImage, match=f"corpus image {junk} cannot be decoded"):
            writers.write(made, broken, out, fmt, "jpeg90", 64, workers=1, seed=0)
        assert not out.exists() and not list(out.parent.glob(f".{fmt}.writing-*"))
    # A truncated JPEG, through the trial (a process of its own: ffcv's writer used to wait for ever on the worker
    # that died on it, so a hang here ends at the subprocess's timeout, as a failure): the write returns by itself
    # with one line naming the file, and leaves no dataset, no hidden sibling, no process and no shared memory.
    cut = tmp_path / "cut"
    shutil.copytree(made, cut)
    bad = m["files"][20]["file"]
    whole = (cut / bad).read_bytes()
    (cut / bad).write_bytes(whole[: len(whole) // 3])
    mark = f"kitctl-test-{uuid.uuid4().hex}"  # inherited by every process the trial starts
    rc, r, err = trial("datasize", "--corpus", cut, "--out", out, "--format", fmt, "--encoding", "jpeg90",
                       "--side", 64, "--workers", 2, "--keep", timeout=240, env={**os.environ, "KITCTL_TEST_MARK": mark})
    assert rc == 1 and r["status"] == "error", (r, err[-2000:])
    assert r["error"].startswith(f"corpus image {bad} cannot be decoded (OSError: image file is truncated"), r["error"]
    assert not out.exists() and not list(out.parent.glob(f".{fmt}.writing-*"))
    assert not _processes_marked(mark)
    assert "leaked shared_memory" not in err
    stale = out.parent / f".{fmt}.writing-1"  # what a SIGKILLed writer leaves
    (stale / "train").mkdir(parents=True)
    info = writers.write(made, m, out, fmt, "jpeg90", 64, workers=1, seed=0)
    assert info["images"] == N and (out / writers.DATASET_INFO).is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == [fmt]
    with pytest.raises(ValueError, match="exists"):
        writers.write(made, m, out, fmt, "jpeg90", 64, workers=1, seed=0)


def test_a_killed_ffcv_writer_worker_ends_the_write_in_one_line(made, tmp_path):
    """ffcv's writer polls its count of written samples and never looks at its workers: one SIGKILLed midway (the
    OOM killer's way) used to leave it waiting for ever. The worker preparing sample 20 kills itself (the writers'
    test-only fault hook; a real SIGKILL of a real worker); the write must end by itself within the subprocess's
    timeout, with one line, no dataset, no hidden sibling, no process and no shared memory left."""
    need_module("ffcv")
    out = tmp_path / "data" / "ffcv"
    mark = f"kitctl-test-{uuid.uuid4().hex}"
    t0 = time.monotonic()
    rc, r, err = trial("datasize", "--corpus", made, "--out", out, "--format", "ffcv", "--encoding", "jpeg90",
                       "--side", 64, "--workers", 2, "--keep", timeout=120,
                       env={**os.environ, "KITCTL_TEST_MARK": mark, "KITCTL_FAULT_KILL_WRITER_AT": "20"})
    assert rc == 1 and r["status"] == "error", (r, err[-2000:])
    assert r["error"].startswith("an ffcv writer worker died before the write finished (pid "), r["error"]
    assert "exit code -9" in r["error"]
    assert time.monotonic() - t0 < 60
    assert not out.exists() and not list(out.parent.glob(".ffcv.writing-*"))
    assert not _processes_marked(mark)
    assert "leaked shared_memory" not in err
