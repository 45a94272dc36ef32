"""`kitctl run datasize`: its flags into a DatasizeConfig, one trial process per dataset written."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ...errors import EXIT_INCOMPLETE, EXIT_OK, EXIT_USAGE, Fail, err
from ...runconfig import O_PYTHON, O_RESULTS_DIR, O_RESUME
from ... import datarun as common
from .config import SIDES, DatasizeConfig


def datasize(
    corpus: str = typer.Option("data/corpus", help="A corpus made by `kitctl data make`."),
    formats: str = typer.Option("ffcv,webdataset,folder", help="Comma list: ffcv, webdataset, folder."),
    encodings: str = typer.Option("jpeg50,jpeg90,jpeg100,mix90,raw", help="Comma list (mix90: JPEG with p=0.75)."),
    sides: str = typer.Option(SIDES, help="Max side(s) in px (images are downscaled, never upscaled)."),
    limit: Optional[int] = typer.Option(None, help="Only the first N corpus images (bytes/image is an average)."),
    workers: int = typer.Option(4, help="Writer processes."),
    timeout: Optional[float] = typer.Option(None, help="Seconds per dataset before the kit kills it (default 3600)."),
    python: Optional[str] = O_PYTHON,
    results_dir: Path = O_RESULTS_DIR,
    resume: Optional[Path] = O_RESUME,
) -> None:
    """Bytes per image of each loader's dataset format × encoding × max side, and the ImageNet equivalent."""
    from . import run as runner
    from .table import all_ok, print_table

    console = Console(highlight=False)
    try:
        store, doc, cfg = common.open_store(
            "datasize", results_dir, resume,
            lambda: DatasizeConfig.from_flags(corpus, formats, encodings, sides, limit, workers, timeout, python),
            DatasizeConfig.from_json)
    except Fail as exc:
        err.print(f"kitctl: {exc}")
        raise typer.Exit(EXIT_USAGE)
    doc["runtime"]["interpreter"] = cfg.python
    final = common.execute(store, doc, lambda: runner.run(cfg, store, doc, console.print))
    print_table(console, doc, final)
    raise typer.Exit(EXIT_OK if all_ok(doc) else EXIT_INCOMPLETE)
