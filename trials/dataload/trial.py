#!/usr/bin/env python3
"""Data-loading trial for kitctl: one unit of work in, one KIT-RESULT line out (protocol 1's framing).

    trial.py datasize --corpus C --out DIR --format ffcv --encoding jpeg90 --side 256 [--limit N] [--workers W]
    trial.py dataload --loader ffcv --dataset DIR --workers N --source ram|cold [--batch 256]
                      [--window-images 50000] [--window-seconds 30] [--steady-tolerance 0.02] [--epochs N]
    trial.py train --loader ffcv|synthetic [--dataset DIR] --workers N --model resnet50|resnet18 [--precision auto]
                   [--batch 256] [--warmup 10] [--steps 50] [--device auto|cpu|cuda]
                   [--window-images N] [--window-seconds S] [--steady-tolerance F]

datasize: writes one dataset (format x encoding x max side) and reports its bytes (writers.py).
dataload: builds one loader and measures it (measure.py; docs/method.md, "Data loading"): a warm-up epoch (its
time to the first batch is the loader's start-up, reported apart), then whole timed epochs, each over the whole
dataset: until the window holds --window-images images and lasts --window-seconds (either flag turns the rule
on; --epochs is then a third minimum), or, without them, exactly --epochs epochs (2). Source `ram`: every file
warmed into the page cache before each epoch and checked with mincore; `cold`: every file dropped
(posix_fadvise DONTNEED) before each epoch and checked with mincore. The result records the measured resident
fraction, the per-batch seconds of every epoch and whether the window's two halves agree.
train: train_e2e.py; its loader-alone figure is the same measurement (source ram) with the same window flags
(without them: whole epochs holding at least --steps batches).
Exit 0 only when status is ok.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import traceback
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for _p in (_HERE.parent / "common", _HERE):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import kittrial  # noqa: E402

# The window flags parse as throughput's do (kittrial): the same ranges and messages.
_WINDOW_IMAGES = kittrial._positive_int
_WINDOW_SECONDS = kittrial._float_in(0.0, 86400.0, low_open=True)
_TOLERANCE = kittrial._float_in(0.0, 1.0, low_open=True)


def _positive(text: str) -> int:
    v = int(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return v


class _Parser(argparse.ArgumentParser):
    """Keeps the last usage error (of the parser or a subcommand's) for the result line."""

    last_error: str | None = None

    def error(self, message: str):  # type: ignore[override]
        _Parser.last_error = message
        super().error(message)


def parser() -> argparse.ArgumentParser:
    import loaders
    import writers

    p = _Parser(description="kitctl data-loading trial")
    sub = p.add_subparsers(dest="benchmark", required=True)
    s = sub.add_parser("datasize")
    s.add_argument("--corpus", required=True, type=Path)
    s.add_argument("--out", required=True, type=Path)
    s.add_argument("--format", required=True, choices=writers.FORMATS)
    s.add_argument("--encoding", required=True, choices=list(writers.ENCODINGS))
    s.add_argument("--side", required=True, type=_positive)
    s.add_argument("--limit", type=_positive, default=None)
    s.add_argument("--workers", type=_positive, default=os.cpu_count() or 1)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--keep", action="store_true", help="keep the dataset (default: measure, then delete)")
    s.add_argument("--verify", action="store_true", help="check every corpus image's SHA-256 against the manifest")
    d = sub.add_parser("dataload")
    d.add_argument("--loader", required=True, choices=loaders.LOADERS)
    d.add_argument("--dataset", required=True, type=Path)
    d.add_argument("--workers", required=True, type=_positive)
    d.add_argument("--source", default="ram", choices=["ram", "cold"])
    d.add_argument("--batch", type=_positive, default=256)
    d.add_argument("--epochs", type=_positive, default=None)
    d.add_argument("--seed", type=int, default=0)
    _window_flags(d)
    t = sub.add_parser("train")
    t.add_argument("--loader", required=True, choices=[*loaders.LOADERS, "synthetic"])
    t.add_argument("--dataset", type=Path, default=None)
    t.add_argument("--workers", type=_positive, default=os.cpu_count() or 1)
    t.add_argument("--model", required=True, choices=["resnet50", "resnet18"])
    t.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp32"])  # auto: bf16 on CUDA
    t.add_argument("--batch", type=_positive, default=256)
    t.add_argument("--warmup", type=_positive, default=10)
    t.add_argument("--steps", type=_positive, default=50)
    t.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    t.add_argument("--seed", type=int, default=0)
    _window_flags(t)
    return p


def _window_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--window-images", type=_WINDOW_IMAGES, default=None)
    p.add_argument("--window-seconds", type=_WINDOW_SECONDS, default=None)
    p.add_argument("--steady-tolerance", type=_TOLERANCE, default=kittrial.DEFAULT_STEADY_TOLERANCE)


def datasize(a, result: dict) -> None:
    import corpus
    import writers

    try:
        manifest = corpus.read_manifest(a.corpus)
        info = writers.write(a.corpus, manifest, a.out, a.format, a.encoding, a.side, a.limit, a.workers, a.seed,
                             a.verify)
    except (writers.UnreadableImage, writers.WriterDied, ValueError) as exc:  # one line: the file, or the worker
        raise kittrial.TrialError(" ".join(str(exc).split())) from None
    result.update(info)
    if not a.keep:
        shutil.rmtree(a.out, ignore_errors=True)
    result["kept"] = bool(a.keep)
    result["status"] = "ok"


def dataload(a, result: dict) -> None:
    import measure

    info = measure.dataset_info(a.dataset)
    result["dataset"] = {k: info[k] for k in ("format", "encoding", "side", "images", "payload_bytes", "file_bytes",
                                              "jpeg_quality", "compress_probability")}
    rule = measure.WindowRule.of(a.window_images, a.window_seconds, a.epochs, a.steady_tolerance)
    built, m = measure.measure_loader(a.loader, a.dataset, a.batch, a.workers, a.source, a.seed, rule)
    result.update({"impl": built.impl, "layout": built.layout, "notes": built.notes, **m,
                   "images_per_second_per_worker": m["images_per_second"] / a.workers if m["images_per_second"]
                   else None})
    if built.check is not None:  # untimed, after the window (pytorch-nvjpeg: its decode against the CPU's, #9606)
        result["decode_check"] = check = built.check()
        probe = (check.get("probe") or {}).get("loader") or {}
        if probe.get("corrupted"):
            raise kittrial.TrialError(f"{a.loader}: its decode wrote into memory queued work still used "
                                      f"({probe['corrupted']} of {check['probe']['iterations']} probe iterations)")
    result["status"] = "ok"


def train(a, result: dict) -> None:
    import train_e2e

    if a.loader != "synthetic" and (a.dataset is None or not (a.dataset / "dataset.json").is_file()):
        raise kittrial.TrialError(f"{a.loader} needs --dataset DIR with a dataset.json (datasize --keep)")
    import measure

    # The loader alone: dataload's measurement (source ram); without window flags, whole epochs holding at least
    # --steps batches (what this figure timed before the rule, rounded up to whole epochs).
    rule = (measure.WindowRule.of(a.window_images, a.window_seconds, None, a.steady_tolerance)
            if a.window_images is not None or a.window_seconds is not None
            else measure.WindowRule(min_images=a.steps * a.batch, tolerance=a.steady_tolerance))
    train_e2e.run(a.loader, a.dataset, a.workers, a.batch, a.model, a.precision, a.warmup, a.steps, a.device,
                  a.seed, result, rule)


def error_line(exc: BaseException) -> str:
    """The result's one-line error. A loader worker's failure arrives as torch's re-raised exception, whose message
    is "Caught X in DataLoader worker process N." and the worker's whole traceback: one line of it, joined and cut,
    loses the file name at its end. So: the worker and the traceback's last line (the exception, naming the file)."""
    text = str(exc)
    if "Original Traceback" in text:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        head = lines[0].rstrip(".") if lines else type(exc).__name__
        return " ".join(f"{head}: {lines[-1] if lines else ''}".split())[:kittrial.MAX_ERROR_CHARS]
    return kittrial.one_line(exc)


def main(argv: list[str] | None = None) -> int:
    p = parser()
    try:
        a = p.parse_args(argv)
    except SystemExit as exc:
        if exc.code in (0, None):
            raise
        kittrial.emit({"protocol": kittrial.PROTOCOL, "benchmark": None, "status": "error",
                       "error": f"invalid arguments: {_Parser.last_error}"})
        return 1
    kittrial._claim_stdout()
    import loaders

    result: dict = {"protocol": kittrial.PROTOCOL, "benchmark": a.benchmark, "status": "error", "error": None,
                    "cpu_count": os.cpu_count(), "affinity_cores": len(os.sched_getaffinity(0)),
                    "versions": {"python": platform.python_version(), **loaders.versions()}}
    if a.benchmark == "dataload":
        result.update({"loader": a.loader, "workers": a.workers, "source": a.source, "batch": a.batch,
                       "epochs_asked": a.epochs})
    if a.benchmark == "train":
        result.update({"loader": a.loader, "workers": a.workers, "batch": a.batch})
    try:
        {"datasize": datasize, "dataload": dataload, "train": train}[a.benchmark](a, result)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a result line
        traceback.print_exc(file=sys.stderr)
        result["status"] = "error"
        result["error"] = error_line(exc)
    kittrial.emit(result)
    return 0 if result["status"] == "ok" else 1


def _exit_now(code: int) -> None:
    """End without interpreter finalisation, once the result line is out. On the H200, 2 of 6 ffcv runs printed a
    valid result and then aborted while the interpreter tore down (exit -6, "terminate called without an active
    exception": a native thread pool's destructor, results/reference/logs/h200-call17-dataload-all.log); the measurement was
    complete, the teardown adds nothing. Loader worker processes are killed first so none outlives the trial."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
