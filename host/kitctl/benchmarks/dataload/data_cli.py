"""`kitctl data make`: the deterministic offline image corpus (trials/dataload/corpus.py) that datasize and
dataload read, made by the trial's interpreter (it needs numpy, pillow, scikit-image; the host does not)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer

from ...core.paths import kit_root
from ...errors import EXIT_USAGE, err

data_app = typer.Typer(no_args_is_help=True, help="Datasets for the data-loading benchmarks.")


@data_app.command("make")
def make(
    out: Path = typer.Option(Path("data/corpus"), help="A new folder for the corpus."),
    images: int = typer.Option(1000, help="Number of images (CI: a few hundred; measurements: 50,000 or more)."),
    classes: int = typer.Option(100, help="Class folders (image i is in class i mod classes)."),
    seed: int = typer.Option(0, help="The corpus is a pure function of (seed, image index)."),
    workers: Optional[int] = typer.Option(None, help="Processes (default: all cores)."),
    python: Optional[str] = typer.Option(None, help="Interpreter with numpy, pillow and scikit-image (default: this one)."),
) -> None:
    """Make a seeded image corpus from scikit-image's CC0/public-domain photographs (random crops, ImageNet-like
    sizes with a tail of large images, gain/noise jitter), with a manifest of sources, licences, sizes, bytes."""
    if images <= 0 or classes <= 0 or (workers is not None and workers <= 0):
        err.print("kitctl: --images, --classes and --workers must be > 0")
        raise typer.Exit(EXIT_USAGE)
    if (out / "manifest.json").exists():
        err.print(f"kitctl: {out} already holds a corpus; choose a new folder")
        raise typer.Exit(EXIT_USAGE)
    argv = [python or sys.executable, str(kit_root() / "trials" / "dataload" / "corpus.py"), "--out", str(out),
            "--images", str(images), "--classes", str(classes), "--seed", str(seed)]
    if workers:
        argv += ["--workers", str(workers)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        err.print(f"kitctl: data make failed: {last}")
        raise typer.Exit(EXIT_USAGE)
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    typer.echo(f"{out}: {m['images']:,} images in {m['classes']} classes from {len(m['sources'])} licensed "
               f"photographs, {m['bytes'] / 1e6:,.1f} MB ({m['bytes_per_image'] / 1e3:,.1f} KB/image), long side "
               f"median {m['long_side_px']['median']:.0f} px, {m['long_side_px']['share_over_1000']:.1%} over 1,000 px; "
               f"{m['make_seconds']:.1f} s on {m['make_workers']} processes")
