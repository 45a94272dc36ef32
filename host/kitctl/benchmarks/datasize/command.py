"""`kitctl run datasize`: its flags into a DatasizeConfig, one trial process or container per dataset written."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ...cli.options import O_CSV, O_JSON, O_PYTHON, O_RESULTS_DIR, O_RESUME_DATA, Context, Option, given_flags
from ..data import session as common
from .config import DEFAULT_TIMEOUT_S, SIDES, DatasizeConfig


def datasize(
    ctx: Context,
    corpus: str = Option("data/corpus", help="A corpus made by `kitctl data make`."),
    formats: str = Option("ffcv,webdataset,folder", help="Comma list: ffcv, webdataset, folder."),
    encodings: str = Option("jpeg50,jpeg90,jpeg100,mix90,raw", help="Comma list (mix90: JPEG with p=0.75)."),
    sides: str = Option(SIDES, help="Max side(s) in px (images are downscaled, never upscaled)."),
    limit: Optional[int] = Option(None, help="Only the first N corpus images (bytes/image is an average)."),
    workers: int = Option(4, help="Writer processes."),
    timeout: Optional[float] = Option(None, help="Seconds per dataset before the kit kills it (default "
                                                 f"{DEFAULT_TIMEOUT_S:.0f})."),
    python: Optional[str] = O_PYTHON,
    runtime: str = Option("local", help="local: a fresh process per dataset; docker: a fresh container of the "
                          "format's writer image (kitctl/loader-torch:<tag>: folder, webdataset; "
                          "kitctl/loader-ffcv:<tag>: ffcv), so the host needs no ffcv or webdataset."),
    image_tag: str = Option("ci", help="--runtime docker: the loader images' tag."),
    results_dir: Path = O_RESULTS_DIR,
    resume: Optional[Path] = O_RESUME_DATA,
    as_json: bool = O_JSON,
    csv: Optional[Path] = O_CSV,
) -> None:
    """Bytes per image of each loader's dataset format × encoding × max side, and the ImageNet equivalent."""
    from . import run as runner
    from .table import all_ok, print_table

    common.run_command(
        "datasize", results_dir, resume,
        lambda: DatasizeConfig.from_flags(corpus, formats, encodings, sides, limit, workers, timeout, python, runtime,
                                          image_tag),
        DatasizeConfig.from_json, DatasizeConfig.runtime_record, runner.run, print_table, all_ok,
        as_json=as_json, csv=csv, given=given_flags(ctx))
