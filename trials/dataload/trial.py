#!/usr/bin/env python3
"""Data-loading trial for kitctl: one unit of work in, one KIT-RESULT line out (protocol 1's framing).

    trial.py datasize --corpus C --out DIR --format ffcv --encoding jpeg90 --side 256 [--limit N] [--workers W]
    trial.py dataload --loader ffcv --dataset DIR --workers N --source ram|cold [--batch 256] [--epochs 2]
    trial.py train --loader ffcv|synthetic [--dataset DIR] --workers N --model resnet50|resnet18 [--precision auto]
                   [--batch 256] [--warmup 10] [--steps 50] [--device auto|cpu|cuda]

datasize: writes one dataset (format x encoding x max side) and reports its bytes (writers.py).
dataload: builds one loader, runs one warm-up epoch (worker start, JIT compilation), then `--epochs`
timed epochs, each over the whole dataset. Source `ram`: every file warmed into the page cache before
each epoch and checked with mincore; `cold`: every file dropped (posix_fadvise DONTNEED) before each
epoch and checked with mincore. The result records the measured resident fraction per epoch.
Exit 0 only when status is ok.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import time
import traceback
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for _p in (_HERE.parent / "common", _HERE):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import kittrial  # noqa: E402

# A resident fraction this far from the asked-for source makes the run an error, not a mislabelled figure.
RAM_MIN_RESIDENT, COLD_MAX_RESIDENT = 0.98, 0.05


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
    d = sub.add_parser("dataload")
    d.add_argument("--loader", required=True, choices=loaders.LOADERS)
    d.add_argument("--dataset", required=True, type=Path)
    d.add_argument("--workers", required=True, type=_positive)
    d.add_argument("--source", default="ram", choices=["ram", "cold"])
    d.add_argument("--batch", type=_positive, default=256)
    d.add_argument("--epochs", type=_positive, default=2)
    d.add_argument("--seed", type=int, default=0)
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
    return p


def datasize(a, result: dict) -> None:
    import corpus
    import writers

    manifest = corpus.read_manifest(a.corpus)
    try:
        info = writers.write(a.corpus, manifest, a.out, a.format, a.encoding, a.side, a.limit, a.workers, a.seed)
    except (writers.UnreadableImage, writers.WriterDied) as exc:  # one line: the file, or the worker that died
        raise kittrial.TrialError(str(exc)) from None
    result.update(info)
    if not a.keep:
        shutil.rmtree(a.out, ignore_errors=True)
    result["kept"] = bool(a.keep)
    result["status"] = "ok"


def dataload(a, result: dict) -> None:
    import loaders
    import pagecache

    fmt = loaders.FORMAT_OF[a.loader]
    info_path = a.dataset / "dataset.json"
    if not info_path.is_file():
        raise kittrial.TrialError(f"{a.dataset}: no dataset.json (write the dataset with datasize --keep)")
    import json

    info = json.loads(info_path.read_text())
    if info["format"] != fmt:
        raise kittrial.TrialError(f"{a.loader} reads {fmt} datasets; {a.dataset} is {info['format']}")
    files = loaders.data_files(fmt, a.dataset)
    built = loaders.build(a.loader, a.dataset, a.batch, a.workers, a.source, a.seed)
    result.update({"dataset": {k: info[k] for k in ("format", "encoding", "side", "images", "payload_bytes",
                                                    "file_bytes", "jpeg_quality", "compress_probability")},
                   "impl": built.impl, "layout": built.layout, "notes": built.notes})

    def prepare() -> tuple[float, float]:
        if built.reset is not None:
            built.reset()
        t0 = time.perf_counter()
        frac = pagecache.warm(files) if a.source == "ram" else pagecache.drop(files)
        return frac, time.perf_counter() - t0

    def one_epoch() -> tuple[int, float, list[int], float | None]:
        """(images, seconds, batch shape, seconds to the first batch: worker start and pipeline fill are inside)."""
        images, shape, first_s = 0, None, None
        t0 = time.perf_counter()
        for batch in built.epoch():
            x = batch[0] if isinstance(batch, (tuple, list)) else batch
            images += int(x.shape[0])
            if shape is None:
                first_s = time.perf_counter() - t0
                shape = [int(s) for s in x.shape]
                dtype = str(x.dtype)
                if "uint8" not in dtype or 224 not in shape[1:]:
                    raise kittrial.TrialError(f"{a.loader}: batch {shape} {dtype}, expected uint8 224x224 images")
        return images, time.perf_counter() - t0, shape or [], first_s

    frac, prep_s = prepare()
    images, warm_s, shape, _ = one_epoch()
    if images != info["images"]:
        raise kittrial.TrialError(f"{a.loader}: the warm-up epoch gave {images} images of {info['images']}")
    epochs = []
    for _ in range(a.epochs):
        frac, prep_s = prepare()
        bad = frac < RAM_MIN_RESIDENT if a.source == "ram" else frac > COLD_MAX_RESIDENT
        if bad:
            raise kittrial.TrialError(f"source {a.source}: {frac:.1%} of the dataset's pages were resident "
                                      "before the epoch (mincore); the asked-for source could not be made"
                                      + ("; posix_fadvise(DONTNEED) evicts only for the files' owner on recent "
                                         "kernels: run as the dataset's owner" if a.source == "cold" else ""))
        n, secs, _, first_s = one_epoch()
        epochs.append({"images": n, "seconds": secs, "images_per_second": n / secs, "resident_before": frac,
                       "prepare_seconds": prep_s, "first_batch_seconds": first_s})
    total_n = sum(e["images"] for e in epochs)
    total_s = sum(e["seconds"] for e in epochs)
    result.update({"batch_shape": shape, "warmup_seconds": warm_s, "epochs": epochs, "images": total_n,
                   "window_seconds": total_s, "images_per_second": total_n / total_s,
                   "images_per_second_per_worker": total_n / total_s / a.workers, "status": "ok"})


def train(a, result: dict) -> None:
    import train_e2e

    if a.loader != "synthetic" and (a.dataset is None or not (a.dataset / "dataset.json").is_file()):
        raise kittrial.TrialError(f"{a.loader} needs --dataset DIR with a dataset.json (datasize --keep)")
    train_e2e.run(a.loader, a.dataset, a.workers, a.batch, a.model, a.precision, a.warmup, a.steps, a.device,
                  a.seed, result)


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
        result["error"] = kittrial.one_line(exc)
    kittrial.emit(result)
    return 0 if result["status"] == "ok" else 1


def _exit_now(code: int) -> None:
    """End without interpreter finalisation, once the result line is out. On the H200, 2 of 6 ffcv runs printed a
    valid result and then aborted while the interpreter tore down (exit -6, "terminate called without an active
    exception": a native thread pool's destructor, results/logs/h200-call17-dataload-all.log); the measurement was
    complete, the teardown adds nothing. Loader worker processes are killed first so none outlives the trial."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
