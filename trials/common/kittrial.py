"""Engine-agnostic trial side of the kitctl trial protocol v1.

A trial program runs ONE candidate and prints ONE result: the last stdout line is
``KIT-RESULT <json>``. This module owns everything that does not depend on the
framework (flags, result skeleton, result line, exit code, failure classification,
data) so that every engine's trial speaks exactly the same protocol.
It must never import a deep-learning framework.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import pickle
import platform
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

PROTOCOL = 1
RESULT_PREFIX = "KIT-RESULT "
MAX_ERROR_CHARS = 2000

# Step counts when the host gives neither steps nor a window rule (hosts before the rule): max-batch
# is fixed by the protocol (one warm-up step, one measured step).
THROUGHPUT_WARMUP_STEPS = 10
THROUGHPUT_STEPS = 50

# The throughput window rule (docs/method.md, "Throughput"): the host passes --window-images and
# --window-seconds; the trial warms up in chunks until two successive chunk rates agree within
# --steady-tolerance (at most --max-warmup-seconds), then times whole chunks until both minimums hold.
DEFAULT_STEADY_TOLERANCE = 0.02
DEFAULT_MAX_WARMUP_S = 120.0
# A chunk grows (doubling from one step) until it lasts this long, up to MAX_CHUNK_STEPS: long enough
# that the synchronisation ending each chunk is noise, short enough that a window holds many chunks.
CHUNK_TARGET_S = 0.25
MAX_CHUNK_STEPS = 50
MIN_WINDOW_CHUNKS = 4  # the rule's window holds at least this many chunks: two per half to compare
MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 32, 512  # ResNet-50 downsamples 32x: 32 px leaves a 1x1 map

# What a trial keeps between its framework's memory cap and the budget the host gives it (the
# host's budget is B minus the overhead calibrated at a small batch). The memory outside a
# framework's allocator moves by a few MiB with the batch (H200: PyTorch eager 766.8 MiB at batch
# 16, 770.8 at 2,600–8,800; XLA 640–659 MiB over 13 candidates), so a cap of exactly the budget
# lets an allocator that fills it, as a real card's would survive, end 1–4 MiB over B, where the
# host's gate kills it: PyTorch eager fp32 at 16,376 MiB failed at 2,645 that way while 8,832
# passed (results/reference/maxbatch-resnet50-synthetic-20261201T165627Z.json vs …20261129T195932Z.json).
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


def _float_in(low: float, high: float, low_open: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if (value is None or not math.isfinite(value) or value > high
                or (value <= low if low_open else value < low)):
            bound = f"> {low:g}" if low_open else f">= {low:g}"
            raise argparse.ArgumentTypeError(f"must be a number {bound} and <= {high:g}, got {text!r}")
        return value
    return parse


def _image_size(text: str) -> int:
    value = _positive_int(text)
    if not MIN_IMAGE_SIZE <= value <= MAX_IMAGE_SIZE:
        raise argparse.ArgumentTypeError(
            f"must be between {MIN_IMAGE_SIZE} and {MAX_IMAGE_SIZE} pixels, got {text!r}")
    return value


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
    p.add_argument("--image-size", type=_image_size, default=IMAGE_SHAPE[0])
    p.add_argument("--window-images", type=_positive_int, default=None)
    p.add_argument("--window-seconds", type=_float_in(0.0, 86400.0, low_open=True), default=None)
    p.add_argument("--steady-tolerance", type=_float_in(0.0, 1.0, low_open=True),
                   default=DEFAULT_STEADY_TOLERANCE)
    p.add_argument("--max-warmup-seconds", type=_float_in(0.0, 86400.0), default=None)
    return p


def uses_window_rule(args) -> bool:
    """Throughput whose window is set by the rule (--window-images/--window-seconds), not by --steps."""
    return (args.benchmark == "throughput" and args.steps is None
            and (args.window_images is not None or args.window_seconds is not None))


def adaptive_warmup(args) -> bool:
    """Throughput warms up until steady unless --warmup-steps fixes it: under the window rule, or
    whenever the host sets the bound (--max-warmup-seconds). Hosts before the rule: 10 fixed steps."""
    return (args.benchmark == "throughput" and args.warmup_steps is None
            and (uses_window_rule(args) or args.max_warmup_seconds is not None))


def step_counts(args) -> tuple[int, int]:
    """(warm-up steps, measured steps) for this benchmark: fixed counts; under the window rule the
    warm-up's minimum (the engine may need more) and 0 measured steps (the rule decides)."""
    if args.benchmark == "maxbatch":
        return 1, 1
    warmup = THROUGHPUT_WARMUP_STEPS if args.warmup_steps is None else args.warmup_steps
    if adaptive_warmup(args):
        warmup = 1
    if uses_window_rule(args):
        return warmup, 0
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
            # null: decided by the window rule as the run goes (result["warmup"], result["window"])
            "warmup_steps": None if adaptive_warmup(args) else warmup,
            "steps": None if uses_window_rule(args) else steps,
            "memory_budget_mib": args.memory_budget_mib,
            "cudnn_benchmark": bool(args.cudnn_benchmark),
            "image_size": args.image_size,
        },
    }
    if args.benchmark == "throughput":
        result.update(images=None, window_seconds=None, warmup_seconds=None,
                      images_per_second=None, window=None, warmup=None)
        result["settings"].update(window_images=args.window_images, window_seconds=args.window_seconds,
                                  steady_tolerance=args.steady_tolerance,
                                  max_warmup_seconds=args.max_warmup_seconds)
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


class Stepper:
    """What the throughput window needs of an engine (each trial subclasses it).

    `first(n)` runs the engine's first n steps (compilation, autotuning, graph capture: whatever
    the engine does before it can replay steps); `run(n)` enqueues n more; both return the last
    step's loss as the engine holds it (a device value), without waiting for it. `sync(loss)` waits
    until everything enqueued has finished; `value(loss)` is the loss as a float. `device_mark()`
    records a point on the device's own timeline (None where the engine has no device clock) and
    `device_seconds(a, b)` reads the time between two marks once both have passed."""

    def first(self, n: int):
        return self.run(n)

    def run(self, n: int):
        raise NotImplementedError

    def sync(self, loss) -> None:
        raise NotImplementedError

    def value(self, loss) -> float | None:
        raise NotImplementedError

    def device_mark(self):
        return None

    def device_seconds(self, a, b) -> float:
        raise NotImplementedError


def _agree(a: float, b: float, tolerance: float) -> bool:
    mean = (a + b) / 2
    return mean > 0 and abs(a - b) / mean <= tolerance


def _warm_up(args, stepper: Stepper) -> tuple[object, dict, int, bool]:
    """The warm-up: fixed steps, or the engine's first step(s) then chunks until two successive
    chunk rates agree within the tolerance (bounded in time). (last loss, warm-up record, chunk
    size, whether that size is final: a chunk stops growing once it lasts CHUNK_TARGET_S)."""
    warmup_steps, _ = step_counts(args)
    clock = time.perf_counter
    t0 = clock()
    if not adaptive_warmup(args):
        loss = stepper.first(warmup_steps)
        stepper.sync(loss)
        record = {"rule": f"fixed: {warmup_steps} steps", "steps": warmup_steps,
                  "seconds": clock() - t0, "converged": None, "chunk_rates": []}
        return loss, record, 1, False
    loss = stepper.first(1)  # the engine's own minimum (a graph capture, a compile) comes first
    stepper.sync(loss)
    steps, chunk, rates, sized, converged = 1, 1, [], [], False
    max_s = DEFAULT_MAX_WARMUP_S if args.max_warmup_seconds is None else args.max_warmup_seconds
    t_chunks = clock()
    while True:
        t = clock()
        loss = stepper.run(chunk)
        stepper.sync(loss)
        dt = clock() - t
        steps += chunk
        rate = chunk * args.batch / dt if dt > 0 else float("inf")
        rates.append(rate)
        if dt < CHUNK_TARGET_S and chunk < MAX_CHUNK_STEPS:
            chunk = min(MAX_CHUNK_STEPS, chunk * 2)  # rates of unequal chunks are not compared
        else:
            sized.append(rate)
            if len(sized) >= 2 and _agree(sized[-2], sized[-1], args.steady_tolerance):
                converged = True
                break
        if clock() - t_chunks >= max_s:
            break
    record = {"rule": f"until two successive chunks within {args.steady_tolerance:g} (at most {max_s:g} s)",
              "steps": steps, "seconds": clock() - t0, "converged": converged, "chunk_rates": rates}
    return loss, record, chunk, bool(sized)


def halves(chunk_steps: list[int], chunk_seconds: list[float], batch: int) -> tuple[float | None, float | None]:
    """images/s of the window's first and second half of chunks (an odd middle chunk in neither)."""
    n = len(chunk_steps)
    if n < 2:
        return None, None
    k = n // 2

    def rate(steps: list[int], secs: list[float]) -> float | None:
        total = sum(secs)
        return sum(steps) * batch / total if total > 0 else None
    return rate(chunk_steps[:k], chunk_seconds[:k]), rate(chunk_steps[n - k:], chunk_seconds[n - k:])


def _rule_text(images: int, seconds: float) -> str:
    parts = ([f"at least {images} images"] if images else []) + ([f"at least {seconds:g} s"] if seconds else [])
    return " and ".join(parts + [f"at least {MIN_WINDOW_CHUNKS} chunks"])


def measure_throughput(args, result: dict, stepper: Stepper, extra_warmup_seconds: float = 0.0) -> None:
    """Warm up, then time whole chunks of steps until the window holds --steps steps, or (the window
    rule) at least --window-images images and --window-seconds seconds; record it all (the window's
    per-chunk times, its halves and whether they agree) and the losses. Max-batch: one warm-up step and
    one measured step, as the protocol fixes."""
    loss, warm, chunk, sized = _warm_up(args, stepper)
    loss_warmup = stepper.value(loss)
    warm["seconds"] += extra_warmup_seconds
    _, fixed_steps = step_counts(args)
    rule = uses_window_rule(args)
    if not rule:
        chunk = max(1, -(-fixed_steps // 10)) if args.benchmark == "throughput" else fixed_steps
    want_images = (args.window_images or 0) if rule else 0
    want_seconds = (args.window_seconds or 0.0) if rule else 0.0
    clock = time.perf_counter
    marks = [stepper.device_mark()]
    steps, chunk_steps, chunk_seconds = 0, [], []
    start_unix, t0 = time.time(), clock()
    prev = t0
    while True:
        n = chunk if rule else min(chunk, fixed_steps - steps)
        loss = stepper.run(n)
        marks.append(stepper.device_mark())
        stepper.sync(loss)
        now = clock()
        steps += n
        chunk_steps.append(n)
        chunk_seconds.append(now - prev)
        prev = now
        if rule:
            if (steps * args.batch >= want_images and now - t0 >= want_seconds
                    and len(chunk_steps) >= MIN_WINDOW_CHUNKS):
                break
            if not sized and chunk < MAX_CHUNK_STEPS and chunk_seconds[-1] < CHUNK_TARGET_S:
                chunk = min(MAX_CHUNK_STEPS, chunk * 2)  # the warm-up gave no final size: find it
            else:
                sized = True
        elif steps >= fixed_steps:
            break
    end_unix, window = time.time(), prev - t0
    loss_final = stepper.value(loss)
    device = None
    if marks[0] is not None:
        device = [stepper.device_seconds(a, b) for a, b in zip(marks, marks[1:])]
    if args.benchmark == "throughput":
        result["warmup"] = warm
        first, second = halves(chunk_steps, chunk_seconds, args.batch)
        change = (second - first) / first if first and second is not None else None
        result["window"] = {
            "rule": (_rule_text(want_images, want_seconds) if rule else f"fixed: {fixed_steps} steps"),
            "steps": steps, "images": steps * args.batch, "seconds": window,
            "chunk_steps": chunk_steps[0], "chunk_seconds": chunk_seconds,
            "chunk_device_seconds": device, "start_unix": start_unix, "end_unix": end_unix,
            "first_half_ips": first, "second_half_ips": second, "halves_change": change,
            "tolerance": args.steady_tolerance,
            "steady": None if change is None else abs(change) <= args.steady_tolerance,
        }
        if len(set(chunk_steps)) > 1:
            result["window"]["chunk_step_counts"] = chunk_steps
    record_steps(result, args, warm["seconds"], window, steps, loss_warmup, loss_final)


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
# Set by the host's local runtime (--prestart): "1", read the arguments from stdin after preloading (_prestart);
# "fork", serve candidates on the socket that is stdin, forking one process per candidate (_serve).
PRESTART_ENV = "KIT_PRESTART"
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


def process_age_s() -> float | None:
    """Seconds since this process was started (Linux: its start time, /proc/self/stat field 22, against
    /proc/uptime; both in 1/100 s): the interpreter's start-up and the trial's own imports before run()."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return round(max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK")), 3)
    except (OSError, ValueError, IndexError):
        return None


def cpu_seconds() -> float | None:
    """CPU seconds (user + system) of this process and its reaped children so far: a candidate's threads (an XLA
    compile's, a loader's) are in it. None where the platform has no getrusage."""
    try:
        import resource
    except ImportError:
        return None
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def cpu_use(cpu0: float | None, wall_s: float | None) -> dict | None:
    """result["cpu"]: the CPU seconds since cpu0 over the wall seconds they took, and their ratio (the cores the
    candidate kept busy on average: how much of the host several candidates side by side would share)."""
    cpu = cpu_seconds()
    if cpu is None or cpu0 is None or not wall_s or wall_s <= 0:
        return None
    return {"cpu_s": round(cpu - cpu0, 3), "wall_s": round(wall_s, 3), "cores": round((cpu - cpu0) / wall_s, 2)}


@contextlib.contextmanager
def phase(result: dict, name: str):
    """Time one phase of the candidate into result["phases"][name + "_s"] (also when it raises: an OOM's
    phases say where the time went before it)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        result.setdefault("phases", {})[f"{name}_s"] = round(time.perf_counter() - t0, 4)


def _preloaded(preload: Callable[[], None] | None) -> tuple[float | None, float]:
    """Import the framework ahead of the candidate (`preload`, which must not touch the device): the process's
    age before it and the seconds it took."""
    started = process_age_s()
    t0 = time.perf_counter()
    if preload is not None:
        try:
            preload()
        except Exception:  # noqa: BLE001 - the body's own import raises it again, into a result line
            pass
    return started, round(time.perf_counter() - t0, 4)


def _prestart(preload: Callable[[], None] | None) -> tuple[list[str], dict] | None:
    """A prestarted trial (PRESTART_ENV=1; the host's --prestart): start the interpreter and import the
    framework (`preload`, which must not touch the device) before the candidate is known, then wait for its
    arguments, one JSON line {"argv": [...]} on stdin. Returns (argv, what the prestart took), or None when stdin
    ends first (the host closed an unused spare). The process is still fresh for the candidate: nothing of
    the device has been initialised and no other candidate ran in it."""
    started, imported = _preloaded(preload)
    t1 = time.perf_counter()
    line = sys.stdin.readline()
    waited = time.perf_counter() - t1
    if not line.strip():
        return None
    argv = json.loads(line)["argv"]
    return [str(a) for a in argv], {"startup_s": started, "import_s": imported,
                                    "waited_s": round(waited, 4)}


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with(parent: int) -> None:
    """A forked candidate is killed when its fork server dies (the server dies with the host: its own
    parent-death signal, set by the host before exec); if the server is already gone, now."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def _serve(preload: Callable[[], None] | None) -> tuple[list[str], dict] | None:
    """A fork server (PRESTART_ENV=fork; the host's --prestart on a GPU): import the framework once (`preload`,
    which must not touch the device), then for each request on the SOCK_SEQPACKET socket that is stdin — one
    JSON message {"argv": [...]} carrying the candidate's stdout and stderr as two file descriptors — fork one
    process for it, tell the host its pid ({"pid": N}), wait for it and tell its exit code ({"exit": N}, negative
    for a signal, as Popen's returncode). One candidate at a time: a slot runs one. The forked process returns
    (argv, what the prestart took) and runs as a trial; the server returns None when the host closes the socket.
    Each candidate is still fresh where it matters: the server never initialises the device (CUDA is first
    touched in the child), and no candidate runs in the server or in another candidate's process."""
    started, imported = _preloaded(preload)
    server = os.getpid()
    sock = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the candidates' stdin: nothing
    os.close(null)
    while True:
        t1 = time.perf_counter()
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 2)
        except OSError:
            return None
        if not msg or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            return None
        waited = round(time.perf_counter() - t1, 4)
        argv = [str(a) for a in json.loads(msg)["argv"]]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            sock.close()
            os.setpgid(0, 0)  # its own process group: the host kills the candidate and what it started
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            for fd in fds:
                os.close(fd)
            _die_with(server)
            return argv, {"startup_s": started, "import_s": imported, "waited_s": waited, "forked": True}
        for fd in fds:
            os.close(fd)
        try:
            os.setpgid(pid, pid)  # also here: the host may signal the group before the child ran
        except OSError:
            pass
        try:
            sock.send(json.dumps({"pid": pid}).encode())
            _, status = os.waitpid(pid, 0)
            sock.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
        except OSError:  # the host is gone or closed the socket: the candidate dies with this server
            return None


def run(argv: list[str] | None, modes: list[str], engine_of: Callable[[str], str],
        body: Callable[[argparse.Namespace, dict], None],
        classify: Callable[[BaseException], str],
        preload: Callable[[], None] | None = None) -> int:
    """Parse flags, run body(args, result), print the result line, return the exit code.

    body fills `result` and sets its status (normally through set_losses). Any exception
    it raises becomes status classify(exc) ("oom" or "error") with a one-line message;
    the traceback goes to stderr. Exit code is 0 only for status "ok". `preload`: what a
    prestarted trial imports before its arguments come (_prestart).
    """
    prestarted = None
    if os.environ.get(PRESTART_ENV) in ("1", "fork"):
        prestarted = (_serve if os.environ[PRESTART_ENV] == "fork" else _prestart)(preload)
        if prestarted is None:
            return 0  # stdin closed before any (more) arguments came: the host no longer needs this process
        argv, prestarted = prestarted
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

    started = process_age_s()
    # CPU use from the candidate's own start: a fresh process's from its start (interpreter and import included,
    # as in its wall time); a prestarted or forked one's from its arguments (its import is under prestart).
    fresh = prestarted is None and started is not None
    cpu0 = 0.0 if fresh else cpu_seconds()
    t_args = time.perf_counter()
    _claim_stdout()
    if fault_requested("grow"):
        _grow_forever()
    result = base_result(args, engine_of(args.mode))
    # Where a candidate's time goes (the trial fills in its own phases: import, device, build, steps); the host's
    # elapsed time beyond these is process creation, exit and teardown. A prestarted trial's start-up and
    # framework import happened before its arguments came, outside the candidate's time: recorded apart.
    if prestarted is None:
        result["phases"] = {"startup_s": started}
    else:
        result["phases"] = {}
        result["prestart"] = prestarted
    try:
        body(args, result)
    except Exception as exc:  # noqa: BLE001 - every failure must become a result line
        traceback.print_exc(file=sys.stderr)
        result["status"] = classify(exc)
        result["error"] = one_line(exc)
    result["cpu"] = cpu_use(cpu0, (started if fresh else 0.0) + time.perf_counter() - t_args)
    emit(result)
    return 0 if result["status"] == "ok" else 1


# ---------------------------------------------------------------------------- data

def synthetic(n: int, seed: int, size: int = IMAGE_SHAPE[0]) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic random data: uint8 N×size×size×3 (HWC; CIFAR-10's 32 by default), int64 labels 0..9."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8)
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


def _np_global(module: str, name: str):
    """numpy's own reconstructor `name`, under numpy 2's module names or numpy 1's."""
    import importlib

    for mod in (module, module.replace("numpy.core", "numpy._core"), module.replace("numpy._core", "numpy.core")):
        try:
            return getattr(importlib.import_module(mod), name)
        except (ImportError, AttributeError):
            continue
    raise pickle.UnpicklingError(f"numpy has no {module}.{name}")


def _plain_dtype(*args):
    """numpy.dtype for an unpickled array: plain numbers only (an object dtype would unpickle any object)."""
    d = np.dtype(*args[:1])
    if d.hasobject or d.kind == "V":
        raise pickle.UnpicklingError(f"numpy dtype {d} (only plain numbers are allowed)")
    return np.dtype(*args)


def _latin1(text, encoding="latin1"):
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode other than a str to latin-1")
    return text.encode("latin-1")


class _CifarUnpickler(pickle.Unpickler):
    """The python layout is a pickle, and a pickle can name any callable (os.system): every global goes through
    find_class, which allows numpy's array/dtype reconstructors and latin-1 bytes only (docs/data-trust.md)."""

    _NUMPY = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
              ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
              ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar")}

    def find_class(self, module, name):
        if (module, name) == ("numpy", "ndarray"):
            return np.ndarray
        if (module, name) == ("numpy", "dtype"):
            return _plain_dtype
        if (module, name) == ("_codecs", "encode"):
            return _latin1
        if (module, name) in self._NUMPY:
            return _np_global(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which a CIFAR-10 batch never does "
                                     "(refused: a pickle can run code)")


def _read_py(path: Path, want: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as f:
            batch = _CifarUnpickler(f, encoding="bytes").load()
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever hostile bytes raise: one line naming the file
        raise TrialError(f"{path}: not a CIFAR-10 python batch ({one_line(exc)})") from None
    if not isinstance(batch, dict):
        raise TrialError(f"{path}: a pickle of {type(batch).__name__}, not a CIFAR-10 batch's dict")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise TrialError(f"{path}: not a CIFAR-10 batch (no data/labels keys)")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.size == 0 or data.size % _RECORD_PIXELS \
            or (data.ndim > 1 and data.shape[-1] != _RECORD_PIXELS):
        what = f"{data.dtype} of shape {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise TrialError(f"{path}: data is {what}, not uint8 records of {_RECORD_PIXELS} pixels")
    data = data.reshape(-1, _RECORD_PIXELS)
    try:
        labels = np.asarray(labels)
    except Exception:  # noqa: BLE001
        labels = np.asarray([None])
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise TrialError(f"{path}: labels are not a list of integers")
    labels = labels.astype(np.int64)
    if len(labels) != len(data):
        raise TrialError(f"{path}: {len(data)} images but {len(labels)} labels")
    if len(labels) and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise TrialError(f"{path}: labels outside 0..{NUM_CLASSES - 1}")
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
    size = getattr(args, "image_size", IMAGE_SHAPE[0])
    if args.dataset == "cifar10":
        if size != IMAGE_SHAPE[0]:
            raise TrialError(f"--dataset cifar10 is {IMAGE_SHAPE[0]}x{IMAGE_SHAPE[1]} images: "
                             f"--image-size {size} needs --dataset synthetic")
        images, labels, info = _load_cifar10(args.data_dir, args.batch)
        info = {"name": "cifar10", **info}
    else:
        images, labels = synthetic(args.batch, args.seed, size)
        info = {"name": "synthetic", "generator": "numpy default_rng(seed)"}
    info.update(shape_hwc=[size, size, 3], num_classes=NUM_CLASSES,
                mean=list(CIFAR10_MEAN), std=list(CIFAR10_STD))
    return images, labels, info
