"""`kitctl run train-e2e` end to end through the CLI on CPU: a tiny corpus, real PyTorch training (ResNet-18,
a few steps) fed by pytorch-dataloader and by synthetic on-device batches; the artifact schema-valid, its
figures consistent, the report's verdict and the bar plot, --resume; bad input one line, exit 2; webdataset and
ffcv batches through the trial."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kitctl.core.artifact import load, validate

from conftest import host_lacks, need_module, unavailable

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
STEPS, BATCH = 2, 4


def kitctl(*args, timeout=900):
    return subprocess.run([*ENTRY, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    need_module("skimage", "the corpus's photographs ship in scikit-image")
    need_module("torch", "the train-e2e trial trains with PyTorch")
    out = tmp_path_factory.mktemp("data") / "corpus"
    p = kitctl("data", "make", "--out", out, "--images", 12, "--classes", 3, "--workers", 2)
    assert p.returncode == 0, p.stderr
    return out


def test_bad_flags_are_one_line_exit_2(corpus, tmp_path):
    for flags, says in ((["--model", "vgg"], "unknown vgg"), (["--loaders", "dali-gpu"], "unknown dali-gpu"),
                        (["--workers", "1,2"], "one number or all"), (["--steps", 0], "--steps must be > 0"),
                        (["--precision", "fp8"], "--precision must be one of")):
        p = kitctl("run", "train-e2e", "--corpus", corpus, *flags, "--results-dir", tmp_path)
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, (flags, p.stderr)
    assert not list(tmp_path.glob("train-e2e-*"))


def test_config_round_trips_and_synthetic_runs_first(corpus):
    from kitctl.benchmarks.train_e2e.config import TrainE2EConfig

    cfg = TrainE2EConfig.from_flags(str(corpus), None, "pytorch-dataloader,synthetic", "resnet18,resnet50", "auto",
                                    "cpu", "2", "jpeg90", 64, 4, 1, 2, 1, None, None, None)
    assert cfg.loaders == ("synthetic", "pytorch-dataloader")
    assert cfg.cells()[0] == ("resnet18", "synthetic") and len(cfg.cells()) == 4
    assert cfg.datasets() == [("folder", "jpeg90", 64)]
    assert TrainE2EConfig.from_json(cfg.to_json()) == cfg


def test_training_fed_by_a_loader_and_synthetic_on_cpu(corpus, tmp_path):
    res = tmp_path / "results"
    p = kitctl("run", "train-e2e", "--corpus", corpus, "--data-dir", tmp_path / "ds", "--loaders", "pytorch-dataloader",
               "--model", "resnet18", "--device", "cpu", "--workers", 1, "--side", 64, "--batch", BATCH,
               "--warmup", 1, "--steps", STEPS, "--runs", 1, "--window-images", 1, "--window-seconds", 0.01,
               "--results-dir", res)
    assert p.returncode == 0, p.stderr + p.stdout
    assert "keep" in p.stdout and "trainer busy" in p.stdout  # the verdict under the end table
    assert "GPU" not in p.stdout  # a CPU run: no GPU to keep busy
    [final] = [f for f in res.glob("train-e2e-*.json") if not f.name.endswith(".partial.json")]
    doc = load(final)  # schema-checked
    assert doc["benchmark"] == "train-e2e" and doc["state"] == "complete"
    assert [(c["model"], c["loader"]) for c in doc["results"]] == [("resnet18", "synthetic"),
                                                                   ("resnet18", "pytorch-dataloader")]
    for c in doc["results"]:
        assert c["status"] == "ok", c["reason"]
        [r] = c["runs"]
        assert r["device"] == "cpu" and r["precision"] == "fp32" and r["parameters"] == 11_689_512  # torchvision's
        assert r["images"] == BATCH * STEPS  # 12 images, batch 4: every batch full, epochs repeat
        assert r["train_images_per_second"] == pytest.approx(r["images"] / r["window_seconds"])
        assert 0 <= r["busy_fraction"] <= 1 and math.isfinite(r["final_loss"])
        # Every step's loss, read after its phase; the last timed one is the final loss.
        assert r["first_nonfinite_loss"] is None and r["decode_check"] is None  # only pytorch-nvjpeg checks
        assert len(r["step_losses"]["warmup"]) == 1 and len(r["step_losses"]["timed"]) == STEPS
        assert r["step_losses"]["timed"][-1] == r["final_loss"]
        assert r["step_losses"]["warmup"][-1] == r["loss_after_warmup"]
        assert c["summary"]["train"]["median"] == pytest.approx(r["train_images_per_second"])
    synth, loader = (c["runs"][0] for c in doc["results"])
    assert synth["loader_images_per_second"] is None and doc["results"][0]["summary"]["loader"] is None
    # The loader alone: dataload's measurement under the window rule, whole 12-image epochs until the window
    # holds >= 1 image and >= 0.01 s (one epoch, or more where one epoch reads faster than 0.01 s here).
    assert loader["loader_images"] >= 12 and loader["loader_images"] % 12 == 0, loader["loader_images"]
    assert loader["loader_images_per_second"] > 0
    assert loader["resident_before"] >= 0.98 and "DataLoader" in loader["impl"]
    # Before each window, what one worker + the prefetch thread can hold is dropped: 2 x 1 + 3 + 3 batches.
    assert loader["drained_batches"] == 8 and synth["drained_batches"] == 0
    # 12 images in batches of 4: every window crosses an epoch start, and the report says so.
    assert loader["epoch_starts_in_window"] >= 1 and synth["epoch_starts_in_window"] == 0
    assert synth["data_wait_seconds"] < loader["data_wait_seconds"]  # a resident batch vs a worker process
    out = tmp_path / "report.md"
    p = kitctl("report", final, "--plots", tmp_path / "plots", "--out", out)
    assert p.returncode == 0, p.stderr
    md = out.read_text()
    assert "Which loader keeps the trainer busy" in md and "resnet18" in md and "of synthetic" in md
    assert "Epoch starts inside timed windows** — resnet18 pytorch-dataloader" in md
    assert list((tmp_path / "plots").glob("*-train-e2e.png"))
    # A partial with the loader's cell left: --resume (its recorded configuration) runs exactly that one.
    partial = dict(doc, state="interrupted", finished_utc=None, results=doc["results"][:1])
    validate(partial)
    ppath = res / "train-e2e-rrc224-corpus-20000101T000000Z.partial.json"
    ppath.write_text(json.dumps(partial))
    p = kitctl("run", "train-e2e", "--resume", ppath)
    assert p.returncode == 0, p.stderr
    resumed = load(res / "train-e2e-rrc224-corpus-20000101T000000Z.json")
    assert resumed["results"][0] == doc["results"][0] and resumed["results"][1]["status"] == "ok"


def _cell(model, loader, train, busy=0.9):
    s = {"n": 1, "median": train, "min": train, "max": train, "ci_low": None, "ci_high": None, "ci_level": None}
    b = dict(s, median=busy, min=busy, max=busy)
    return {"model": model, "loader": loader, "status": "ok", "runs": [{}],
            "summary": {"train": s, "busy": b, "loader": None}}


def test_verdict_names_the_loaders_within_the_rule():
    from kitctl.benchmarks.train_e2e.table import verdict

    # Inputs to the pure rule, not measurements: two loaders at 97% and 50% of synthetic, then none within 95%.
    doc = {"results": [_cell("resnet50", "synthetic", 1000.0), _cell("resnet50", "ffcv", 970.0),
                       _cell("resnet50", "pytorch-dataloader", 500.0, 0.5),
                       _cell("resnet18", "synthetic", 3000.0), _cell("resnet18", "ffcv", 1500.0, 0.5)]}
    r50, r18 = verdict(doc)
    assert r50.startswith("resnet50: ffcv (97%) keeps the GPU busy") and "pytorch-dataloader" not in r50
    assert r18.startswith("resnet18: no loader keeps the GPU busy; the closest, ffcv, trains at 50%")
    for c in doc["results"]:  # the same figures from a CPU run: no GPU to speak of
        c["runs"] = [{"device": "cpu"}]
    r50, r18 = verdict(doc)
    assert r50.startswith("resnet50: ffcv (97%) keeps the trainer busy") and "GPU" not in r50 + r18


@pytest.mark.parametrize("loader", ["webdataset", "ffcv"])
def test_the_trial_trains_from_the_other_formats(corpus, tmp_path, loader):
    """webdataset (NCHW tensors + label array) and ffcv (NHWC numpy + (B, 1) labels) hand their batches over."""
    need_module(loader)
    trial = Path(__file__).resolve().parent.parent / "trials" / "dataload" / "trial.py"
    ds = tmp_path / loader
    p = subprocess.run([sys.executable, trial, "datasize", "--corpus", corpus, "--out", ds, "--format", loader,
                        "--encoding", "jpeg90", "--side", "64", "--keep", "--workers", "1"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    p = subprocess.run([sys.executable, trial, "train", "--loader", loader, "--dataset", ds, "--model", "resnet18",
                        "--device", "cpu", "--batch", str(BATCH), "--warmup", "1", "--steps", str(STEPS),
                        "--workers", "1"], capture_output=True, text=True, timeout=600)
    r = json.loads(p.stdout.strip().splitlines()[-1][len("KIT-RESULT "):])
    assert p.returncode == 0 and r["status"] == "ok", r.get("error")
    assert r["layout"] == ("NHWC" if loader == "ffcv" else "NCHW") and r["images"] > 0
    assert r["train_images_per_second"] > 0 and r["loader_images_per_second"] > 0


def test_the_loader_alone_is_dataload_s_measurement(corpus, tmp_path):
    """train's loader-alone figure and dataload's come from one function (measure.measure_loader) under the same
    window flags: the same rule, the same record, the same relations between its figures, so a consistency check
    between the two benchmarks compares like with like. No speed is compared."""
    trial = Path(__file__).resolve().parent.parent / "trials" / "dataload" / "trial.py"
    ds = tmp_path / "folder"
    p = subprocess.run([sys.executable, trial, "datasize", "--corpus", corpus, "--out", ds, "--format", "folder",
                        "--encoding", "jpeg90", "--side", "64", "--keep", "--workers", "1"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    window = ["--window-images", "20", "--window-seconds", "0.2", "--steady-tolerance", "0.1"]

    def result(*argv):
        p = subprocess.run([sys.executable, trial, *argv, "--dataset", ds, "--loader", "pytorch-dataloader",
                            "--workers", "1", "--batch", str(BATCH), *window], capture_output=True, text=True,
                           timeout=600)
        r = json.loads(p.stdout.strip().splitlines()[-1][len("KIT-RESULT "):])
        assert p.returncode == 0 and r["status"] == "ok", (r.get("error"), p.stderr[-2000:])
        return r

    alone = result("train", "--model", "resnet18", "--device", "cpu", "--warmup", "1", "--steps", str(STEPS))
    dl = result("dataload", "--source", "ram")
    m = alone["loader_alone"]
    assert set(m) == {k for k in dl if k in m} and {"startup_seconds", "window", "epochs", "figures"} <= set(m)
    assert m["window"]["rule"] == dl["window"]["rule"] == ("whole epochs after a warm-up epoch, until at least 20 "
                                                           "images and at least 0.2 s")
    assert m["window"]["tolerance"] == dl["window"]["tolerance"] == 0.1
    assert m["figures"] == dl["figures"] and m["batch_shape"] == dl["batch_shape"]
    assert alone["loader_images_per_second"] == m["images_per_second"]
    assert m["images_per_second"] == pytest.approx(m["images"] / m["window_seconds"])
    assert (alone["loader_images"], alone["loader_seconds"]) == (m["images"], m["window_seconds"])
    assert alone["loader_startup_seconds"] == m["startup_seconds"] == m["warmup_epoch"]["first_batch_seconds"]
    assert all(e["resident_before"] >= 0.98 for e in m["epochs"])  # source ram, prepared before every epoch
    assert m["images"] % 12 == 0 and m["images"] >= 20 and m["window_seconds"] >= 0.2


@pytest.mark.parametrize("loader", ["pytorch-dataloader", "ffcv"])
def test_an_epoch_left_midway_stops_its_threads_and_workers(corpus, tmp_path, loader):
    """The trial leaves its last epoch midway. Before it exits, the prefetch thread, ffcv's epoch thread and the
    DataLoader's worker processes must be gone: one still inside a loader when the interpreter finalises aborted
    the process after its result line (exit -6, "terminate called without an active exception": CI, stop 23)."""
    need_module("ffcv" if loader == "ffcv" else "torch")
    import threading

    trials = Path(__file__).resolve().parent.parent / "trials" / "dataload"
    fmt = "ffcv" if loader == "ffcv" else "folder"
    ds = tmp_path / fmt
    p = subprocess.run([sys.executable, trials / "trial.py", "datasize", "--corpus", corpus, "--out", ds, "--format",
                        fmt, "--encoding", "jpeg90", "--side", "64", "--keep", "--workers", "1"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    sys.path.insert(0, str(trials))
    try:
        import loaders
        from train_e2e import Prefetch, split
    finally:
        sys.path.remove(str(trials))
    built = loaders.build(loader, ds, 2, 1, "ram", 0)
    epochs = []

    def batches():
        ep = built.epoch()
        epochs.append(ep)
        try:
            for b in ep:
                yield (*split(b, built.layout), 1)
        finally:
            loaders.finish(ep)

    it = Prefetch(batches(), pin=False)
    next(it)  # 12 images in batches of 2: the epoch is left after the first
    it.close()
    assert not it.thread.is_alive()
    [ep] = epochs
    if isinstance(ep, threading.Thread):  # ffcv's EpochIterator
        assert not ep.is_alive()
    else:  # torch's multi-process iterator: its workers were shut down and joined
        assert ep._shutdown and not any(w.is_alive() for w in ep._workers)


def test_a_result_followed_by_a_crash_is_an_error_that_says_so():
    from kitctl.benchmarks.data.trial import trial_outcome

    line = 'KIT-RESULT {"status": "ok", "images": 8}\n'
    run = trial_outcome(line, "terminate called without an active exception\n", -6, 1.0)
    assert run.status == "error" and run.result == {"status": "ok", "images": 8}
    assert run.error == ("the trial printed its result, then exited -6 (SIGABRT): "
                         "terminate called without an active exception")
    assert trial_outcome(line, "", 0, 1.0).status == "ok" and trial_outcome(line, "", 0, 1.0).error is None
    assert trial_outcome("", "", 3, 1.0).error == "no result line (exit 3)"
    assert trial_outcome('KIT-RESULT {"status": "oom"}', "", 0, 1.0).error == "status oom (exit 0)"
    assert trial_outcome("KIT-RESULT [1]", "", 0, 1.0).error == "a malformed result line"


def _trial_modules():
    need_module("torch", "the train-e2e trial trains with PyTorch")
    trials = Path(__file__).resolve().parent.parent / "trials" / "dataload"
    if str(trials) not in sys.path:
        sys.path.insert(0, str(trials))
    import loaders
    import train_e2e

    return loaders, train_e2e


def test_the_loss_record_names_the_first_nonfinite_step():
    _, te = _trial_modules()
    nan, inf = float("nan"), float("inf")
    assert te.first_nonfinite([1.0, 2.0]) is None and te.first_nonfinite([1.0, inf, nan]) == 1
    losses, where = te.loss_record([4.0, 3.5], [3.0, nan, 2.0, inf])
    assert losses == {"warmup": [4.0, 3.5], "timed": [3.0, None, 2.0, None]}  # JSON: no NaN literals
    assert where == {"phase": "timed", "step": 2, "of": 4, "value": "nan"}
    assert te.loss_record([-inf], [nan])[1] == {"phase": "warmup", "step": 1, "of": 1, "value": "-inf"}
    assert te.loss_record([1.0], [2.0]) == ({"warmup": [1.0], "timed": [2.0]}, None)


def test_a_diverging_run_fails_naming_the_step_where_the_loss_went_nonfinite(monkeypatch):
    """Real CPU training (ResNet-18, synthetic batch) with Adam's lr set absurdly high: the weights overflow after
    the first update, so a later step's loss is NaN/inf; the run fails, saying where, and records every loss."""
    _, te = _trial_modules()
    monkeypatch.setattr(te, "LR", 1e30)
    result: dict = {}
    with pytest.raises(RuntimeError, match=r"the loss is not finite \(.+\) from (warmup|timed) step \d+ of \d+"):
        te.run("synthetic", None, 1, 2, "resnet18", "fp32", 1, 3, "cpu", 0, result)
    where = result["first_nonfinite_loss"]
    assert where["phase"] == "timed" and 1 <= where["step"] <= 3 and where["of"] == 3
    assert math.isfinite(result["step_losses"]["warmup"][0])  # the initial weights: a finite first loss
    assert result["step_losses"]["timed"][where["step"] - 1] is None
    assert "status" not in result and "train_images_per_second" not in result


def test_decode_diff_compares_two_decodes_pixel_by_pixel():
    import torch

    loaders, _ = _trial_modules()
    a = torch.zeros((3, 4, 5), dtype=torch.uint8)
    b = a.clone()
    b[0, 0, 0], b[2, 3, 4] = 9, 255
    d = loaders.decode_diff([a, a, a], [a.clone(), b, torch.zeros((1, 4, 5), dtype=torch.uint8)])
    assert d == {"images": 3, "max_abs_diff": 255, "mean_abs_diff": pytest.approx(264 / 120),
                 "shape_mismatches": 1}
    assert loaders.decode_diff([], [])["max_abs_diff"] is None
    with pytest.raises(ValueError):  # a decode that lost an image is not compared as if it had not
        loaders.decode_diff([a], [])


def test_the_nvjpeg_loader_says_first_that_it_needs_cuda(corpus):
    import torch

    loaders, _ = _trial_modules()
    if torch.cuda.is_available():
        host_lacks("no-gpu", "this check is for a host without CUDA")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        loaders.build("pytorch-nvjpeg", corpus, 2, 0, "ram", 0)


def test_the_artifact_schema_takes_the_loss_diagnosis(tmp_path):
    from kitctl.core.artifact import ArtifactError

    src = sorted((Path(__file__).resolve().parent.parent / "results" / "reference").glob("train-e2e-*.json"))
    src = [p for p in src if not p.name.endswith(".partial.json")]
    if not src:
        unavailable("no committed train-e2e artifact in results/reference/")
    doc = json.loads(src[-1].read_text())
    run = doc["results"][-1]["runs"][0]
    run.update(step_losses={"warmup": [4.1, None], "timed": [None]},
               first_nonfinite_loss={"phase": "warmup", "step": 2, "of": 2, "value": "nan"},
               decode_check={"images": 16, "max_abs_diff": 3, "probe": {"loader": {"corrupted": 0}}})
    validate(doc)
    run["first_nonfinite_loss"] = {"phase": "loader", "step": 0}
    with pytest.raises(ArtifactError):
        validate(doc)
