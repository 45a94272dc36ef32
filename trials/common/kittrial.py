"""Engine-agnostic trial side of the kitctl trial protocol v1.

A trial program runs ONE candidate and prints ONE result: the last stdout line is
``KIT-RESULT <json>``. This module owns everything that does not depend on the
framework (flags, result skeleton, result line, exit code, failure classification,
data) so that every engine's trial speaks exactly the same protocol.
It must never import a deep-learning framework.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

PROTOCOL = 1
RESULT_PREFIX = "KIT-RESULT "
MAX_ERROR_CHARS = 2000

# Step counts when the host gives none: max-batch is fixed by the protocol
# (one warm-up step, one measured step); throughput defaults are tunable.
THROUGHPUT_WARMUP_STEPS = 10
THROUGHPUT_STEPS = 50

# What a trial keeps between its framework's memory cap and the budget the host gives it (the
# host's budget is B minus the overhead calibrated at a small batch). The memory outside a
# framework's allocator moves by a few MiB with the batch (H200: PyTorch eager 766.8 MiB at batch
# 16, 770.8 at 2,600–8,800; XLA 640–659 MiB over 13 candidates), so a cap of exactly the budget
# lets an allocator that fills it, as a real card's would survive, end 1–4 MiB over B, where the
# host's gate kills it: PyTorch eager fp32 at 16,376 MiB failed at 2,645 that way while 8,832
# passed (results/maxbatch-resnet50-synthetic-20261201T165627Z.json vs …20261129T195932Z.json).
FRAMEWORK_SLACK_MIB = 64


def framework_cap_mib(budget_mib: float) -> float:
    """The cap a trial gives its framework for the host's budget (MiB, at least 1)."""
    return max(1.0, budget_mib - FRAMEWORK_SLACK_MIB)


# CIFAR-10 geometry and per-channel statistics (RGB, on [0, 1] pixels), shared by
# every engine so all of them train on identical tensors.
IMAGE_SHAPE = (32, 32, 3)
NUM_CLASSES = 10
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)

# Messages that mean "an allocator ran out", whatever exception type carries them.
OOM_MARKERS = (
    "out of memory",
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "DefaultCPUAllocator: can't allocate memory",
)


class TrialError(Exception):
    """An expected failure whose message is already fit for the result's `error`."""


# --------------------------------------------------------------------------- flags

def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value
    return parse


_positive_int, _non_negative_int = _int_at_least(1), _int_at_least(0)


class _Parser(argparse.ArgumentParser):
    """Remembers its last usage error so run() can put it into the result line."""

    last_error: str | None = None

    def error(self, message: str):  # type: ignore[override]
        self.last_error = message
        super().error(message)


def build_parser(modes: list[str]) -> argparse.ArgumentParser:
    p = _Parser(description="kitctl trial: runs one candidate, prints one KIT-RESULT line")
    p.add_argument("--benchmark", required=True, choices=["maxbatch", "throughput"])
    p.add_argument("--batch", required=True, type=_positive_int)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--mode", required=True, choices=list(modes))
    p.add_argument("--model", default="resnet50", choices=["resnet50"])
    p.add_argument("--dataset", default="synthetic", choices=["synthetic", "cifar10"])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--memory-budget-mib", type=_positive_int, default=None)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup-steps", type=_non_negative_int, default=None)
    p.add_argument("--steps", type=_positive_int, default=None)
    p.add_argument("--cudnn-benchmark", action="store_true")
    return p


def step_counts(args) -> tuple[int, int]:
    """(warm-up steps, measured steps) for this benchmark."""
    if args.benchmark == "maxbatch":
        return 1, 1
    warmup = THROUGHPUT_WARMUP_STEPS if args.warmup_steps is None else args.warmup_steps
    steps = THROUGHPUT_STEPS if args.steps is None else args.steps
    return warmup, steps


# -------------------------------------------------------------------------- result

def base_result(args, engine: str) -> dict:
    """Result skeleton with every protocol key; the trial fills in what it measures."""
    warmup, steps = step_counts(args)
    result = {
        "protocol": PROTOCOL,
        "engine": engine,
        "mode": args.mode,
        "precision": args.precision,
        "batch": args.batch,
        "status": "error",
        "loss_warmup": None,
        "loss_final": None,
        "parameters": None,
        "step_seconds": None,
        "framework_peak_mib": None,
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "trial_protocol": PROTOCOL,
        },
        "error": "trial finished without a result",
        "benchmark": args.benchmark,
        "settings": {
            "model": args.model,
            "dataset": args.dataset,
            "data_dir": args.data_dir,
            "device": args.device,
            "seed": args.seed,
            "warmup_steps": warmup,
            "steps": steps,
            "memory_budget_mib": args.memory_budget_mib,
            "cudnn_benchmark": bool(args.cudnn_benchmark),
        },
    }
    if args.benchmark == "throughput":
        result.update(images=None, window_seconds=None, warmup_seconds=None,
                      images_per_second=None)
    return result


def record_steps(result: dict, args, warmup_seconds: float, window: float, steps: int,
                 loss_warmup: float | None, loss_final: float | None) -> None:
    """The measured part every trial reports the same way: warm-up time, the timed window
    (throughput: images ÷ window, not a mean of per-step rates) and the losses/status."""
    result["warmup_seconds"] = warmup_seconds
    result["step_seconds"] = window / steps
    if args.benchmark == "throughput":
        images_done = args.batch * steps
        result.update(images=images_done, window_seconds=window,
                      images_per_second=images_done / window if window > 0 else None)
    set_losses(result, loss_warmup, loss_final)


def set_losses(result: dict, loss_warmup: float | None, loss_final: float | None) -> None:
    """Record the losses and set status: ok, or nonfinite if any measured loss is NaN/inf."""
    result["loss_warmup"] = loss_warmup
    result["loss_final"] = loss_final
    bad = {k: v for k, v in (("loss_warmup", loss_warmup), ("loss_final", loss_final))
           if v is not None and not math.isfinite(v)}
    if bad:
        result["status"] = "nonfinite"
        result["error"] = "non-finite loss: " + ", ".join(f"{k}={v!r}" for k, v in bad.items())
    else:
        result["status"] = "ok"
        result["error"] = None


def _finite_or_none(value):
    """JSON has no NaN/inf; the status already says a loss was non-finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


# run() points this at the real stdout and sends fd 1 to stderr, so nothing a
# library prints (even from C code or child processes) can follow the result line.
_result_stream = None


def _out():
    return _result_stream if _result_stream is not None else sys.stdout


def emit(result: dict) -> None:
    line = RESULT_PREFIX + json.dumps(_finite_or_none(result), allow_nan=False,
                                      separators=(",", ":"), default=str)
    sys.stdout.flush()
    out = _out()
    out.flush()
    out.write(line + "\n")
    out.flush()


def one_line(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, TrialError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:MAX_ERROR_CHARS]


def _chain(exc: BaseException | None) -> Iterable[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_oom(exc: BaseException, oom_types: tuple = (MemoryError,),
           markers: Iterable[str] = OOM_MARKERS) -> bool:
    """True when exc, or anything in its cause chain (e.g. a compiler wrapping an
    allocation failure), is an allocation failure by type or by message."""
    markers = tuple(markers)
    for e in _chain(exc):
        if isinstance(e, oom_types) or any(m in str(e) for m in markers):
            return True
    return False


# --------------------------------------------------------------------- test hooks

# Test hook, for the host's own tests: KIT_TRIAL_FAULT makes a trial misbehave on purpose.
#   hang    sleep forever before training (timeout handling)
#   crash   os.abort() before any result is printed (crash handling)
#   garbage print a malformed KIT-RESULT line and exit 0 (parser robustness)
#   nan     the engine makes its loss non-finite (see fault_requested)
#   grow    as soon as the flags are read (before the engine and its device: it works with
#           --device cuda on a host without a GPU), allocate and touch host memory in steps
#           until GROW_CAP_MIB, then sleep forever: a candidate whose memory keeps rising until
#           the host kills it (the VRAM gate's end-to-end tests key a stand-in NVML to its RSS)
FAULT_ENV = "KIT_TRIAL_FAULT"
FAULTS = ("hang", "crash", "garbage", "nan", "grow")
GROW_STEP_MIB = 16
GROW_EVERY_S = 0.01
GROW_CAP_MIB = 1024  # bounded: a host whose kill fails keeps a stuck trial, not a swapping machine


def fault_requested(name: str) -> bool:
    return os.environ.get(FAULT_ENV, "") == name


def _grow_forever() -> None:
    print(f"{FAULT_ENV}=grow: allocating {GROW_STEP_MIB} MiB every {GROW_EVERY_S:g} s up to "
          f"{GROW_CAP_MIB} MiB, then sleeping forever", file=sys.stderr, flush=True)
    held = []
    while len(held) * GROW_STEP_MIB < GROW_CAP_MIB:
        held.append(bytearray(b"\x01") * (GROW_STEP_MIB << 20))  # written, so resident
        time.sleep(GROW_EVERY_S)
    while True:
        time.sleep(3600)


def fault_point() -> None:
    """Called by a trial once its model and data are set up, just before training."""
    fault = os.environ.get(FAULT_ENV, "")
    if fault and fault not in FAULTS:
        raise TrialError(f"unknown {FAULT_ENV}={fault!r} (known: {', '.join(FAULTS)})")
    if fault == "hang":
        print(f"{FAULT_ENV}=hang: sleeping forever", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    if fault == "crash":
        os.abort()
    if fault == "garbage":
        out = _out()
        out.write(RESULT_PREFIX + "{this is not json\n")
        out.flush()
        os._exit(0)


# ---------------------------------------------------------------------------- run

def _claim_stdout() -> None:
    global _result_stream
    sys.stdout.flush()
    _result_stream = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)


def run(argv: list[str] | None, modes: list[str], engine_of: Callable[[str], str],
        body: Callable[[argparse.Namespace, dict], None],
        classify: Callable[[BaseException], str]) -> int:
    """Parse flags, run body(args, result), print the result line, return the exit code.

    body fills `result` and sets its status (normally through set_losses). Any exception
    it raises becomes status classify(exc) ("oom" or "error") with a one-line message;
    the traceback goes to stderr. Exit code is 0 only for status "ok".
    """
    parser = build_parser(modes)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code in (0, None):  # --help
            raise
        # Bad flags still get a result line with every protocol key (the host's parser
        # insists on them), so the host records `error`, not `crash`.
        emit({"protocol": PROTOCOL, "engine": None, "mode": None, "precision": None, "batch": None,
              "status": "error", "loss_warmup": None, "loss_final": None, "parameters": None,
              "step_seconds": None, "framework_peak_mib": None,
              "versions": {"python": platform.python_version(), "trial_protocol": PROTOCOL},
              "error": f"invalid arguments: {getattr(parser, 'last_error', None)}"})
        return 1

    _claim_stdout()
    if fault_requested("grow"):
        _grow_forever()
    result = base_result(args, engine_of(args.mode))
    try:
        body(args, result)
    except Exception as exc:  # noqa: BLE001 - every failure must become a result line
        traceback.print_exc(file=sys.stderr)
        result["status"] = classify(exc)
        result["error"] = one_line(exc)
    emit(result)
    return 0 if result["status"] == "ok" else 1


# ---------------------------------------------------------------------------- data

def synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic random CIFAR-shaped data: uint8 N×32×32×3 (HWC), int64 labels 0..9."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, *IMAGE_SHAPE), dtype=np.uint8)
    labels = rng.integers(0, NUM_CLASSES, size=n, dtype=np.int64)
    return images, labels


_RECORD_PIXELS = 32 * 32 * 3
_BIN_RECORD = 1 + _RECORD_PIXELS
_BIN_DIR, _PY_DIR = "cifar-10-batches-bin", "cifar-10-batches-py"
_BATCHES = range(1, 6)


def _find_cifar10(data_dir: Path) -> tuple[Path, str]:
    """(folder, "bin"|"py"): data_dir may be the extracted folder or its parent."""
    for folder in (data_dir, data_dir / _BIN_DIR, data_dir / _PY_DIR):
        if (folder / "data_batch_1.bin").is_file():
            return folder, "bin"
        if (folder / "data_batch_1").is_file():
            return folder, "py"
    raise TrialError(
        f"CIFAR-10 not found in {data_dir}: expected {_BIN_DIR}/data_batch_1.bin or "
        f"{_PY_DIR}/data_batch_1 there or in a subfolder of that name")


def _read_bin(path: Path, want: int) -> tuple[np.ndarray, np.ndarray]:
    size = path.stat().st_size
    if size == 0 or size % _BIN_RECORD:
        raise TrialError(f"{path}: size {size} is not a multiple of {_BIN_RECORD}-byte records")
    count = min(want, size // _BIN_RECORD)
    raw = np.fromfile(path, dtype=np.uint8, count=count * _BIN_RECORD).reshape(count, _BIN_RECORD)
    return raw[:, 1:], raw[:, 0].astype(np.int64)


def _read_py(path: Path, want: int) -> tuple[np.ndarray, np.ndarray]:
    # The official python layout is a pickle; only point --data-dir at data you trust.
    with open(path, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise TrialError(f"{path}: not a CIFAR-10 batch (no data/labels keys)")
    data = np.asarray(data, dtype=np.uint8).reshape(-1, _RECORD_PIXELS)
    labels = np.asarray(labels, dtype=np.int64)
    if len(labels) != len(data):
        raise TrialError(f"{path}: {len(data)} images but {len(labels)} labels")
    return data[:want], labels[:want]


def load_cifar10(data_dir, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The first n training records in file order, uint8 N×32×32×3 HWC and int64 labels.

    Reads data_batch_1.. only until n records are in hand. If the dataset is smaller
    than n, record i is dataset[i % size], so every engine sees the same batch.
    `seed` is accepted for symmetry with synthetic(); the order is fixed by design.
    """
    images, labels, _ = _load_cifar10(data_dir, n)
    return images, labels


def _load_cifar10(data_dir, n: int) -> tuple[np.ndarray, np.ndarray, dict]:
    if data_dir is None:
        raise TrialError("--dataset cifar10 needs --data-dir")
    folder, layout = _find_cifar10(Path(data_dir))
    reader, suffix = (_read_bin, ".bin") if layout == "bin" else (_read_py, "")
    chunks, labels, files, have = [], [], [], 0
    try:
        for i in _BATCHES:
            path = folder / f"data_batch_{i}{suffix}"
            if have >= n or not path.is_file():
                break
            x, y = reader(path, n - have)
            chunks.append(x)
            labels.append(y)
            files.append(path.name)
            have += len(y)
    except TrialError:
        raise
    except Exception as exc:  # unreadable/corrupt file: one clear line, not a traceback
        raise TrialError(f"cannot read CIFAR-10 from {folder}: {one_line(exc)}") from exc
    if have == 0:
        raise TrialError(f"{folder}: CIFAR-10 batches hold no records")
    flat, y = np.concatenate(chunks), np.concatenate(labels)
    if have < n:
        index = np.arange(n) % have
        flat, y = flat[index], y[index]
    if y.min() < 0 or y.max() >= NUM_CLASSES:
        raise TrialError(f"{folder}: labels outside 0..{NUM_CLASSES - 1}")
    images = flat.reshape(n, 3, 32, 32).transpose(0, 2, 3, 1)  # stored CHW -> HWC
    info = {"folder": str(folder), "layout": layout, "files": files,
            "records_read": have, "wrapped": have < n}
    return np.ascontiguousarray(images), y, info


def load_data(args) -> tuple[np.ndarray, np.ndarray, dict]:
    """The batch the trial trains on, plus a description for settings."""
    if args.dataset == "cifar10":
        images, labels, info = _load_cifar10(args.data_dir, args.batch)
        info = {"name": "cifar10", **info}
    else:
        images, labels = synthetic(args.batch, args.seed)
        info = {"name": "synthetic", "generator": "numpy default_rng(seed)"}
    info.update(shape_hwc=list(IMAGE_SHAPE), num_classes=NUM_CLASSES,
                mean=list(CIFAR10_MEAN), std=list(CIFAR10_STD))
    return images, labels, info
