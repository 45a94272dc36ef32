"""What every run shares, typed: the settings of `kitctl run <benchmark>` common to the training
benchmarks (engines, precision, device, GPU budget, runtime, data; their flags: kitctl.cli.options) and `RunConfig`, the frozen
configuration built and checked once from them. A benchmark's own config holds a `RunConfig`
beside its own fields; the artifact's "configuration" keys are written by `json_head`/`json_tail`.
"""
from __future__ import annotations

import enum
import math
import os
import sys
from dataclasses import dataclass
from typing import Any


from ..core.device import DeviceChoice, choose
from ..core.engines import MODEL_MIN_BATCH, parse_engines
from ..errors import Fail


# The engine benchmarks' default --timeout for one candidate or run; each data benchmark declares its own
# (its config's DEFAULT_TIMEOUT_S: a dataset written, a window of epochs), docs/running.md's defaults table
# states them all and tests/test_data_flags.py holds it to them.
DEFAULT_TIMEOUT_S = 900.0
# The runtimes a data benchmark's trials run in (the engine benchmarks also take auto and ray: RuntimeName).
DATA_RUNTIMES = ("local", "docker")
# Sane bounds, checked before anything is written (a run's and a resumed partial's alike).
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a candidate that may run longer than a week is a typo
MIN_MEMORY_LIMIT_MIB = 6  # Docker's minimum container memory; no trial starts in less anyway
MAX_COUNT = 2**31 - 1  # batches, runs, steps, MiB: what a trial's 32-bit argument parsing takes
MODEL = "resnet50"
# The input side: CIFAR-10's 32 (the reference reports' geometry) by default, 224 for ImageNet's.
DEFAULT_IMAGE_SIZE = 32
MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 32, 512  # ResNet-50 downsamples 32x: 32 px leaves a 1x1 map


class Precision(str, enum.Enum):
    fp32 = "fp32"
    bf16 = "bf16"
    both = "both"


class Device(str, enum.Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class RuntimeName(str, enum.Enum):
    auto = "auto"
    local = "local"
    docker = "docker"


class GpuRequestName(str, enum.Enum):
    auto = "auto"
    toolkit = "toolkit"
    cdi = "cdi"


class Dataset(str, enum.Enum):
    synthetic = "synthetic"
    cifar10 = "cifar10"


# The common configuration keys a run writes, with their JSON types; a partial's are checked against
# these and then rebuilt through the very checks its flags went through.
INT, NUM, STR, BOOL, LIST = (int,), (int, float), (str,), (bool,), (list,)
COMMON_KEYS = {"engines": LIST, "precisions": LIST, "device": STR, "gpu": STR + (type(None),),
               "vram_limit_mib": INT + (type(None),), "reserve_mib": INT, "timeout_s": NUM,
               "runtime": STR, "model": STR, "dataset": STR, "data_dir": STR + (type(None),),
               "cudnn_benchmark": BOOL, "memory_limit_mib": INT + (type(None),)}
_PRECISIONS = {("fp32",): "fp32", ("bf16",): "bf16", ("fp32", "bf16"): "both"}


@dataclass(frozen=True)
class RunConfig:
    """The model, data, device and budget a run uses (both training benchmarks)."""

    engines: tuple[str, ...]
    precisions: tuple[str, ...]
    device: str
    gpu: str | None
    vram_limit_mib: int | None
    reserve_mib: int
    timeout_s: float
    runtime: str
    model: str
    dataset: str
    data_dir: str | None
    cudnn_benchmark: bool
    memory_limit_mib: int | None
    seed: int = 0
    gpu_request: str | None = None  # recorded at the end of "configuration" once the run starts
    image_size: int = DEFAULT_IMAGE_SIZE
    # How --device was resolved (auto → cuda/cpu, the CPU's cap and why); None on a resume, whose
    # recorded configuration keeps what its run wrote.
    device_choice: DeviceChoice | None = None

    @classmethod
    def from_flags(cls, names: list[str], precision: str, device: str, gpu: str | None, vram_limit: int | None,
                   reserve: int, timeout: float | None, runtime: str, dataset: str, data_dir: str | None,
                   cudnn_benchmark: bool, memory_limit: int | None, gpu_request: str | None = None,
                   image_size: int = DEFAULT_IMAGE_SIZE) -> RunConfig:
        """The checks both benchmarks share (the model, data, device and budget); Fail on bad input."""
        if timeout is not None:
            check_timeout(timeout)
        if device == "cpu" and vram_limit is not None:
            raise Fail("--vram-limit applies to --device cuda; on the CPU use --memory-limit")
        if memory_limit is not None and memory_limit <= 0:
            raise Fail(f"--memory-limit must be > 0 MiB (got {memory_limit})")
        if device == "cuda" and memory_limit is not None:
            raise Fail("--memory-limit applies to --device cpu; on a GPU use --vram-limit")
        if memory_limit is not None:
            _check_memory_limit(memory_limit)
        # A flag that cannot apply is refused, never recorded as if it had been used.
        if device == "cpu" and gpu is not None:
            raise Fail(f"--gpu {gpu} applies to --device cuda; a --device cpu run uses no GPU")
        if gpu_request not in (None, "auto") and (runtime == "local" or device == "cpu"):
            where = "--runtime local" if runtime == "local" else "--device cpu"
            raise Fail(f"--gpu-request {gpu_request} is how Docker attaches a GPU; it does not apply with {where}")
        if reserve < 0:
            raise Fail(f"--reserve must be ≥ 0 (got {reserve})")
        if vram_limit is not None and vram_limit <= 0:
            raise Fail(f"--vram-limit must be > 0 (got {vram_limit})")
        check_counts(("--reserve", reserve), ("--vram-limit", vram_limit or 0))
        if dataset == "synthetic" and data_dir:
            raise Fail("--data-dir is only read with --dataset cifar10")
        if isinstance(image_size, bool) or not isinstance(image_size, int) \
                or not MIN_IMAGE_SIZE <= image_size <= MAX_IMAGE_SIZE:
            raise Fail(f"--image-size must be {MIN_IMAGE_SIZE} to {MAX_IMAGE_SIZE} pixels (got {image_size!r})")
        if dataset == "cifar10" and image_size != DEFAULT_IMAGE_SIZE:
            raise Fail(f"--image-size {image_size}: CIFAR-10 is 32×32; other sizes use --dataset synthetic")
        return cls(tuple(names), ("fp32", "bf16") if precision == "both" else (precision,), device, gpu, vram_limit,
                   reserve, DEFAULT_TIMEOUT_S if timeout is None else timeout, runtime, MODEL, dataset, data_dir,
                   cudnn_benchmark, memory_limit, gpu_request=gpu_request, image_size=image_size)

    @property
    def min_batch(self) -> int:
        return MODEL_MIN_BATCH[self.model]

    def json_head(self) -> dict[str, Any]:
        """The artifact's "configuration" keys before the benchmark's own."""
        return {"engines": list(self.engines), "precisions": list(self.precisions), "device": self.device,
                "gpu": self.gpu, "vram_limit_mib": self.vram_limit_mib, "reserve_mib": self.reserve_mib,
                "timeout_s": self.timeout_s, "runtime": self.runtime, "model": self.model, "dataset": self.dataset,
                "data_dir": self.data_dir, "cudnn_benchmark": self.cudnn_benchmark,
                "memory_limit_mib": self.memory_limit_mib,
                **({"device_choice": self.device_choice.to_json()} if self.device_choice else {}),
                "seed": self.seed, "optimizer": "Adam lr 0.001",
                "loss": "cross-entropy", **self._input_json()}

    def _input_json(self) -> dict[str, Any]:
        if self.image_size == DEFAULT_IMAGE_SIZE:  # as every run wrote it before --image-size existed
            return {"input": "32x32x3 (CIFAR-10 geometry), 10 classes"}
        n = self.image_size
        return {"input": f"{n}x{n}x3 ({'ImageNet' if n == 224 else 'other'} geometry), 10 classes",
                "image_size": n}

    def json_tail(self) -> dict[str, Any]:
        """The keys after the benchmark's own: the GPU request kind, once the run has chosen it."""
        return {} if self.gpu_request is None else {"gpu_request": self.gpu_request}

    def resumed_json(self, recorded: dict[str, Any]) -> dict[str, Any]:
        """A partial's "configuration" as its resume continues it: a new --timeout, the data folder
        resolved; every other key (and their order) as recorded."""
        return {**recorded, "timeout_s": self.timeout_s, "data_dir": self.data_dir}

    @staticmethod
    def flags_of_json(recorded: dict[str, Any], own_keys: dict[str, tuple[type, ...]]) -> dict[str, Any]:
        """The common flags a recorded configuration stands for (checked: types, then the values a
        flag can take); Fail where no run could have written it. `own_keys` are the benchmark's."""
        for key, types in {**COMMON_KEYS, **own_keys}.items():
            v = recorded.get(key, ...)
            if v is ... or not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
                raise Fail(f"{key} is {'missing' if v is ... else repr(v)}")
        precision = _PRECISIONS.get(tuple(recorded["precisions"]))
        for key, allowed in (("device", Device), ("runtime", RuntimeName), ("dataset", Dataset)):
            if recorded[key] not in {m.value for m in allowed}:
                raise Fail(f"{key} is {recorded[key]!r}")
        if (precision is None or recorded["model"] != MODEL
                or not all(isinstance(e, str) for e in recorded["engines"])):
            raise Fail(f"precisions {recorded['precisions']!r}, model {recorded['model']!r}, "
                       f"engines {recorded['engines']!r}")
        request = recorded.get("gpu_request")
        size = recorded.get("image_size", DEFAULT_IMAGE_SIZE)  # absent: a 32-pixel run
        return {"image_size": size, "engines": ",".join(recorded["engines"]), "precision": precision, "device": recorded["device"],
                "vram_limit": recorded["vram_limit_mib"], "reserve": recorded["reserve_mib"],
                "timeout": recorded["timeout_s"], "runtime": recorded["runtime"], "dataset": recorded["dataset"],
                "data_dir": recorded["data_dir"], "cudnn_benchmark": recorded["cudnn_benchmark"],
                "memory_limit": recorded["memory_limit_mib"], "gpu": recorded["gpu"],
                "gpu_request": request if isinstance(request, str) else None}


def choose_device(device: str, memory_limit: int | None, runtime: str, python: str | None, engines: str,
                  **gpu_flags: object) -> DeviceChoice:
    """--device for a new run (auto resolved, the CPU capped); `gpu_flags`: flag name → value of the
    GPU-only flags (those given ask auto for the GPU)."""
    given = [f"--{k.replace('_', '-')}" for k, v in gpu_flags.items() if v is not None]
    return choose(device, memory_limit=memory_limit, gpu_flags=given, runtime=runtime, python=python,
                  engines=engine_names(engines))


def engine_names(engines: str) -> list[str]:
    return [e.name for e in parse_engines(engines)]


@dataclass(frozen=True)
class DataLaunch:
    """How a data benchmark (datasize, dataload, train-e2e) starts its trials, checked once for all three:
    `--runtime` (local or docker), `--python` (an executable; default this interpreter) and `--timeout` (finite,
    > 0, at most a week; default the benchmark's own)."""
    runtime: str
    python: str
    timeout_s: float

    @classmethod
    def of(cls, runtime: str, python: str | None, timeout: float | None, default_timeout_s: float) -> DataLaunch:
        if runtime not in DATA_RUNTIMES:
            raise Fail(f"--runtime must be {' or '.join(DATA_RUNTIMES)} (got {runtime!r})")
        if timeout is not None:  # nan, inf or a week and more: one line, before anything is written
            check_timeout(timeout)
        py = python or sys.executable
        if not os.access(py, os.X_OK):
            raise Fail(f"--python {py}: not an executable")
        return cls(runtime, py, default_timeout_s if timeout is None else float(timeout))


def check_timeout(timeout: float) -> None:
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise Fail(f"--timeout must be > 0 and at most {MAX_TIMEOUT_S:.0f} s (7 days) (got {timeout})")


def check_idle_threshold(mib: float) -> None:
    if not (math.isfinite(mib) and 0 <= mib <= MAX_COUNT):
        raise Fail(f"--idle-threshold must be a number of MiB ≥ 0 (got {mib})")


def check_counts(*flags: tuple[str, int]) -> None:
    for flag, value in flags:
        if value > MAX_COUNT:
            raise Fail(f"{flag} must be at most {MAX_COUNT:,} (got {value:,})")


def check_min_batch(flag: str, batch: int) -> None:
    if batch <= 0:
        raise Fail(f"{flag} must be > 0 (got {batch})")
    if batch < MODEL_MIN_BATCH[MODEL]:
        raise Fail(f"{flag} must be ≥ {MODEL_MIN_BATCH[MODEL]}: ResNet-50 at 32×32 cannot "
                   "train at batch 1 (BatchNorm over 1×1 maps needs 2 samples)")


def _host_ram_mib() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError):  # not on this platform
        return None


def _check_memory_limit(mib: int) -> None:
    if mib < MIN_MEMORY_LIMIT_MIB:
        raise Fail(f"--memory-limit must be at least {MIN_MEMORY_LIMIT_MIB} MiB (Docker's minimum; "
                   f"no trial starts in less) (got {mib})")
    ram = _host_ram_mib()
    if ram is not None and mib > ram:
        raise Fail(f"--memory-limit {mib:,} MiB is above this host's {ram:,} MiB of RAM")
