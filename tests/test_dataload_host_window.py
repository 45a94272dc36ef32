"""The window rule through the host (`kitctl run dataload`, `kitctl run train-e2e`, report, compare): the flags
checked up front and passed to the trial, the rule recorded in the configuration and in every run, the start-up
apart from the steady figure, steadiness per cell, compare refusing two different windows, and dataload's figure
and train-e2e's loader-alone figure recorded by the same measurement. Real CPU loaders on a tiny corpus; no speed
is asserted (benchmarks are not tests)."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from kitctl.core.artifact import load

from conftest import need_module

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
BATCH = 4
# A window a 12-image corpus fills in a few epochs: short enough for CI, long enough to split into halves.
WINDOW = ("--window-images", 20, "--window-seconds", 0.05, "--steady-tolerance", 0.5)
RULE = "whole epochs after a warm-up epoch, until at least 20 images and at least 0.05 s"


def kitctl(*args, timeout=900):
    return subprocess.run([*ENTRY, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ))


def finals(res: Path, benchmark: str) -> list[Path]:
    return sorted(f for f in res.glob(f"{benchmark}-*.json") if not f.name.endswith(".partial.json"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    need_module("skimage", "the corpus's photographs ship in scikit-image")
    need_module("torch", "the loaders and train-e2e's training run on PyTorch")
    out = tmp_path_factory.mktemp("data") / "corpus"
    p = kitctl("data", "make", "--out", out, "--images", 12, "--classes", 3, "--workers", 2)
    assert p.returncode == 0, p.stderr
    return out


@pytest.mark.parametrize("flags, says", [
    (["--window-images", 0], "--window-images must be a whole number > 0 (got 0)"),
    (["--window-seconds", 0], "--window-seconds must be > 0"),
    (["--window-seconds", "nan"], "--window-seconds must be > 0"),
    (["--window-seconds", 1e6], "at most 86400"),
    (["--steady-tolerance", 0], "--steady-tolerance must be > 0 and at most 1"),
    (["--steady-tolerance", 1.5], "--steady-tolerance must be > 0 and at most 1"),
])
@pytest.mark.parametrize("which", ["dataload", "train-e2e"])
def test_bad_window_flags_are_one_line_exit_2(corpus, tmp_path, which, flags, says):
    p = kitctl("run", which, "--corpus", corpus, *flags, "--results-dir", tmp_path / "r")
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and says in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_dataload_epochs_below_one_is_refused(corpus, tmp_path):
    p = kitctl("run", "dataload", "--corpus", corpus, "--epochs", 0, "--results-dir", tmp_path / "r")
    assert p.returncode == 2 and "--epochs must be > 0" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_the_defaults_and_a_partial_from_before_the_rule(corpus):
    """The CLI's defaults are the rule's (50,000 images, 30 s, 2 %), passed to the trial as flags; a partial
    recorded before the rule resumes as it was measured: exactly its --epochs, no window flags."""
    from kitctl.benchmarks.dataload.config import DataloadConfig
    from kitctl.benchmarks.train_e2e.config import TrainE2EConfig

    cfg = DataloadConfig.from_flags(str(corpus), None, "pytorch-dataloader", "1", "ram", "jpeg90", "64", 1, None, 4,
                                    None, None, None, window_images=50_000, window_seconds=30.0,
                                    steady_tolerance=0.02)
    rec = cfg.to_json()
    assert rec["window_rule"] == "whole epochs after a warm-up epoch, until at least 50000 images and at least 30 s"
    assert (rec["window_images"], rec["window_seconds"], rec["steady_tolerance"], rec["epochs"]) == (50_000, 30.0,
                                                                                                   0.02, None)
    assert cfg.trial_flags() == ["--window-images", "50000", "--window-seconds", "30", "--steady-tolerance", "0.02"]
    assert DataloadConfig.from_json(rec) == cfg
    with_epochs = DataloadConfig.from_json({**rec, "epochs": 3})
    assert with_epochs.trial_flags()[-2:] == ["--epochs", "3"]
    assert with_epochs.to_json()["window_rule"].endswith("and at least 3 epochs")
    old = {k: v for k, v in rec.items() if k not in ("window_images", "window_seconds", "steady_tolerance",
                                                     "window_rule")}
    before = DataloadConfig.from_json({**old, "epochs": 2})
    assert before.window is None and before.trial_flags() == ["--epochs", "2"] and "window_rule" not in before.to_json()
    t = TrainE2EConfig.from_flags(str(corpus), None, "pytorch-dataloader", "resnet18", "auto", "cpu", "1", "jpeg90",
                                  64, 4, 1, 2, 1, None, None, None, window_images=50_000, window_seconds=30.0,
                                  steady_tolerance=0.02)
    assert t.to_json()["window_rule"] == rec["window_rule"] and TrainE2EConfig.from_json(t.to_json()) == t
    assert TrainE2EConfig.from_json({k: v for k, v in t.to_json().items() if k not in rec or k not in (
        "window_images", "window_seconds", "steady_tolerance", "window_rule")}).window is None


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory) -> dict[str, Path]:
    """One dataload run and one train-e2e run on the same corpus, dataset, loader, workers, batch and window."""
    base = tmp_path_factory.mktemp("runs")
    res = base / "results"
    p = kitctl("run", "dataload", "--corpus", corpus, "--data-dir", base / "ds", "--loaders", "pytorch-dataloader",
               "--workers", 1, "--side", 64, "--runs", 2, "--batch", BATCH, *WINDOW, "--results-dir", res)
    assert p.returncode == 0, p.stderr + p.stdout
    out = {"dataload_stdout": p.stdout}
    p = kitctl("run", "train-e2e", "--corpus", corpus, "--data-dir", base / "ds", "--loaders", "pytorch-dataloader",
               "--model", "resnet18", "--device", "cpu", "--workers", 1, "--side", 64, "--batch", BATCH,
               "--warmup", 1, "--steps", 2, "--runs", 1, *WINDOW, "--results-dir", res)
    assert p.returncode == 0, p.stderr + p.stdout
    [dl], [te] = finals(res, "dataload"), finals(res, "train-e2e")
    return {"dataload": dl, "train-e2e": te, "base": base, "dataload_stdout": out["dataload_stdout"],
            "train_stdout": p.stdout, "train_stderr": p.stderr}


def test_train_e2e_says_up_front_when_the_corpus_puts_an_epoch_start_inside_the_window(runs):
    # 12 images; (1 warm-up + 2 × 1 worker + 6 + 2 timed steps) × the batch are more than one epoch
    said = " ".join(runs["train_stderr"].split())  # the progress console wraps long lines
    assert said.count("cross an epoch start") == 1
    assert f"end {(1 + 2 + 6 + 2) * BATCH:,} images into the loader's epoch and the corpus holds 12:" in said


def test_dataload_records_the_rule_the_start_up_apart_and_steadiness(runs):
    doc = load(runs["dataload"])  # schema-checked
    c = doc["configuration"]
    assert c["window_rule"] == RULE and (c["window_images"], c["window_seconds"], c["steady_tolerance"]) == (
        20, 0.05, 0.5) and c["epochs"] is None
    [cell] = doc["results"]
    assert cell["status"] == "ok" and len(cell["runs"]) == 2
    for r in cell["runs"]:
        w = r["window"]
        assert r["window_rule"] == w["rule"] == c["window_rule"]  # the trial timed the rule the host recorded
        # The window: whole 12-image epochs until both minimums hold, the start-up outside it.
        assert r["images"] == w["images"] == sum(e["images"] for e in r["epochs"]) and r["images"] % 12 == 0
        assert r["images"] >= 20 and r["window_seconds"] >= 0.05 and w["epochs"] == len(r["epochs"])
        assert r["window_seconds"] == pytest.approx(sum(e["seconds"] for e in r["epochs"]))
        assert r["images_per_second"] == pytest.approx(r["images"] / r["window_seconds"])
        assert r["startup_seconds"] == r["warmup_epoch"]["first_batch_seconds"] > 0
        assert r["build_seconds"] >= 0 and r["warmup_seconds"] == pytest.approx(r["warmup_epoch"]["seconds"])
        assert set(r["figures"]) == {"images_per_second", "startup_seconds", "warmup_seconds", "build_seconds"}
        assert r["steady"] == (abs(r["halves_change"]) <= 0.5) == w["steady"]
    st = cell["steadiness"]
    assert st["runs_judged"] == 2 and st["tolerance"] == 0.5
    assert st["steady"] == (not st["runs_not_steady"] and st["interval_spread"] <= st["max_interval_spread"])
    assert cell["startup"]["median"] == pytest.approx(statistics.median(r["startup_seconds"] for r in cell["runs"]))
    verdict = "yes" if st["steady"] else "NOT STEADY"
    out = runs["base"] / "dataload.md"
    p = kitctl("report", runs["dataload"], "--out", out)
    assert p.returncode == 0, p.stderr
    md = out.read_text()
    head = next(ln for ln in md.splitlines() if ln.startswith("| Loader |"))
    row = next(ln for ln in md.splitlines() if ln.startswith("| pytorch-dataloader |"))
    cols = dict(zip([x.strip() for x in head.strip("|").split("|")], [x.strip() for x in row.strip("|").split("|")]))
    assert cols["start-up s"] == f"{cell['startup']['median']:.2f}" and cols["steady"] == verdict
    assert cols["images/s (median, steady)"] == f"{cell['summary']['median']:,.0f}"
    assert cols["window"].endswith(" s") and " img · " in cols["window"]
    assert "Start-up inside short epochs" not in md and RULE in md
    assert ("**Not steady** — pytorch-dataloader" in md) == (not st["steady"])


def test_compare_refuses_two_window_rules_unless_forced(runs, corpus):
    """Another window (here --epochs 4 as the third minimum) measures something else: exit 3; --force compares."""
    base = runs["base"]
    res = base / "other"
    p = kitctl("run", "dataload", "--corpus", corpus, "--data-dir", base / "ds", "--loaders", "pytorch-dataloader",
               "--workers", 1, "--side", 64, "--runs", 1, "--batch", BATCH, *WINDOW, "--epochs", 4,
               "--results-dir", res)
    assert p.returncode == 0, p.stderr + p.stdout
    [other] = finals(res, "dataload")
    doc = load(other)
    assert doc["configuration"]["window_rule"] == RULE + " and at least 4 epochs"
    assert all(len(r["epochs"]) >= 4 and r["window_rule"] == doc["configuration"]["window_rule"]
               for r in doc["results"][0]["runs"])
    def said(p) -> str:  # the console wraps long lines
        return " ".join((p.stdout + p.stderr).split())

    p = kitctl("compare", runs["dataload"], other)
    assert p.returncode == 3, said(p)
    assert f"window ({RULE} vs {RULE} and at least 4 epochs)" in said(p)
    p = kitctl("compare", runs["dataload"], other, "--force")
    assert p.returncode != 3 and "--force" in said(p), said(p)
    # The same rule on both sides: nothing about the window (a result compared with itself).
    p = kitctl("compare", runs["dataload"], runs["dataload"])
    assert p.returncode == 0 and "window (" not in said(p), said(p)


def test_train_e2e_shows_the_loader_alone_with_its_start_up_apart(runs):
    doc = load(runs["train-e2e"])
    assert doc["configuration"]["window_rule"] == RULE
    synth, cell = doc["results"]
    assert cell["loader"] == "pytorch-dataloader" and cell["status"] == "ok"
    [r] = cell["runs"]
    m = r["loader_alone"]
    assert r["loader_images_per_second"] == m["images_per_second"] and r["loader_startup_seconds"] == m[
        "startup_seconds"]
    assert cell["summary"]["loader_startup"]["median"] == r["loader_startup_seconds"]
    assert cell["loader_steadiness"]["steady"] == m["window"]["steady"]
    assert synth["runs"][0]["loader_alone"] is None and "loader_steadiness" not in synth
    out = runs["base"] / "train.md"
    p = kitctl("report", runs["train-e2e"], "--out", out)
    assert p.returncode == 0, p.stderr
    md = out.read_text()
    head = next(ln for ln in md.splitlines() if ln.startswith("| Model |"))
    names = [x.strip() for x in head.strip("|").split("|")]
    row = next(ln for ln in md.splitlines() if ln.startswith("| resnet18 | pytorch-dataloader |"))
    cols = dict(zip(names, [x.strip() for x in row.strip("|").split("|")]))
    # Beside training images/s: the loader alone's steady figure, its start-up apart, its steadiness.
    assert names.index("loader alone images/s (steady)") == names.index("interval") + 1
    assert cols["loader alone images/s (steady)"] == f"{m['images_per_second']:,.1f}"
    assert cols["loader start-up s"] == f"{m['startup_seconds']:.2f}"
    assert cols["loader steady"] == ("yes" if m["window"]["steady"] else "NOT STEADY")
    assert RULE in md


def test_dataload_and_the_loader_alone_are_one_measurement(runs):
    """The same corpus, dataset, loader, workers, batch and window: dataload's run and train-e2e's loader-alone
    record come from one function (trials/dataload/measure.py): the same keys, the same rule recorded, the same
    relations between their figures. No speed is compared."""
    dl, te = load(runs["dataload"]), load(runs["train-e2e"])
    assert dl["configuration"]["window_rule"] == te["configuration"]["window_rule"] == RULE
    assert dl["configuration"]["steady_tolerance"] == te["configuration"]["steady_tolerance"]
    [ds] = {d["path"] for d in dl["datasets"]} | {d["path"] for d in te.get("datasets") or []}  # written once
    d = dl["results"][0]["runs"][0]
    m = te["results"][1]["runs"][0]["loader_alone"]
    shared = ("images_per_second", "images", "window_seconds", "startup_seconds", "build_seconds", "warmup_seconds",
              "warmup_epoch", "epochs", "window", "figures", "batch_shape")
    assert all(k in m and k in d for k in shared)
    assert m["window"]["rule"] == d["window"]["rule"] == d["window_rule"]
    assert set(m["window"]) == set(d["window"]) and m["figures"] == d["figures"]
    assert set(m["warmup_epoch"]) == set(d["warmup_epoch"]) and set(m["epochs"][0]) == set(d["epochs"][0])
    assert m["batch_shape"] == d["batch_shape"] and m["images"] % 12 == d["images"] % 12 == 0
    for x in (m, d):
        assert x["images_per_second"] == pytest.approx(x["images"] / x["window_seconds"])
        assert x["startup_seconds"] == x["warmup_epoch"]["first_batch_seconds"]
        assert x["images"] >= 20 and x["window_seconds"] >= 0.05
        assert all(e["resident_before"] >= 0.98 for e in x["epochs"])  # source ram, prepared before every epoch
