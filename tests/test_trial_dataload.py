"""The data-loading trial side (trials/dataload) with real parts: a real corpus from scikit-image's
photographs, real ffcv/webdataset/folder writers, real loaders run as subprocesses on CPU, real page-cache
drops checked with mincore. Small sizes (tens of images): a smoke check of every path, not a benchmark."""
from __future__ import annotations

import json
import os
import shutil
import signal
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
import kittrial  # noqa: E402
import pagecache  # noqa: E402
import writers  # noqa: E402

from conftest import host_lacks, need_module  # noqa: E402

N = 48


def trial(*flags, timeout=300, env=None, sigint_ignored=False):
    """`sigint_ignored`: the trial starts with SIGINT ignored, as under nohup or in a shell's background job."""
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    proc = subprocess.run([sys.executable, str(TRIAL), *map(str, flags)], capture_output=True, text=True,
                          timeout=timeout, cwd="/", env=env, preexec_fn=ignore)
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
    # --epochs N without window flags: exactly N timed epochs, as before the rule; the start-up apart.
    assert r["epochs_asked"] == 2 and r["window"]["rule"] == "fixed: 2 epochs after a warm-up epoch"
    assert r["startup_seconds"] == r["warmup_epoch"]["first_batch_seconds"] <= r["warmup_seconds"]
    assert r["window_seconds"] == pytest.approx(sum(e["seconds"] for e in r["epochs"]))


def _batch_images(epoch: dict, batch: int) -> list[int]:
    short = dict(map(tuple, epoch["short_batches"]))
    return [short.get(i, batch) for i in range(epoch["batches"])]


@pytest.mark.parametrize("loader", ["pytorch-dataloader", "webdataset", "ffcv"])
def test_the_window_rule_with_a_real_loader(datasets, loader):
    """After a warm-up epoch, the fewest whole epochs holding >= --window-images images and lasting >=
    --window-seconds; every batch's seconds stored, the halves and the start-up recomputable from them. The
    figures' values are whatever this machine gave: only their relations are checked."""
    if loader == "ffcv":
        need_module("ffcv")
    fmt = {"pytorch-dataloader": "folder", "webdataset": "webdataset", "ffcv": "ffcv"}[loader]
    want_images, want_s, batch = 100, 0.3, 16
    rc, r, err = trial("dataload", "--loader", loader, "--dataset", datasets[fmt], "--workers", 2, "--batch", batch,
                       "--window-images", want_images, "--window-seconds", want_s, "--steady-tolerance", 0.05)
    assert rc == 0 and r["status"] == "ok", (r["error"], err[-3000:])
    w, epochs = r["window"], r["epochs"]
    assert w["rule"] == "whole epochs after a warm-up epoch, until at least 100 images and at least 0.3 s"
    assert (w["min_images"], w["min_seconds"], w["fixed_epochs"], w["tolerance"]) == (100, 0.3, None, 0.05)
    assert r["epochs_asked"] is None and w["epochs"] == len(epochs) >= 1
    # Whole epochs, both minimums held, and one epoch fewer would miss one of them.
    assert all(e["images"] == N for e in epochs) and r["images"] == N * len(epochs)
    assert r["images"] >= want_images and r["window_seconds"] >= want_s
    last = epochs[-1]
    assert r["images"] - last["images"] < want_images or r["window_seconds"] - last["seconds"] < want_s
    assert r["window_seconds"] == pytest.approx(sum(e["seconds"] for e in epochs))
    assert r["images_per_second"] == pytest.approx(r["images"] / r["window_seconds"])
    # Per-batch seconds (to the microsecond) sum to each epoch; the halves recomputed from them agree.
    images, secs = [], []
    for e in epochs:
        assert sum(e["batch_seconds"]) == pytest.approx(e["seconds"], abs=1e-6 * e["batches"])
        assert e["first_batch_seconds"] == pytest.approx(e["batch_seconds"][0], abs=1e-6)
        assert sum(_batch_images(e, batch)) == e["images"]
        images += _batch_images(e, batch)
        secs += e["batch_seconds"]
    assert w["batches"] == len(secs)
    first, second = kittrial.halves(images, secs, 1)
    assert first == pytest.approx(w["first_half_ips"], rel=1e-3)
    assert second == pytest.approx(w["second_half_ips"], rel=1e-3)
    assert w["steady"] == (abs(w["halves_change"]) <= 0.05)
    # The start-up: the warm-up epoch's time to its first batch, in none of the timed epochs.
    warm = r["warmup_epoch"]
    assert r["startup_seconds"] == warm["first_batch_seconds"] and warm["images"] == N
    assert r["warmup_seconds"] == pytest.approx(warm["seconds"]) and r["build_seconds"] > 0
    assert set(r["figures"]) == {"images_per_second", "startup_seconds", "warmup_seconds", "build_seconds"}


@pytest.mark.parametrize("flags, says", [
    (["--window-images", "0"], "argument --window-images: must be an integer >= 1, got '0'"),
    (["--window-images", "1e5"], "argument --window-images: must be an integer >= 1, got '1e5'"),
    (["--window-seconds", "0"], "argument --window-seconds: must be a number > 0 and <= 86400, got '0'"),
    (["--window-seconds", "-3"], "argument --window-seconds: must be a number > 0"),
    (["--window-seconds", "nan"], "argument --window-seconds: must be a number > 0"),
    (["--window-seconds", "inf"], "argument --window-seconds: must be a number > 0"),
    (["--window-seconds", "86401"], "argument --window-seconds: must be a number > 0 and <= 86400"),
    (["--steady-tolerance", "0"], "argument --steady-tolerance: must be a number > 0 and <= 1, got '0'"),
    (["--steady-tolerance", "1.5"], "argument --steady-tolerance: must be a number > 0 and <= 1"),
    (["--epochs", "0"], "argument --epochs: must be > 0, got 0"),
])
def test_bad_window_flags_give_the_invalid_arguments_line(tmp_path, flags, says):
    for sub in (["dataload", "--loader", "ffcv", "--dataset", tmp_path, "--workers", 1],
                ["train", "--loader", "synthetic", "--model", "resnet18"]):
        if sub[0] == "train" and flags[0] == "--epochs":
            continue  # train has no --epochs
        rc, r, _ = trial(*sub, *flags, timeout=120)
        assert rc == 1 and r["status"] == "error", (sub[0], r)
        assert r["error"].startswith(f"invalid arguments: {says}"), (sub[0], r["error"])


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
        # (its manifest entry says its size: a size that differs is refused up front, before any write)
        broken = dict(m, files=[*m["files"][:5], dict(m["files"][5], file=str(junk), bytes=junk.stat().st_size)])
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
    # The manifest made to agree on its size (else the size check refuses it up front): the decode must fail.
    cut_m = json.loads((cut / "manifest.json").read_text())
    cut_m["files"][20]["bytes"] = len(whole) // 3
    (cut / "manifest.json").write_text(json.dumps(cut_m))
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


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["plain", "sigint-ignored"])
def test_a_killed_ffcv_writer_worker_ends_the_write_in_one_line(made, tmp_path, sigint_ignored):
    """ffcv's writer polls its count of written samples and never looks at its workers: one SIGKILLed midway (the
    OOM killer's way) used to leave it waiting for ever. The worker preparing sample 20 kills itself (the writers'
    test-only fault hook; a real SIGKILL of a real worker); the write must end by itself within the subprocess's
    timeout, with one line, no dataset, no hidden sibling, no process and no shared memory left. Also when the
    trial started with SIGINT ignored (nohup, a background job): the watch stopped the wait by a simulated SIGINT,
    which such a process ignores, and the write hung until the timeout."""
    need_module("ffcv")
    out = tmp_path / "data" / "ffcv"
    mark = f"kitctl-test-{uuid.uuid4().hex}"
    t0 = time.monotonic()
    rc, r, err = trial("datasize", "--corpus", made, "--out", out, "--format", "ffcv", "--encoding", "jpeg90",
                       "--side", 64, "--workers", 2, "--keep", timeout=120, sigint_ignored=sigint_ignored,
                       env={**os.environ, "KITCTL_TEST_MARK": mark, "KITCTL_FAULT_KILL_WRITER_AT": "20"})
    assert rc == 1 and r["status"] == "error", (r, err[-2000:])
    assert r["error"].startswith("an ffcv writer worker died before the write finished (pid "), r["error"]
    assert "exit code -9" in r["error"]
    assert time.monotonic() - t0 < 60
    assert not out.exists() and not list(out.parent.glob(".ffcv.writing-*"))
    assert not _processes_marked(mark)
    assert "leaked shared_memory" not in err


def test_the_nvjpeg_loader_refuses_cleanly_without_cuda(datasets):
    """This host has no CUDA: the loader says so first, in the result line (the GPU path is not run here)."""
    torch = need_module("torch")
    if torch.cuda.is_available():
        host_lacks("no-gpu", "this check is for a host without CUDA")
    rc, r, err = trial("dataload", "--loader", "pytorch-nvjpeg", "--dataset", datasets["folder"], "--workers", 1,
                       "--window-images", 10)
    assert rc == 1 and r["status"] == "error" and "Traceback" not in r["error"]
    assert r["error"] == "RuntimeError: pytorch-nvjpeg decodes on the GPU: no CUDA device here"


TOOL = ROOT / "tools" / "nvjpeg_pipeline.py"


def tool(*flags):
    p = subprocess.run([sys.executable, str(TOOL), *map(str, flags)], capture_output=True, text=True, timeout=120,
                       cwd="/")
    return p.returncode, p.stdout, p.stderr


def test_the_nvjpeg_pipeline_tool_refuses_in_one_line(datasets, made, tmp_path):
    """tools/nvjpeg_pipeline.py on this CPU host: what it checks before it needs a GPU, each refusal one line with
    no traceback; a dataload result of another batch is no yardstick; then no CUDA (exit 1). Its GPU run is not
    exercised here."""
    torch = need_module("torch")
    folder = datasets["folder"]
    rc, out, err = trial("dataload", "--loader", "pytorch-dataloader", "--dataset", folder, "--workers", 1,
                         "--batch", 16, "--epochs", 1)
    assert rc == 0 and out["status"] == "ok"
    result = tmp_path / "dataload.out"
    result.write_text("some diagnostics\nKIT-RESULT " + json.dumps(out) + "\n")
    cases = [(["--dataset", folder, "--batch", 0], 2, "invalid arguments: argument --batch: must be an integer >= 1"),
             (["--dataset", folder, "--window-seconds", "nan"], 2, "invalid arguments: argument --window-seconds"),
             (["--dataset", tmp_path], 2, f"{tmp_path}: no dataset.json"),
             (["--dataset", datasets["ffcv"]], 2, "is a ffcv dataset; the pipeline reads folder datasets"),
             (["--dataset", folder, "--batch", 32, "--loader-result", result], 2,
              "ran on other data or batch (batch 16 vs 32): no fraction"),
             (["--dataset", folder, "--loader-result", tmp_path / "none"], 2, "--loader-result"),
             (["--dataset", made, "--batch", 16], 2, "no dataset.json")]
    raw = tmp_path / "raw"
    writers.write(made, corpus.read_manifest(made), raw, "folder", "raw", 64, 4, 1, 0)
    cases.append((["--dataset", raw], 2, "4 of its 4 images are raw (.npy); the pipeline decodes JPEG datasets only"))
    if not torch.cuda.is_available():
        cases.append((["--dataset", folder, "--batch", 16, "--loader-result", result], 1,
                      f"torch {torch.__version__} sees no CUDA device"))
    for flags, code, says in cases:
        rc, stdout, stderr = tool(*flags)
        assert rc == code and stdout == "", (flags, rc, stdout, stderr)
        assert len(stderr.strip().splitlines()) == 1 and says in stderr and "Traceback" not in stderr, (flags, stderr)
