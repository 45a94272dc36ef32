"""`kitctl run dataload`: its flags into a DataloadConfig, one fresh trial process per run."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ...cli.options import O_CSV, O_JSON, O_PYTHON, O_RESULTS_DIR, O_RESUME_DATA, Context, Option, given_flags
from ..data import session as common
from .config import DEFAULT_TIMEOUT_S, DataloadConfig
from ...core.loader_window import STEADY_TOLERANCE, WINDOW_IMAGES, WINDOW_SECONDS


def dataload(
    ctx: Context,
    loaders: str = Option("pytorch-dataloader,webdataset,ffcv",
                          help="Comma list: pytorch-dataloader, webdataset, ffcv, dali-cpu, "
                               "pytorch-nvjpeg (GPU), dali-gpu (GPU)."),
    workers: str = Option("all", help="Loader workers: a comma list (a sweep: 1,2,4,8,16) or all (every core)."),
    source: str = Option("ram", help="ram (page cache warm, checked) and/or cold (dropped before each epoch)."),
    encoding: str = Option("jpeg90", help="Comma list: jpeg50, jpeg90, jpeg100, mix90, raw."),
    side: str = Option("256", help="Max side(s) in px of the dataset."),
    runs: int = Option(5, help="Fresh processes per cell (median and interval over them)."),
    window_images: int = Option(WINDOW_IMAGES, help="Time whole epochs (after one warm-up epoch) until the "
                                "window holds at least N images ..."),
    window_seconds: float = Option(WINDOW_SECONDS, help="... and lasts at least S seconds (the steady rate; the "
                                   "loader's start-up is reported apart)."),
    steady_tolerance: float = Option(STEADY_TOLERANCE, help="A run is steady when its window's first and "
                                     "second half of batches differ by at most this fraction."),
    epochs: Optional[int] = Option(None, help="A third minimum of the window: at least N timed epochs."),
    batch: int = Option(256, help="Batch size."),
    corpus: str = Option("data/corpus", help="A corpus made by `kitctl data make`."),
    data_dir: Optional[str] = Option(None, help="Where datasets are written and reused (default: beside the corpus)."),
    limit: Optional[int] = Option(None, help="Only the first N corpus images."),
    timeout: Optional[float] = Option(None, help="Seconds per run before the kit kills it (default "
                                                 f"{DEFAULT_TIMEOUT_S:.0f})."),
    python: Optional[str] = O_PYTHON,
    runtime: str = Option("local", help="local: a fresh process per run; docker: a fresh container of the "
                          "loader's image (kitctl/loader-torch:<tag>: pytorch-dataloader, webdataset, "
                          "pytorch-nvjpeg; kitctl/loader-ffcv: ffcv; kitctl/loader-dali:<tag>: dali-cpu, "
                          "dali-gpu), a GPU loader's with the GPU attached; datasets written in the writer's "
                          "image (folder, webdataset: loader-torch; ffcv: loader-ffcv)."),
    image_tag: str = Option("ci", help="--runtime docker: which build of the loader images (compose.yaml): "
                            "ci (CPU, CI's; no GPU loaders), cu130 (CUDA), cu130-host-userland."),
    read_mbps: Optional[float] = Option(None, help="--runtime docker, --source cold: cap the loaders' reads "
                                        "of the datasets at N MB/s (Docker's --device-read-bps on the disk "
                                        "holding --data-dir): slow or network storage, emulated."),
    cpus: Optional[str] = Option(None, help="Hold each run to some CPUs (as taskset -c does): workers (as many "
                                 "as the cell has workers: the first N this host allows) or a list such as 0-7. "
                                 "Unpinned, N workers use spare cores too."),
    results_dir: Path = O_RESULTS_DIR,
    resume: Optional[Path] = O_RESUME_DATA,
    as_json: bool = O_JSON,
    csv: Optional[Path] = O_CSV,
) -> None:
    """Data-loading images/s per loader (decode → RandomResizedCrop 224 → flip), from RAM or cold storage."""
    from . import run as runner
    from .table import all_ok, print_table

    common.run_command(
        "dataload", results_dir, resume,
        lambda: DataloadConfig.from_flags(corpus, data_dir, loaders, workers, source, encoding, side, runs, epochs,
                                          batch, limit, timeout, python, runtime, image_tag, read_mbps,
                                          window_images, window_seconds, steady_tolerance, cpus),
        DataloadConfig.from_json,
        DataloadConfig.runtime_record, runner.run, print_table, all_ok, uses_gpu=True,
        as_json=as_json, csv=csv, given=given_flags(ctx))
