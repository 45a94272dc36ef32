"""`kitctl run train-e2e`: its flags into a TrainE2EConfig, one fresh trial process or container per run."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..data import session as common
from ...cli.options import O_CSV, O_JSON, O_PYTHON, O_RESULTS_DIR, O_RESUME_DATA, Context, Option, given_flags
from ...core.loader_window import STEADY_TOLERANCE, WINDOW_IMAGES, WINDOW_SECONDS
from .config import DEFAULT_TIMEOUT_S, TrainE2EConfig


def train_e2e(
    ctx: Context,
    loaders: Optional[str] = Option(None, help="Comma list: pytorch-dataloader, webdataset, ffcv, pytorch-nvjpeg "
                                    "(GPU), dali-cpu (default: the first four, pytorch-nvjpeg left out on "
                                    "a host without a GPU; with --runtime docker the first three); synthetic "
                                    "(on-device data, the upper bound) always runs first."),
    model: str = Option("resnet50", help="Comma list: resnet50, resnet18."),
    precision: str = Option("auto", help="auto (bf16 autocast on CUDA, fp32 on CPU), bf16 or fp32."),
    device: str = Option("auto", help="auto (CUDA when there is one), cpu or cuda."),
    workers: str = Option("all", help="Loader workers: a number or all (every core)."),
    encoding: str = Option("jpeg90", help="jpeg50, jpeg90, jpeg100, mix90 or raw."),
    side: int = Option(256, help="Max side in px of the dataset (the crop is 224 either way)."),
    batch: int = Option(256, help="Batch size."),
    warmup: int = Option(10, help="Untimed training steps first (workers start, cuDNN autotune)."),
    steps: int = Option(50, help="Timed training steps; keep warm-up + (2 × workers + 6) + steps batches "
                             "within one epoch of --limit images."),
    window_images: int = Option(WINDOW_IMAGES, help="The loader alone (dataload's measurement, before "
                                "training): whole epochs after a warm-up epoch until at least N images ..."),
    window_seconds: float = Option(WINDOW_SECONDS, help="... and at least S seconds (its start-up apart)."),
    steady_tolerance: float = Option(STEADY_TOLERANCE, help="The loader alone is steady when its window's "
                                     "halves differ by at most this fraction."),
    runs: int = Option(3, help="Fresh processes per model × loader (median and interval over them)."),
    corpus: str = Option("data/corpus", help="A corpus made by `kitctl data make`."),
    data_dir: Optional[str] = Option(None, help="Where datasets are written and reused (default: beside the corpus)."),
    limit: Optional[int] = Option(None, help="Only the first N corpus images (epochs repeat as training needs)."),
    timeout: Optional[float] = Option(None, help="Seconds per run before the kit kills it (default "
                                                 f"{DEFAULT_TIMEOUT_S:.0f})."),
    python: Optional[str] = O_PYTHON,
    runtime: str = Option("local", help="local: a fresh process per run; docker: a fresh container of the "
                          "loader's image (kitctl/loader-torch:<tag>: synthetic, pytorch-dataloader, webdataset; "
                          "kitctl/loader-ffcv:<tag>: ffcv), CPU only; datasets written in the writer's image."),
    image_tag: str = Option("ci", help="--runtime docker: the loader images' tag."),
    results_dir: Path = O_RESULTS_DIR,
    resume: Optional[Path] = O_RESUME_DATA,
    as_json: bool = O_JSON,
    csv: Optional[Path] = O_CSV,
) -> None:
    """End to end: ResNet training images/s fed by each loader vs synthetic on-device data (which keeps the GPU busy)."""
    from . import run as runner
    from .table import all_ok, print_table

    common.run_command(
        "train-e2e", results_dir, resume,
        lambda: TrainE2EConfig.from_flags(corpus, data_dir, loaders, model, precision, device, workers, encoding,
                                          side, batch, warmup, steps, runs, limit, timeout, python, runtime,
                                          image_tag, window_images, window_seconds, steady_tolerance),
        TrainE2EConfig.from_json, TrainE2EConfig.runtime_record, runner.run, print_table, all_ok, uses_gpu=True,
        as_json=as_json, csv=csv, given=given_flags(ctx))
