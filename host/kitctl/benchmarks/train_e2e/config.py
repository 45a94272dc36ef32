"""train-e2e's typed configuration: built and checked once from the flags, recorded in the artifact, rebuilt
from a partial's record for --resume through the same checks."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.loaders import DATA_ENCODINGS as ENCODINGS
from ..data.loaders import LOADER_FORMAT as FORMAT_OF
from ..data.checks import check_corpus, check_data_dir, check_workers, parse_ints, parse_names
from ..data.corpus import corpus_images
from ..data.images import loader_image, loader_runtime
from ..data.loaders import GPU_LOADERS, LOADER_IMAGE, TORCH_IMAGES, TRAIN_LOADERS
from ...core.gpu import detect_gpu
from ...errors import Fail
from ...run.config import DataLaunch, check_counts
from ...core.loader_window import STEADY_TOLERANCE, LoaderWindow
from ...core.recorded import view
from ..data.recorded import DataRecorded

# dali-gpu's batches stay in DALI's GPU tensors (no hand-off to torch in the trial yet)
LOADERS = ("synthetic", *TRAIN_LOADERS)
MODELS = ("resnet50", "resnet18")
PRECISIONS = ("auto", "bf16", "fp32")
DEVICES = ("auto", "cpu", "cuda")
CI_LEVEL = 0.95
MIN_SIDE = 32  # the dataset writers' smallest max side (trials/dataload/writers.py: check)
# --runtime docker: the image each loader trains in (the training step needs torch: loader-dali has none, so
# dali-cpu is refused there; synthetic needs no loader and runs in the torch image).
TRAIN_IMAGE = {"synthetic": "torch", **{ld: im for ld, im in LOADER_IMAGE.items() if im in TORCH_IMAGES}}
DEFAULT_LOADERS = {"local": "pytorch-dataloader,webdataset,ffcv,pytorch-nvjpeg",
                   "docker": "pytorch-dataloader,webdataset,ffcv"}


DEFAULT_TIMEOUT_S = 900.0  # --timeout's default: a training run: the loader alone, then the timed steps

@dataclass(frozen=True)
class TrainE2EConfig:
    corpus: str
    data_dir: str  # shared with dataload: <format>-<encoding>-<side>-n<images>, written once and reused
    loaders: tuple[str, ...]  # "synthetic" first: the upper bound every loader is read against
    models: tuple[str, ...]
    precision: str  # auto: bf16 autocast on CUDA, fp32 on CPU
    device: str
    workers: int
    encoding: str
    side: int
    batch: int
    warmup: int
    steps: int
    runs: int
    limit: int | None
    timeout_s: float
    python: str
    runtime: str = "local"  # local: a fresh process; docker: a fresh container of the loader's image
    image_tag: str = "ci"  # docker: kitctl/loader-<image>:<tag>
    ci_level: float = CI_LEVEL
    window: LoaderWindow | None = None  # the loader-alone window rule; None: recorded before it

    @classmethod
    def from_flags(cls, corpus: str, data_dir: str | None, loaders: str, models: str, precision: str, device: str,
                   workers: str, encoding: str, side: int, batch: int, warmup: int, steps: int, runs: int,
                   limit: int | None, timeout: float | None, python: str | None, runtime: str = "local",
                   image_tag: str = "ci", window_images: int | None = None, window_seconds: float | None = None,
                   steady_tolerance: float | None = None) -> TrainE2EConfig:
        """Without window_images and window_seconds (a partial recorded before the rule): the loader alone over
        whole epochs holding --steps batches, as it was measured."""
        launch = DataLaunch.of(runtime, python, timeout, DEFAULT_TIMEOUT_S)
        given = bool(loaders)
        loaders = loaders or DEFAULT_LOADERS[runtime]
        for flag, v in (("--batch", batch), ("--warmup", warmup), ("--steps", steps), ("--runs", runs),
                        ("--side", side)):
            if v <= 0:
                raise Fail(f"{flag} must be > 0 (got {v})")
        check_counts(("--batch", batch), ("--warmup", warmup), ("--steps", steps), ("--runs", runs), ("--side", side),
                     *((("--limit", limit),) if limit is not None else ()))  # --runs 1e30 ran until stopped
        if precision not in PRECISIONS:
            raise Fail(f"--precision must be one of {', '.join(PRECISIONS)} (got {precision!r})")
        if device not in DEVICES:
            raise Fail(f"--device must be one of {', '.join(DEVICES)} (got {device!r})")
        if encoding not in ENCODINGS:
            raise Fail(f"--encoding: unknown {encoding!r} (known: {', '.join(ENCODINGS)})")
        if limit is not None and limit <= 0:
            raise Fail(f"--limit must be > 0 (got {limit})")
        window = None
        if window_images is not None or window_seconds is not None:
            window = LoaderWindow.of(window_images, window_seconds,
                                     STEADY_TOLERANCE if steady_tolerance is None else steady_tolerance)
        names = parse_names("--loaders", loaders, LOADERS)
        names = ("synthetic",) + tuple(n for n in names if n != "synthetic")  # the upper bound always runs
        if runtime == "docker":
            # Refused up front rather than a failed cell: no run of it could succeed (why, in the line).
            without = [n for n in names if n not in TRAIN_IMAGE]
            if without:
                why = {"dali-cpu": "its image (loader-dali) has no torch for the training step",
                       "pytorch-nvjpeg": "it decodes on the GPU, and train-e2e's containers get no GPU yet"}
                raise Fail("--runtime docker: " + "; ".join(f"{n}: {why.get(n, 'no loader image for it yet')}"
                                                           for n in without)
                           + f" (docker trains with {', '.join(x for x in TRAIN_IMAGE if x != 'synthetic')}); "
                             "use --runtime local for it")
            if device == "cuda":
                raise Fail("--runtime docker --device cuda: the loader images are CPU builds and their containers "
                           "get no GPU yet; use --runtime local on a GPU")
        model_names = parse_names("--model", models, MODELS)
        ws = check_workers("--workers", parse_ints("--workers", workers, 1, all_value=os.cpu_count() or 1))
        if len(ws) != 1:
            raise Fail(f"--workers: one number or all (got {workers!r}); the workers sweep is dataload's")
        if side < MIN_SIDE:
            raise Fail(f"--side {side}: a dataset's max side is at least {MIN_SIDE} px (the loaders crop 224 px "
                       "from it, upscaling what is smaller)")
        if device == "cuda" and runtime == "local" and detect_gpu() is None:
            raise Fail("--device cuda: NVML finds no GPU on this host; use --device cpu (or auto)")
        on_gpu = [n for n in names if n in GPU_LOADERS]
        if on_gpu and runtime == "local" and (device == "cpu" or (device == "auto" and detect_gpu() is None)):
            # a GPU decoder cannot run here: no run of it could succeed (a failed cell and exit 1 on every run)
            if given:
                why = "--device cpu" if device == "cpu" else "NVML finds no GPU on this host"
                raise Fail(f"--loaders {','.join(on_gpu)}: {' and '.join(on_gpu)} decode on the GPU ({why}); "
                           "leave them out, or run where there is one")
            names = tuple(n for n in names if n not in GPU_LOADERS)  # the default list, on a CPU host
        c = check_corpus(corpus)
        n = corpus_images(str(c), limit)
        if len(names) > 1 and steps * batch > n:
            raise Fail(f"--steps {steps} x --batch {batch} = {steps * batch:,} images is more than one epoch of the "
                       f"corpus ({n:,} images" + (f", --limit {limit}" if limit else "") + "); lower --steps or "
                       "--batch, or make a larger corpus")
        cfg = cls(str(c), str(Path(data_dir).expanduser().resolve()) if data_dir else str(c.parent / "datasets"),
                  names, model_names, precision, device, ws[0], encoding, int(side), batch, warmup, steps, runs,
                  limit, launch.timeout_s, launch.python, launch.runtime, image_tag, window=window)
        check_data_dir(cfg.data_dir, cfg.corpus, cfg.limit, cfg.datasets())
        return cfg

    @classmethod
    def from_json(cls, r: dict[str, Any]) -> TrainE2EConfig:
        try:
            return cls.from_flags(r["corpus"], r["data_dir"], ",".join(r["loaders"]), ",".join(r["models"]),
                                  r["precision"], r["device"], str(r["workers"]), r["encoding"], r["side"], r["batch"],
                                  r["warmup"], r["steps"], r["runs"], r["limit"], r["timeout_s"], r["python"],
                                  r.get("runtime", "local"), r.get("image_tag", "ci"), r.get("window_images"),
                                  r.get("window_seconds"), r.get("steady_tolerance"))
        except (KeyError, TypeError) as exc:
            raise Fail(f"the partial's configuration is not a train-e2e one ({exc})") from None

    def to_json(self) -> dict[str, Any]:
        return {"corpus": self.corpus, "data_dir": self.data_dir, "loaders": list(self.loaders),
                "models": list(self.models), "precision": self.precision, "device": self.device,
                "workers": self.workers, "encoding": self.encoding, "side": self.side, "batch": self.batch,
                "warmup": self.warmup, "steps": self.steps, "runs": self.runs, "limit": self.limit,
                "timeout_s": self.timeout_s, "python": self.python, "runtime": self.runtime,
                "image_tag": self.image_tag, "ci_level": self.ci_level,
                **(self.window.to_json() if self.window else {}),
                "pipeline": "decode -> RandomResizedCrop 224 -> flip -> uint8 batch (the dataload pipeline, page "
                            "cache warm) -> to the device, normalised there (ImageNet mean/std, channels-last) -> "
                            "forward, cross-entropy, backward, Adam lr 0.001 (bf16 autocast on CUDA unless "
                            "--precision fp32)",
                "synthetic_meaning": "one uint8 batch of the same shape resident on the device, normalised there "
                                     "every step: the training step alone, the upper bound"}

    def datasets(self) -> list[tuple[str, str, int]]:
        fmts = list(dict.fromkeys(FORMAT_OF[x] for x in self.loaders if x != "synthetic"))
        return [(f, self.encoding, self.side) for f in fmts]

    def cells(self) -> list[tuple[str, str]]:
        return [(m, ld) for m in self.models for ld in self.loaders]

    def images_to_last_timed_step(self) -> int:
        """The images a loader hands out from its epoch's start through the last timed step: the warm-up steps, the
        batches it can have read ahead, dropped before the window (2 × workers + 6: trials/dataload/train_e2e.py),
        and the timed steps. A corpus (or --limit) smaller than this puts an epoch start inside the window."""
        return (self.warmup + 2 * self.workers + 6 + self.steps) * self.batch

    def image(self, loader: str) -> str | None:
        """The image a docker run of the loader starts (None with the local runtime)."""
        return loader_image(TRAIN_IMAGE[loader], self.image_tag) if self.runtime == "docker" else None

    def runtime_record(self) -> dict[str, Any]:
        return loader_runtime(self)


@dataclass(frozen=True)
class TrainE2ERecorded(DataRecorded):
    """train-e2e's "configuration" as an artifact recorded it, for the end table, reports, compare and the agreement
    check: each value as written, a missing key its default (see kitctl.core.recorded; `TrainE2EConfig` above is
    the strict side, rebuilt from a partial's record for --resume). The window keys are absent before the rule."""

    models: Any = ()
    precision: Any = None
    device: Any = None
    workers: Any = None
    encoding: Any = None
    side: Any = None
    warmup: Any = None
    steps: Any = None
    synthetic_meaning: Any = ""


def recorded(doc: dict[str, Any]) -> TrainE2ERecorded:
    """What a train-e2e artifact's configuration recorded (read once per document by each reader)."""
    return view(TrainE2ERecorded, doc)
